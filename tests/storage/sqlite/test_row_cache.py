"""The writer's row cache never serves a row another connection has changed since."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentledger.errors import RunConflictError, RunNotActiveError, SessionPurgedError
from agentledger.storage import RunStatus, StartOutcome
from agentledger.storage.conformance import World
from agentledger.storage.sqlite import SQLiteStore


@pytest.fixture
async def other(db_path: Path, store: SQLiteStore) -> AsyncIterator[SQLiteStore]:
    """A second handle (its own connections) on the same file."""
    async with await SQLiteStore.open(db_path) as opened:
        yield opened


async def test_a_run_ended_by_another_handle_takes_no_more_records(
    store: SQLiteStore, other: SQLiteStore, world: World
) -> None:
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    await store.append_run_record(world.note(run, "n1"))  # the run row is now cached
    await other.record_run_terminal(run.terminal(RunStatus.COMPLETED, at=world.now()))
    with pytest.raises(RunNotActiveError):
        await store.append_run_record(world.note(run, "n2"))


async def test_a_session_ended_by_another_handle_stops_new_starts(
    store: SQLiteStore, other: SQLiteStore, world: World
) -> None:
    sid = await world.session("s")
    await world.root("first", session=sid)  # the session row is now cached
    await other.end_session(sid, ended_at=world.now())
    late = world.run("late", session=sid)
    assert (await store.start_root_run(late.root_start())).outcome is StartOutcome.STOP


async def test_a_row_changed_outside_the_store_is_read_again(
    store: SQLiteStore, world: World
) -> None:
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    await store.start_root_run(run.root_start())  # an exact retry, from the cache
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        labels = '{"x": "y"}'
        conn.execute("UPDATE runs SET labels = ? WHERE run_id = ?", (labels, run.run.run_id))
    finally:
        conn.close()
    with pytest.raises(RunConflictError) as caught:
        await store.start_root_run(run.root_start())
    assert caught.value.field == "run.labels"


async def test_a_purged_session_is_forgotten(
    store: SQLiteStore, other: SQLiteStore, world: World
) -> None:
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    await world.finish(run)
    await store.end_session(sid, ended_at=world.now())
    await store.purge_session(sid)
    assert (await other.list_sessions()).sessions == []
    with pytest.raises(SessionPurgedError):
        await store.append_run_record(world.note(run, "late"))
