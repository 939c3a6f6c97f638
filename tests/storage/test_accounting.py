"""Accounting [G3] beyond the conformance suite: the record type the runtime writes, the
migration that counts an existing database, and ``check`` finding a damaged counter,
on real SQLite files and the real PostgreSQL server."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import msgspec
import psycopg
import pytest

from agentledger.runtime import records as runtime_records
from agentledger.storage import RunStatus, UsageTotals
from agentledger.storage.accounting import MODEL_USAGE, USAGE_COLUMNS, add, record_tokens
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance import World
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.postgres import check as pg_check
from agentledger.storage.postgres import usage as pg_usage
from agentledger.storage.sqlite import SQLiteStore, check_invariants
from agentledger.storage.sqlite import schema as sqlite_schema
from agentledger.storage.sqlite import usage as sqlite_usage
from agentledger.storage.usage_check import usage_findings
from tests.storage.postgres.server import create_database, drop_database


def test_the_store_counts_the_record_type_the_runtime_writes() -> None:
    usage = runtime_records.UsagePayload(
        model="m", input_tokens=11, output_tokens=7, cache_read_tokens=5, cache_write_tokens=2
    )
    spec = runtime_records.RecordSpec.usage(1, 0, usage)
    assert spec.type == MODEL_USAGE
    assert record_tokens(spec.type, spec.payload) == (11, 7, 5)


@pytest.mark.parametrize(
    "payload", [b"\x01sealed", b"[1]", b'{"input_tokens": -1}', b'{"input_tokens": 1.5}']
)
def test_an_unreadable_usage_payload_reports_no_tokens(payload: bytes) -> None:
    assert record_tokens(MODEL_USAGE, payload) is None
    assert record_tokens("planner_note", payload) == (0, 0, 0)


async def _fill(world: World) -> str:
    sid = await world.session("s", labels={"tenant": "acme"})
    root = await world.root("root", session=sid)
    body = msgspec.json.encode({"model": "m", "input_tokens": 9, "output_tokens": 4})
    await world.store.append_run_record(
        root.record(MODEL_USAGE, body, event_key="u", at=world.now())
    )
    await world.store.append_run_record(world.note(root, "n"))
    await world.child("child", parent=root)
    other = await world.session("bare")
    await world.store.end_session(other, ended_at=world.now())
    await world.session("idle", labels={"tenant": "acme"})  # no run yet
    await world.finish(root, RunStatus.COMPLETED)
    return sid


async def _label_totals(store: SQLiteStore | PostgresStore) -> list[tuple[str, int, UsageTotals]]:
    return [(r.value, r.sessions, r.usage) for r in await store.usage_by_label("tenant")]


async def _append_more(world: World, sid: str) -> None:
    """A new run and records after a migration: counted into the label's totals too."""
    run = await world.root("later", session=sid)
    body = msgspec.json.encode({"model": "m", "input_tokens": 1, "output_tokens": 1})
    record = run.record(MODEL_USAGE, body, event_key="u", at=world.now())
    await world.store.append_run_record(record)
    await world.finish(run, RunStatus.COMPLETED)


# ------------------------------------------------------------------- SQLite


async def _sqlite_usage(path: Path, sid: str) -> UsageTotals:
    async with await SQLiteStore.open(path, durability="normal") as store:
        return await store.load_session_usage(sid)


def _sqlite_before_clustered_counters(path: Path) -> None:
    """The file as migration 20 left it: the run and the session counters whole, in tables
    of their own (migration 16), counted by migration 18's triggers, and no counters on
    the records."""
    counters = ", ".join(USAGE_COLUMNS)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TEMP TABLE old_runs AS SELECT * FROM usage_runs")
        conn.execute("CREATE TEMP TABLE old_sessions AS SELECT * FROM usage_sessions")
        for name in sqlite_usage.CLUSTERED_TRIGGERS:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DROP VIEW usage_runs")
        conn.execute("DROP VIEW usage_sessions")
        conn.execute("DROP TABLE usage_counts")
        for column in sqlite_usage.CUMULATIVE:
            conn.execute(f"ALTER TABLE records DROP COLUMN {column}")
        for statement in sqlite_schema._USAGE_COUNTERS[:3]:  # the two tables and an index
            conn.execute(statement)
        conn.execute(f"INSERT INTO usage_runs SELECT run_id, session_id, {counters} FROM old_runs")
        conn.execute(f"INSERT INTO usage_sessions SELECT session_id, {counters} FROM old_sessions")
        for name, body in sqlite_usage.TRIGGERS.items():
            conn.execute(f"CREATE TRIGGER {name} {body}")
        conn.execute("DELETE FROM _agentledger_migrations WHERE name = 'usage_counts_clustered'")


def _sqlite_before_label_totals(path: Path) -> None:
    """The file as migration 17 left it: no label totals, no counting triggers, and no
    counter row for a session without runs."""
    _sqlite_before_clustered_counters(path)
    with sqlite3.connect(path) as conn:
        for name in sqlite_usage.TRIGGERS:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DROP TABLE usage_labels")
        conn.execute("DELETE FROM usage_sessions WHERE runs = 0")
        conn.execute("DELETE FROM _agentledger_migrations WHERE name = 'usage_label_totals'")


async def test_sqlite_migration_counts_an_existing_database(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    async with await SQLiteStore.open(path, durability="normal") as store:
        sid = await _fill(World(store, namespace="m"))
        kept = await store.load_session_usage(sid)
        totals = await _label_totals(store)
    assert (kept.runs, kept.input_tokens, kept.output_tokens) == (2, 9, 4)
    assert totals == [("acme", 2, kept)]
    _sqlite_before_label_totals(path)
    with sqlite3.connect(path) as conn:  # the file as migration 15 left it
        conn.execute("DROP TABLE usage_runs")
        conn.execute("DROP TABLE usage_sessions")
        conn.execute("DROP INDEX records_copies")
        conn.execute("DELETE FROM _agentledger_migrations WHERE name = 'usage_counters'")
    assert await _sqlite_usage(path, sid) == kept  # reopening migrates and counts
    assert check_invariants(path) == []


async def test_sqlite_migration_adds_up_the_label_totals(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    async with await SQLiteStore.open(path, durability="normal") as store:
        world = World(store, namespace="m")
        sid = await _fill(world)
        totals = await _label_totals(store)
    _sqlite_before_label_totals(path)
    async with await SQLiteStore.open(path, durability="normal") as store:
        assert await _label_totals(store) == totals
        await _append_more(World(store, namespace="m"), sid)
        grown = await store.load_session_usage(sid)
        assert await _label_totals(store) == [("acme", 2, grown)]
    assert (grown.runs, grown.input_tokens) == (3, 10)
    assert check_invariants(path) == []


async def _usage_of(store: SQLiteStore | PostgresStore, sid: str) -> tuple[object, ...]:
    """A session's counters, each of its runs' and every label's totals."""
    runs = [run.run_id for run in await store.list_runs_by_session(sid)]
    return (
        await store.load_session_usage(sid),
        [await store.load_run_usage(run_id) for run_id in runs],
        await _label_totals(store),
    )


async def test_sqlite_migration_clusters_the_counters_of_an_existing_database(
    tmp_path: Path,
) -> None:
    """Migration 21 moves the run and session counters of a file into one table and onto
    its records, exactly, and counts on from there."""
    path = tmp_path / "old.db"
    async with await SQLiteStore.open(path, durability="normal") as store:
        world = World(store, namespace="m")
        sid = await _fill(world)
        kept = await _usage_of(store, sid)
    _sqlite_before_clustered_counters(path)
    with sqlite3.connect(path) as conn:  # the old layout, counting through its triggers
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        assert {"usage_runs", "usage_sessions"} <= tables
        assert "usage_counts" not in tables
        columns = {row[1] for row in conn.execute("PRAGMA table_info(records)")}
        assert not columns & set(sqlite_usage.CUMULATIVE)
    async with await SQLiteStore.open(path, durability="normal") as store:
        assert await _usage_of(store, sid) == kept
        await _append_more(World(store, namespace="m"), sid)
        grown = await store.load_session_usage(sid)
        assert await _label_totals(store) == [("acme", 2, grown)]
    assert (grown.runs, grown.input_tokens) == (3, 10)
    with sqlite3.connect(path) as conn:
        kinds = dict(conn.execute("SELECT name, type FROM sqlite_master"))
    assert (kinds["usage_counts"], kinds["usage_runs"], kinds["usage_sessions"]) == (
        "table", "view", "view",
    )  # fmt: skip
    assert check_invariants(path) == []


def _writes(statements: list[str]) -> list[str]:
    """What each traced write statement writes into ("INSERT INTO records", say)."""
    return [
        sql.split(" (")[0].split(" SET ")[0]
        for sql in statements
        if sql.startswith(("INSERT", "UPDATE", "DELETE"))
    ]


async def test_sqlite_an_append_sends_no_counter_statement_but_its_tokens(tmp_path: Path) -> None:
    """The schema counts what a record adds: a note's append is its INSERT alone, and a
    usage record's adds one UPDATE of its run's tokens; both are counted, labels too."""
    async with await SQLiteStore.open(tmp_path / "one.db", durability="normal") as store:
        world = World(store, namespace="one")
        sid = await world.session("s", labels={"tenant": "acme", "tier": "gold"})
        root = await world.root("root", session=sid)
        before = await store.load_session_usage(sid)
        writer = store._writer
        assert writer is not None
        assert writer._conn is not None
        seen: list[str] = []
        writer._conn.set_trace_callback(seen.append)
        try:
            await store.append_run_record(world.note(root, "n"))
            note = list(dict.fromkeys(seen))  # a trigger's steps trace as its statement again
            seen.clear()
            body = msgspec.json.encode({"model": "m", "input_tokens": 5, "output_tokens": 2})
            record = root.record(MODEL_USAGE, body, event_key="u", at=world.now())
            await store.append_run_record(record)
            usage = list(dict.fromkeys(seen))
        finally:
            writer._conn.set_trace_callback(None)
        assert _writes(note) == ["INSERT INTO records"], note
        assert _writes(usage) == ["INSERT INTO records", "UPDATE usage_counts"], usage
        after = await store.load_session_usage(sid)
        assert (after.records - before.records, after.input_tokens, after.output_tokens) == (
            2, 5, 2,
        )  # fmt: skip
        (tier,) = await store.usage_by_label("tier")
        assert (tier.value, tier.sessions, tier.usage) == ("gold", 1, after)


def _damage_sqlite(path: Path, sql: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(sql)


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("UPDATE usage_counts SET bytes = bytes + 1 WHERE session_id = 'c-s' AND run_id = ''",
         "usage counters of session 'c-s' differ from its rows: bytes"),
        ("UPDATE usage_counts SET input_tokens = 0 WHERE run_id = 'c-root'",
         "usage counters of run 'c-root' differ from its rows: input_tokens 0 (rows: 9)"),
        ("UPDATE records SET run_bytes = run_bytes + 1 WHERE run_id = 'c-root' "
         "AND seq = (SELECT max(seq) FROM records WHERE run_id = 'c-root')",
         "usage counters of run 'c-root' differ from its rows: bytes"),
        ("UPDATE records SET session_records = 0 WHERE session_id = 'c-s'",
         "usage counters of session 'c-s' differ from its rows: records"),
        ("DELETE FROM usage_counts WHERE run_id = 'c-child'",
         "usage counters of run 'c-child' differ from its rows: bytes 0 (rows: 26), records 0"),
        ("INSERT INTO usage_counts VALUES ('ghost', '', 1, 1, 1, 0, 0, 0)",
         "usage counters of a session that is not stored: 'ghost'"),
        ("UPDATE usage_labels SET records = records + 2",
         "usage totals of label 'tenant'='acme' differ from its sessions' rows: records"),
        ("UPDATE usage_labels SET sessions = 1",
         "usage totals of label 'tenant'='acme' differ from its sessions' rows: sessions 1 "
         "(rows: 2)"),
        ("DELETE FROM usage_labels",
         "usage totals of label 'tenant'='acme' differ from its sessions' rows: sessions 0"),
    ],
)  # fmt: skip
async def test_sqlite_check_finds_a_damaged_counter(
    tmp_path: Path, damage: str, expected: str
) -> None:
    path = tmp_path / "c.db"
    async with await SQLiteStore.open(path, durability="normal") as store:
        await _fill(World(store, namespace="c"))
    assert check_invariants(path) == []
    _damage_sqlite(path, damage)
    found = check_invariants(path)
    assert any(expected in problem for problem in found), found


# --------------------------------------------------------------- PostgreSQL


@pytest.fixture
async def pg_dsn(postgres_dsn: str) -> AsyncIterator[str]:
    dsn = create_database(postgres_dsn, prefix="agentledger_usage")
    try:
        yield dsn
    finally:
        drop_database(dsn)


async def _pg_exec(dsn: str, *statements: str) -> None:
    """Run ``statements`` with the triggers off (as damage outside agentledger would be)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SET session_replication_role = replica")
        for statement in statements:
            await conn.execute(statement)


async def _pg_before_usage_on_rows(dsn: str) -> None:
    """The database as migration 17 left it: the run and the session counters whole in
    their tables, counted by the record's trigger, and no bytes on the run and session rows."""
    restored = [
        f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN {body} RETURN NULL; END $$"
        for name, (_, body) in pg_usage._FUNCTIONS.items()
    ]
    await _pg_exec(
        dsn,
        f"DROP VIEW {pg_usage.RUN_TOTALS}",
        f"DROP VIEW {pg_usage.SESSION_TOTALS}",
        "UPDATE agentledger_usage_runs u SET bytes = u.bytes + r.usage_bytes, "
        "records = u.records + r.last_seq FROM agentledger_runs r WHERE r.run_id = u.run_id",
        "UPDATE agentledger_usage_sessions u SET bytes = u.bytes + s.usage_bytes, "
        "records = u.records + s.last_seq FROM agentledger_sessions s WHERE s.id = u.session_id",
        "ALTER TABLE agentledger_runs DROP COLUMN usage_bytes",
        "ALTER TABLE agentledger_sessions DROP COLUMN usage_bytes",
        *restored,
        "CREATE TRIGGER agentledger_usage_count_record "
        f"{pg_usage.TRIGGERS['agentledger_usage_count_record']} "
        "EXECUTE FUNCTION agentledger_usage_count_record()",
        "DELETE FROM _agentledger_migrations WHERE name = 'usage on run and session rows'",
    )


async def test_postgres_migration_moves_bytes_and_records_onto_the_rows(pg_dsn: str) -> None:
    """Migration 18 keeps every run's, session's and label's totals exact, and counts on
    from there with the rows an append updates anyway."""
    async with await PostgresStore.open(pg_dsn) as store:
        sid = await _fill(World(store, namespace="m"))
        kept = await _usage_of(store, sid)
    await _pg_before_usage_on_rows(pg_dsn)
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:  # the old layout
        cur = await conn.execute(
            "SELECT count(*) FROM information_schema.columns WHERE column_name = 'usage_bytes'"
        )
        assert await cur.fetchone() == (0,)
        cur = await conn.execute(
            "SELECT bytes, records FROM agentledger_usage_sessions WHERE session_id = %s", (sid,)
        )
        assert await cur.fetchone() == (kept[0].bytes, kept[0].records)  # type: ignore[attr-defined]
    async with await PostgresStore.open(pg_dsn) as store:
        assert await _usage_of(store, sid) == kept
        await _append_more(World(store, namespace="m"), sid)
        grown = await store.load_session_usage(sid)
        assert await _label_totals(store) == [("acme", 2, grown)]
        assert (grown.runs, grown.input_tokens) == (3, 10)
        assert grown.records > kept[0].records  # type: ignore[attr-defined]
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        cur = await conn.execute(
            "SELECT records FROM agentledger_usage_sessions WHERE session_id = %s", (sid,)
        )
        assert await cur.fetchone() == (0,)  # its records are on its row now
    assert await pg_check.check_invariants(pg_dsn) == []


async def _pg_before_label_totals(dsn: str) -> None:
    """The database as migration 15 left it (see :func:`_sqlite_before_label_totals`)."""
    await _pg_before_usage_on_rows(dsn)
    drops = [
        f"DROP TRIGGER {name} ON {when.split(' ON ')[1].split()[0]}; DROP FUNCTION {name}()"
        for name, when in pg_usage.TRIGGERS.items()
    ]
    await _pg_exec(
        dsn,
        *drops,
        "DROP TABLE agentledger_usage_labels",
        "DROP FUNCTION agentledger_usage_shard(text)",
        "DELETE FROM agentledger_usage_sessions WHERE runs = 0",
        "DELETE FROM _agentledger_migrations WHERE name = 'usage label totals'",
    )


async def test_postgres_migration_adds_up_the_label_totals(pg_dsn: str) -> None:
    async with await PostgresStore.open(pg_dsn) as store:
        sid = await _fill(World(store, namespace="m"))
        totals = await _label_totals(store)
    await _pg_before_label_totals(pg_dsn)
    async with await PostgresStore.open(pg_dsn) as store:
        assert await _label_totals(store) == totals
        await _append_more(World(store, namespace="m"), sid)
        grown = await store.load_session_usage(sid)
        assert await _label_totals(store) == [("acme", 2, grown)]
    assert await pg_check.check_invariants(pg_dsn) == []


async def test_postgres_migration_counts_an_existing_database(pg_dsn: str) -> None:
    async with await PostgresStore.open(pg_dsn) as store:
        sid = await _fill(World(store, namespace="m"))
        kept = await store.load_session_usage(sid)
    await _pg_before_label_totals(pg_dsn)
    await _pg_exec(
        pg_dsn,
        "DROP TABLE agentledger_usage_runs",
        "DROP TABLE agentledger_usage_sessions",
        "DROP INDEX agentledger_records_copies",
        "DELETE FROM _agentledger_migrations WHERE name = 'usage counters'",
    )
    async with await PostgresStore.open(pg_dsn) as store:
        assert await store.load_session_usage(sid) == kept
    assert await pg_check.check_invariants(pg_dsn) == []


async def test_postgres_check_finds_a_damaged_counter(pg_dsn: str) -> None:
    async with await PostgresStore.open(pg_dsn) as store:
        await _fill(World(store, namespace="c"))
    assert await pg_check.check_invariants(pg_dsn) == []
    await _pg_exec(
        pg_dsn, "UPDATE agentledger_usage_runs SET records = records + 2 WHERE run_id = 'c-root'"
    )
    found = await pg_check.check_invariants(pg_dsn)
    assert [p for p in found if "usage" in p] == [
        "usage counters of run 'c-root' differ from its rows: records 7 (rows: 5)"
    ]  # the session's own counters still match its rows
    await _pg_exec(pg_dsn, "UPDATE agentledger_usage_labels SET bytes = bytes - 1")
    found = await pg_check.check_invariants(pg_dsn)
    assert any(
        p.startswith("usage totals of label 'tenant'='acme' differ from its sessions' rows: bytes")
        for p in found
    ), found


# ---------------------------------------------------------------- the audit


def test_sealed_payloads_leave_tokens_uncompared() -> None:
    kept = {"r": UsageTotals(bytes=5, records=1, runs=1, input_tokens=3)}
    runs = [("r", "s", 5, 1)]
    sealed_record = [("r", MODEL_USAGE, b"\x01sealed")]
    sessions = {"s": UsageTotals(bytes=5, records=1, runs=1, input_tokens=3)}
    find: Callable[[bool], list[str]] = lambda sealed: usage_findings(  # noqa: E731
        runs, sealed_record, kept, sessions, ["s"], sealed=sealed
    )
    assert find(True) == []
    assert len(find(False)) == 2  # plaintext: the tokens the rows hold (none) differ


async def test_postgres_label_totals_stay_exact_under_concurrent_sessions(pg_dsn: str) -> None:
    """16 sessions of one tenant appended to at once (their totals in shard rows, updated
    by concurrent transactions, usage records among them): the tenant's totals are the
    sum of its sessions' counters, and check finds nothing."""
    async with await PostgresStore.open(pg_dsn, min_size=4, max_size=16) as store:
        world = World(store, namespace="conc")
        sids = [await world.session(f"s{i}", labels={"tenant": "busy"}) for i in range(16)]
        roots = [await world.root(f"r{i}", session=sid) for i, sid in enumerate(sids)]
        body = msgspec.json.encode({"model": "m", "input_tokens": 3, "output_tokens": 1})

        async def writer(root: RecordBuilder) -> None:
            for k in range(8):
                if k % 4 == 3:
                    record = root.record(MODEL_USAGE, body, event_key=f"u{k}", at=world.now())
                else:
                    record = world.note(root, f"n{k}")
                await store.append_run_record(record)

        await asyncio.gather(*(writer(root) for root in roots))
        total = UsageTotals()
        for sid in sids:
            total = add(total, await store.load_session_usage(sid))
        (row,) = await store.usage_by_label("tenant")
        assert (row.value, row.sessions, row.usage) == ("busy", 16, total)
        assert (total.runs, total.input_tokens) == (16, 16 * 2 * 3)
    assert await pg_check.check_invariants(pg_dsn) == []
