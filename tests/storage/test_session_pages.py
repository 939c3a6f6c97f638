"""A session page is decided once: the same damage is the same error on SQLite and PostgreSQL.

Each case damages the same stored rows of the same session on both backends by raw
SQL of their own dialect, then pages through the session at several page sizes; the
error (class, run, record, reason) must be identical, and so must intact listings.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentledger.errors import AgentledgerError, CorruptRecordError
from agentledger.storage import Record, RecordBuilder, RunStatus
from agentledger.storage.conformance import World
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.postgres.migrations import _backfill_checksums as pg_backfill
from agentledger.storage.session_pages import (
    SessionEnd,
    check_order,
    entering,
    missing_before,
    session_page,
    session_start,
)
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.sqlite.schema import _backfill_checksums as sqlite_backfill

LIMITS = [1000, 3, 2, 1]

# (name, SQLite statement, PostgreSQL statement); run 'a' is completed (ids 1..6), run 'b'
# is running (ids 1..4); their records interleave in the session's commit order.
DAMAGE = [
    (
        "a record's checksum",
        "UPDATE records SET checksum = checksum + 1 WHERE run_id = :a AND seq = 3",
        "UPDATE agentledger_records SET checksum = checksum + 1 WHERE run_id = %(a)s AND seq = 3",
    ),
    (
        "a record's payload",
        "UPDATE records SET payload = X'7B7D' WHERE run_id = :b AND seq = 2",
        "UPDATE agentledger_records SET payload = '\\x7B7D'::bytea "
        "WHERE run_id = %(b)s AND seq = 2",
    ),
    (
        "a record in the middle of a run",
        "DELETE FROM records WHERE run_id = :a AND seq = 3",
        "DELETE FROM agentledger_records WHERE run_id = %(a)s AND seq = 3",
    ),
    (
        "a run's first record",
        "DELETE FROM records WHERE run_id = :b AND seq = 1",
        "DELETE FROM agentledger_records WHERE run_id = %(b)s AND seq = 1",
    ),
    (
        "a completed run's run_completed",
        "DELETE FROM records WHERE run_id = :a AND seq = 6",
        "DELETE FROM agentledger_records WHERE run_id = %(a)s AND seq = 6",
    ),
    (
        "a running run's status",
        "UPDATE runs SET status = 'completed' WHERE run_id = :b",
        "UPDATE agentledger_runs SET status = 'completed' WHERE run_id = %(b)s",
    ),
    (
        "a completed run's status",
        "UPDATE runs SET status = 'failed' WHERE run_id = :a",
        "UPDATE agentledger_runs SET status = 'failed' WHERE run_id = %(a)s",
    ),
]


@pytest.fixture
async def stores(tmp_path: Path, postgres_dsn: str) -> AsyncIterator[tuple[SQLiteStore, Any]]:
    async with (
        await SQLiteStore.open(tmp_path / "ledger.db") as lite,
        await PostgresStore.open(postgres_dsn) as pg,
    ):
        yield lite, pg


async def _write(world: World) -> tuple[str, dict[str, str]]:
    """Session 's' with run 'a' (completed, ids 1..6) and run 'b' (running, ids 1..4),
    their records interleaved."""
    sid = await world.session("s")
    a = await world.root("a", session=sid)
    b = await world.root("b", session=sid)
    for i in range(3):
        await world.store.append_run_record(world.note(a, f"a{i}"))
        await world.store.append_run_record(world.note(b, f"b{i}"))
    await world.store.append_run_record(world.note(a, "a3"))
    await world.finish(a)
    return sid, {"a": a.run.run_id, "b": b.run.run_id}


async def _listing(store: Any, sid: str, limit: int) -> list[Record] | tuple[type, str, str, str]:
    """The whole listing, or the error it stops at (class and fields)."""
    records: list[Record] = []
    cursor = ""
    try:
        for _ in range(100):
            page = await store.list_session_run_records(sid, cursor=cursor, limit=limit)
            records.extend(page.records)
            if not page.next_cursor:
                return records
            cursor = page.next_cursor
    except AgentledgerError as e:
        return (type(e), getattr(e, "run_id", None), getattr(e, "record_id", None), str(e))
    raise AssertionError("paging did not terminate")


async def _damage_pg(dsn: str, sql: str, ids: dict[str, str]) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert (await conn.execute(sql, ids)).rowcount == 1


@pytest.mark.parametrize(("name", "lite_sql", "pg_sql"), DAMAGE, ids=[d[0] for d in DAMAGE])
async def test_the_same_damage_is_the_same_error_on_both_backends(
    stores: tuple[SQLiteStore, PostgresStore],
    postgres_dsn: str,
    name: str,
    lite_sql: str,
    pg_sql: str,
) -> None:
    lite, pg = stores
    ns = uuid.uuid4().hex[:10]
    sid, ids = await _write(World(lite, ns))
    assert (sid, ids) == await _write(World(pg, ns))
    for limit in LIMITS:  # intact: the same records, in the same order
        intact = await _listing(lite, sid, limit)
        assert isinstance(intact, list)
        assert len(intact) == 10
        assert await _listing(pg, sid, limit) == intact
    conn = sqlite3.connect(lite.path, isolation_level=None)
    try:
        assert conn.execute(lite_sql, ids).rowcount == 1
    finally:
        conn.close()
    await _damage_pg(postgres_dsn, pg_sql, ids)
    for limit in LIMITS:
        got = await _listing(lite, sid, limit)
        assert isinstance(got, tuple), (name, limit, "SQLite listed damaged rows")
        assert got[0].__name__ == "CorruptRecordError", got
        assert got[1] in ids.values(), got  # named by its run, not by position
        assert await _listing(pg, sid, limit) == got, (name, limit)


async def test_a_rewritten_lifecycle_record_is_the_same_error_on_both_backends(
    stores: tuple[SQLiteStore, PostgresStore], postgres_dsn: str
) -> None:
    """A run_completed rewritten (checksums made to match) to contradict its run."""
    lite, pg = stores
    ns = uuid.uuid4().hex[:10]
    world = World(lite, ns)
    sid, ids = await _write(world)
    await _write(World(pg, ns))
    ended = (await lite.list_run_records(ids["a"])).records[-1]
    run = await lite.load_run(ids["a"])
    failed = RecordBuilder(run).completed(RunStatus.FAILED, at=ended.timestamp).payload
    conn = sqlite3.connect(lite.path, isolation_level=None)
    try:
        update = "UPDATE records SET payload = ? WHERE run_id = ? AND seq = 6"
        assert conn.execute(update, (failed, ids["a"])).rowcount == 1
        sqlite_backfill(conn)
    finally:
        conn.close()
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as pconn:
        update = "UPDATE agentledger_records SET payload = %s WHERE run_id = %s AND seq = 6"
        assert (await pconn.execute(update, (failed, ids["a"]))).rowcount == 1
        async with pconn.transaction():
            await pg_backfill(pconn)
    for limit in LIMITS:
        got = await _listing(lite, sid, limit)
        assert isinstance(got, tuple)
        assert (got[1], got[2]) == (ids["a"], "6"), got
        assert "contradicts its run" in got[3]
        assert await _listing(pg, sid, limit) == got


def _row(pos: int, run_id: str, seq: int) -> tuple[object, ...]:
    return (pos, run_id, "agent", "s", seq, "t", f"k{seq}", "note", 0, b"{}", 0)


def test_each_run_on_a_page_follows_its_sequence_and_what_came_before_it() -> None:
    """Positions may skip (commit order across sessions); a run's ids may not."""
    rows = [_row(10, "a", 3), _row(12, "b", 1), _row(15, "a", 4), _row(20, "b", 2)]
    assert entering(rows) == [("a", 2)]
    check_order(rows, {("a", 2): 7})
    check_order(rows, None)  # positions vouched for by a backend whose positions are gap-free
    for before in ({}, {("a", 2): None}, {("a", 2): 11}):  # not stored, or stored after it
        with pytest.raises(CorruptRecordError, match="sequence gap") as caught:
            check_order(rows, before)
        assert (caught.value.run_id, caught.value.record_id) == ("a", "2")
    skipped = [_row(10, "a", 3), _row(15, "a", 5)]
    with pytest.raises(CorruptRecordError, match="sequence gap") as caught:
        check_order(skipped, None)
    assert (caught.value.run_id, caught.value.record_id) == ("a", "4")
    assert str(caught.value) == str(missing_before("a", 5))


def test_the_next_cursor_and_the_last_page_check() -> None:
    ended = [SessionEnd("a", "completed", 4, "note")]
    page = session_page("s", (), end=4, newest=9, statuses={}, ends=lambda: ended)
    assert session_start("s", page.next_cursor, 9) == 4
    with pytest.raises(CorruptRecordError, match="not its run_completed") as caught:
        session_page("s", (), end=9, newest=9, statuses={}, ends=lambda: ended)
    assert (caught.value.run_id, caught.value.record_id) == ("a", "4")
    with pytest.raises(CorruptRecordError, match="run row"):
        session_page("s", (), end=9, newest=9, statuses={}, ends=lambda: [("a", "?", 1, "x")])
    running = [SessionEnd("b", "running", 1, "note")]
    last = session_page("s", (), end=9, newest=9, statuses={}, ends=lambda: running)
    assert last.next_cursor == ""
