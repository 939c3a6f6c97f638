"""Opening and closing a PostgresStore, its migrations, and what it stores byte for byte.

Each migration test gets a schema of its own (``search_path`` in the DSN),
so it sees a database no other test has touched.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import psycopg
import pytest
from psycopg import conninfo, sql

from agentledger.errors import (
    CorruptRecordError,
    SchemaVersionError,
    SessionConflictError,
    StoreClosedError,
    TransientError,
    ValidationError,
)
from agentledger.storage import SessionStatus
from agentledger.storage.conformance import World
from agentledger.storage.integrity import record_checksum, run_seed
from agentledger.storage.payloads import TRANSCRIPT_APPENDED
from agentledger.storage.postgres import PostgresStore, migrations
from agentledger.storage.postgres.check import check_invariants
from agentledger.storage.postgres.rows import micros
from agentledger.storage.receipts import unknown_receipt
from agentledger.target import Target
from agentledger.transcript import (
    Message,
    TextPart,
    build_messages_from_run_log,
    encode_messages,
)


@pytest.fixture
async def admin(postgres_dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
async def fresh_dsn(postgres_dsn: str, admin: psycopg.AsyncConnection[Any]) -> AsyncIterator[str]:
    """A DSN whose tables live in a new, empty schema."""
    schema = f"fresh_{uuid.uuid4().hex[:8]}"
    await admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    yield conninfo.make_conninfo(postgres_dsn, options=f"-c search_path={schema}")
    await admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


async def _applied(dsn: str) -> list[tuple[int, str]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        return [(m.version, m.name) for m in await migrations.applied(conn)]


# ---------------------------------------------------------------- open / close


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once the socket is closed


async def test_unreachable_server_is_transient() -> None:
    dsn = f"host=127.0.0.1 port={_closed_port()} user=postgres dbname=x connect_timeout=2"
    with pytest.raises(TransientError) as e:
        await PostgresStore.open(dsn)
    assert e.value.operation == "open"
    assert "refused" in str(e.value).lower() or "connect" in str(e.value).lower()


async def test_unknown_database_is_transient_with_the_reason(postgres_dsn: str) -> None:
    dsn = conninfo.make_conninfo(postgres_dsn, dbname=f"nope_{uuid.uuid4().hex[:6]}")
    with pytest.raises(TransientError, match="does not exist"):
        await PostgresStore.open(dsn)


@pytest.mark.parametrize("dsn", ["host=127.0.0.1 port", "postgresql://[::1", "nokey"])
async def test_malformed_dsn_is_a_validation_error(dsn: str) -> None:
    with pytest.raises(ValidationError) as e:
        await PostgresStore.open(dsn)
    assert e.value.field == "dsn"


@pytest.mark.parametrize(
    ("sizes", "field"),
    [
        ({"min_size": -1}, "min_size"),
        ({"max_size": 0}, "max_size"),
        ({"min_size": 5, "max_size": 2}, "max_size"),
        ({"max_size": True}, "max_size"),
    ],
)
async def test_bad_pool_sizes_are_validation_errors(
    postgres_dsn: str, sizes: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as e:
        await PostgresStore.open(postgres_dsn, **sizes)
    assert e.value.field == field


async def test_close_is_idempotent_and_a_closed_store_refuses_work(postgres_dsn: str) -> None:
    async with await PostgresStore.open(postgres_dsn, max_size=1) as store:
        world = World(store)
        sid = await world.session("s")
    await store.close()  # already closed by the context manager: fine
    with pytest.raises(StoreClosedError, match="closed") as refused:
        await store.load_session(sid)
    assert (refused.value.backend, refused.value.operation) == ("postgres", "load_session")
    with pytest.raises(StoreClosedError, match="closed"):
        await store.create_session(world.id("t"), created_at=world.now())


# ------------------------------------------------------------------ migrations


async def test_pending_and_applied_never_write(fresh_dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        assert await migrations.applied(conn) == []
        assert [m.version for m in await migrations.pending(conn)] == [
            m.version for m in migrations.MIGRATIONS
        ]
        cur = await conn.execute("SELECT to_regclass(%s)", (migrations.MIGRATIONS_TABLE,))
        assert await cur.fetchone() == (None,)


async def test_open_applies_each_migration_once_and_records_it(fresh_dsn: str) -> None:
    async with await PostgresStore.open(fresh_dsn):
        pass
    expected = [(m.version, m.name) for m in migrations.MIGRATIONS]
    assert await _applied(fresh_dsn) == expected
    async with await PostgresStore.open(fresh_dsn):
        pass
    assert await _applied(fresh_dsn) == expected


async def test_migration_2_gives_version_1_sessions_empty_labels(fresh_dsn: str) -> None:
    """[D6] a database at version 1 migrates to session labels; old sessions have none."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    async with await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        assert await migrations.migrate(conn, upto=1) == [1]
        assert [m.version for m in await migrations.pending(conn)] == list(
            range(2, migrations.SCHEMA_VERSION + 1)
        )
        await conn.execute(
            "INSERT INTO agentledger_sessions (id, status, created_at, ended_at) VALUES "
            "('old', 'active', %s, NULL), ('old-ended', 'ended', %s, %s)",
            (at, at + timedelta(milliseconds=1), at + timedelta(milliseconds=2)),
        )
    async with await PostgresStore.open(fresh_dsn) as store:
        assert (await store.load_session("old")).labels == {}
        with pytest.raises(SessionConflictError):
            await store.create_session("old", labels={"tenant": "acme"})
        new = await store.create_session("new", labels={"tenant": "acme", "tier": "gold"})
        assert new.labels == {"tenant": "acme", "tier": "gold"}
        first = await store.list_sessions(limit=2)
        rest = await store.list_sessions(cursor=first.next_cursor, limit=2)
        assert [s.id for s in first.sessions + rest.sessions] == ["new", "old-ended", "old"]
        assert rest.next_cursor == ""
        acme = await store.list_sessions(labels={"tenant": "acme"})
        assert acme.sessions == [new]
    assert (await _applied(fresh_dsn))[:2] == [(1, "initial schema"), (2, "session labels")]
    async with await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'agentledger_sessions'"
        )
        names = {row[0] for row in await cur.fetchall()}
    assert {"agentledger_sessions_newest_first", "agentledger_sessions_by_status"} <= names
    assert "agentledger_sessions_by_labels" not in names  # the label index replaced it


async def test_migration_11_indexes_the_labels_of_existing_sessions(fresh_dsn: str) -> None:
    """[D6] sessions stored at version 10 get their label index rows (status and time
    included): label-filtered pages list them, and check finds the index exact."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    async with await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        assert await migrations.migrate(conn, upto=10) == list(range(1, 11))
        await conn.execute(
            "INSERT INTO agentledger_sessions (id, status, created_at, ended_at, labels) VALUES "
            '(\'a\', \'active\', %s, NULL, \'{"tenant": "acme", "tier": "gold"}\'), '
            "('b', 'ended', %s, %s, '{\"tenant\": \"acme\"}'), ('c', 'active', %s, NULL, '{}')",
            (at, at + timedelta(milliseconds=1), at + timedelta(milliseconds=2), at),
        )
    async with await PostgresStore.open(fresh_dsn) as store:
        acme = await store.list_sessions(labels={"tenant": "acme"})
        assert [s.id for s in acme.sessions] == ["b", "a"]
        ended = await store.list_sessions([SessionStatus.ENDED], labels={"tenant": "acme"})
        assert [s.id for s in ended.sessions] == ["b"]
        gold = await store.list_sessions(labels={"tenant": "acme", "tier": "gold"})
        assert [s.id for s in gold.sessions] == ["a"]
        await store.end_session("a", ended_at=at + timedelta(milliseconds=5))
        ended = await store.list_sessions([SessionStatus.ENDED], labels={"tier": "gold"})
        assert [s.id for s in ended.sessions] == ["a"]
        await store.purge_session("b")
    assert (11, "session label index") in await _applied(fresh_dsn)
    async with await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT session_id, key, value, status FROM agentledger_session_labels ORDER BY 1, 2"
        )
        assert await cur.fetchall() == [
            ("a", "tenant", "acme", "ended"),
            ("a", "tier", "gold", "ended"),
        ]
    assert await check_invariants(fresh_dsn) == []


async def test_migration_3_checksums_every_existing_record(fresh_dsn: str) -> None:
    """[J1] records written at version 2 get their checksum, then every read verifies it."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    async with await PostgresStore.open(fresh_dsn) as store:
        world = World(store)
        sid = await world.session("s", at=at)
        run = await world.root("r", session=sid)
        await store.append_run_records([world.note(run, f"n{i}") for i in range(3)])
        await world.finish(run)
        before = await store.list_run_records(run.run.run_id)
    async with await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        # Back to exactly what version 2 was: no checksum column, migration 3 not recorded.
        await conn.execute("ALTER TABLE agentledger_records DROP COLUMN checksum")
        await conn.execute(f"DELETE FROM {migrations.MIGRATIONS_TABLE} WHERE version = 3")
        assert [m.version for m in await migrations.pending(conn)] == [3]
    async with await PostgresStore.open(fresh_dsn) as store:
        assert await store.list_run_records(run.run.run_id) == before
        assert await store.list_session_run_records(sid) == before
    assert (3, "record checksums") in await _applied(fresh_dsn)
    async with await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT count(*) FROM agentledger_records WHERE checksum = -1")
        assert await cur.fetchone() == (0,)
        await conn.execute(
            "UPDATE agentledger_records SET payload = '\\x7B2278223AFFFE7D' WHERE seq = 2"
        )
    async with await PostgresStore.open(fresh_dsn) as store:
        with pytest.raises(CorruptRecordError, match=r"record '2' of run .*checksum mismatch"):
            await store.list_run_records(run.run.run_id)


async def test_migration_4_gives_old_tombstones_an_unknown_receipt(fresh_dsn: str) -> None:
    """[D7] a tombstone written at version 3 has no receipt: it reads back as unknown."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    async with await PostgresStore.open(fresh_dsn) as store:
        world = World(store)
        old = await world.session("old", at=at)
        await store.end_session(old, ended_at=at)
        await store.purge_session(old)
    async with await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        # Back to exactly what version 3 was: no receipt column, migration 4 not recorded.
        await conn.execute("ALTER TABLE agentledger_purged_sessions DROP COLUMN receipt")
        await conn.execute(f"DELETE FROM {migrations.MIGRATIONS_TABLE} WHERE version = 4")
        assert [m.version for m in await migrations.pending(conn)] == [4]
    async with await PostgresStore.open(fresh_dsn) as store:
        assert await store.purge_session(old) == unknown_receipt(old)
        new = world.id("new")
        await store.create_session(new, created_at=at)
        await store.end_session(new, ended_at=at)
        receipt = await store.purge_session(new)
        assert receipt.known
        assert await store.purge_session(new) == receipt
    assert (4, "purge receipts") in await _applied(fresh_dsn)


async def test_migration_6_lists_old_transcripts_that_fail_the_write_check(
    fresh_dsn: str,
) -> None:
    """[R2] a transcript stored before the write check, which fails it, keeps replay strict."""
    broken = b'[{"role":"user","parts":[{"kind":"tool_use","id":"","name":"t","input":{}}]}]'
    async with await PostgresStore.open(fresh_dsn) as store:
        assert store.transcripts_verified
        world = World(store)
        run = await world.root("r", session=await world.session("s"))
        text = encode_messages([Message(role="user", parts=(TextPart(text="hi"),))])
        note = world.note(run, "m", text)
        await store.append_run_record(msgspec.structs.replace(note, type=TRANSCRIPT_APPENDED))
    async with await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        # As a writer from before the check could have stored it, checksum and all.
        cur = await conn.execute(
            "SELECT run_id, agent_id, session_id, turn_id, event_key, type, ts "
            "FROM agentledger_records WHERE seq = 2"
        )
        run_id, agent_id, session_id, turn_id, key, type_, ts = await cur.fetchone()  # type: ignore[misc]
        seed = run_seed(run_id, agent_id, session_id)
        checksum = record_checksum(seed, 2, turn_id, key, type_, micros(ts), broken)
        await conn.execute(
            "UPDATE agentledger_records SET payload = %s, checksum = %s WHERE seq = 2",
            (broken, checksum),
        )
        await conn.execute("DROP TABLE agentledger_unchecked_transcripts")
        await conn.execute(f"DELETE FROM {migrations.MIGRATIONS_TABLE} WHERE version = 6")
    async with await PostgresStore.open(fresh_dsn) as store:
        assert not store.transcripts_verified
        with pytest.raises(CorruptRecordError) as caught:
            await build_messages_from_run_log(store, run_id)
        assert caught.value.record_id == "2"


async def test_concurrent_openers_do_not_race_the_migration(fresh_dsn: str) -> None:
    stores = await asyncio.gather(
        *(PostgresStore.open(fresh_dsn, min_size=1, max_size=1) for _ in range(8))
    )
    await asyncio.gather(*(s.close() for s in stores))
    assert await _applied(fresh_dsn) == [(m.version, m.name) for m in migrations.MIGRATIONS]


async def test_a_newer_schema_is_refused(fresh_dsn: str) -> None:
    async with await PostgresStore.open(fresh_dsn):
        pass
    future = migrations.SCHEMA_VERSION + 1
    async with await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        await conn.execute(
            f"INSERT INTO {migrations.MIGRATIONS_TABLE} (version, name) VALUES (%s, 'future')",
            (future,),
        )
    newer = (
        f"this database was written by a newer agentledger (schema {future}, "
        f"this one knows {migrations.SCHEMA_VERSION}); upgrade agentledger"
    )
    for migrate in (True, False):
        with pytest.raises(SchemaVersionError) as e:
            await PostgresStore.open(fresh_dsn, migrate=migrate)
        assert (e.value.field, e.value.got) == ("schema_version", future)
        assert (e.value.current, e.value.latest) == (future, migrations.SCHEMA_VERSION)
        assert str(e.value) == newer
    # What the command line and workers open: no "-1 migration pending ... migrate" advice.
    target = Target.parse(fresh_dsn)
    for create in (False, True):
        with pytest.raises(SchemaVersionError) as opened:
            await target.open(create=create)
        assert str(opened.value) == f"{target}: {newer}"
    assert (future, "future") in await _applied(fresh_dsn)


async def test_a_renamed_migration_is_refused(fresh_dsn: str) -> None:
    async with await PostgresStore.open(fresh_dsn):
        pass
    async with await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        await conn.execute(f"UPDATE {migrations.MIGRATIONS_TABLE} SET name = 'other'")
    with pytest.raises(ValidationError) as e:
        await PostgresStore.open(fresh_dsn)
    assert e.value.field == "schema_version"


async def test_migrate_false_refuses_an_unmigrated_database_and_writes_nothing(
    fresh_dsn: str,
) -> None:
    with pytest.raises(SchemaVersionError) as e:
        await PostgresStore.open(fresh_dsn, migrate=False)
    assert (e.value.field, e.value.got) == ("schema_version", 0)
    assert e.value.pending == tuple(m.version for m in migrations.MIGRATIONS)
    assert await _applied(fresh_dsn) == []
    async with await PostgresStore.open(fresh_dsn):
        pass
    async with await PostgresStore.open(fresh_dsn, migrate=False) as store:
        assert (await store.list_sessions()).sessions == []


# ------------------------------------------------------------- stored values


async def test_bytes_and_times_round_trip_exactly_whatever_the_server_time_zone(
    postgres_dsn: str,
) -> None:
    """Payloads and checkpoints are ``bytea`` as given; times come back in ``datetime.UTC``."""
    dsn = conninfo.make_conninfo(postgres_dsn, options="-c TimeZone=Asia/Kathmandu")
    async with await PostgresStore.open(dsn, max_size=1) as store:
        world = World(store)
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        body = b'{ "z":1,\t"a" : "\\u00e9\xc3\xa9", "n": 1.50e+1 }'
        note = world.note(run, "odd", body)
        await store.append_run_record(note)
        checkpoint = await world.suspend(run, "cp")
        page = await store.list_run_records(run.run.run_id)
        stored = page.records[1]
        assert stored.payload == body
        assert stored.timestamp == note.timestamp
        assert stored.timestamp.tzinfo is UTC
        assert (await store.load_run_suspension(run.run.run_id)) == checkpoint
        meta = await store.load_run(run.run.run_id)
        assert meta.started_at.tzinfo is UTC
        assert meta.updated_at.tzinfo is UTC
        assert (await store.load_session(sid)).created_at.tzinfo is UTC


@pytest.mark.parametrize(
    ("field", "kw"),
    [
        ("started.turn_id", {"turn_id": "t\x00"}),
        ("started.turn_id", {"turn_id": "t\ud800"}),
        ("run.labels", {"labels": {"k": "v\x00"}}),
        ("run.labels", {"labels": {"k\x00": "v"}}),
    ],
)
async def test_text_postgres_cannot_store_is_a_validation_error(
    postgres_dsn: str, field: str, kw: dict[str, Any]
) -> None:
    """A NUL or lone surrogate is refused as bad input, never a TransientError."""
    async with await PostgresStore.open(postgres_dsn, max_size=1) as store:
        world = World(store)
        sid = await world.session("s")
        run = world.run("r", session=sid, **kw)
        with pytest.raises(ValidationError) as e:
            await store.start_root_run(run.root_start())
        assert e.value.field == field
