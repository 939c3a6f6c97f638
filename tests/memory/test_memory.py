"""Product memory (DESIGN section 6): in-memory and SQLite, idempotent appends by key."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from agentledger.errors import RecordConflictError, ValidationError
from agentledger.memory import (
    AssistantMessage,
    FrameworkItem,
    InMemoryMemory,
    PlannerNote,
    ProductMemory,
    SQLiteMemory,
    Thinking,
    ToolCall,
    ToolResult,
    UserMessage,
)
from agentledger.storage.sqlite import SQLiteStore
from agentledger.transcript import JsonNumber

BIG = JsonNumber("1e400")
AT = datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
EVENTS = (
    UserMessage(key="k1", timestamp=AT, turn_id="t", text="hi"),
    Thinking(key="k2", timestamp=AT, text="hmm"),
    ToolCall(key="k3", timestamp=AT, tool_call_id="c1", tool_name="f", input={"x": BIG}),
    ToolResult(key="k4", timestamp=AT, tool_call_id="c1", content=[1, "two"], is_error=False),
    PlannerNote(key="k5", timestamp=AT, text="note", labels={"a": "b"}),
    AssistantMessage(key="k6", timestamp=AT, text="bye"),
    FrameworkItem(key="k7", timestamp=AT, framework="f", item={"role": "user", "n": [1, BIG]}),
)  # fmt: skip


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def memory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ProductMemory]:
    """Each product-memory backend (PostgreSQL in a fresh database of the test server)."""
    if request.param == "memory":
        yield InMemoryMemory()
        return
    if request.param == "sqlite":
        sqlite = await SQLiteMemory.open(tmp_path / "memory.db")
        try:
            yield sqlite
        finally:
            await sqlite.close()
        return
    from agentledger.memory.postgres import PostgresMemory

    dsn = request.getfixturevalue("postgres_dsn")
    postgres = await PostgresMemory.open(dsn)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("TRUNCATE agentledger_memory_events")
        yield postgres
    finally:
        await postgres.close()


async def test_events_round_trip_in_order(memory: ProductMemory) -> None:
    """Every event type reads back exactly, in append order, per (agent, run)."""
    await memory.append_events("agent", "run-1", *EVENTS[:3])
    await memory.append_events("agent", "run-1", *EVENTS[3:])
    await memory.append_events("agent", "run-2", EVENTS[0])
    snapshot = await memory.load_run("agent", "run-1")
    assert snapshot.events == EVENTS
    assert (await memory.load_run("agent", "run-2")).events == (EVENTS[0],)
    assert (await memory.load_run("other", "run-1")).events == ()


async def test_appending_again_is_idempotent_and_changes_conflict(memory: ProductMemory) -> None:
    """A retried feed changes nothing; the same key with other content is a conflict."""
    await memory.append_events("agent", "run-1", *EVENTS)
    await memory.append_events("agent", "run-1", *EVENTS)
    assert (await memory.load_run("agent", "run-1")).events == EVENTS
    changed = UserMessage(key="k1", timestamp=AT, turn_id="t", text="hello")
    with pytest.raises(RecordConflictError):
        await memory.append_events("agent", "run-1", changed)
    assert (await memory.load_run("agent", "run-1")).events == EVENTS


async def test_sqlite_memory_shares_a_file_with_the_runtime_store(tmp_path: Path) -> None:
    """SQLiteMemory keeps its own STRICT table, so it can live in the store's database."""
    path = tmp_path / "shared.db"
    store = await SQLiteStore.open(path)
    memory = await SQLiteMemory.open(path)
    try:
        await memory.append_events("agent", "run-1", *EVENTS)
        await store.create_session("s1", created_at=AT.replace(microsecond=6000))
        assert [s.id for s in (await store.list_sessions()).sessions] == ["s1"]
    finally:
        await memory.close()
        await store.close()
    reopened = await SQLiteMemory.open(path)
    try:
        assert (await reopened.load_run("agent", "run-1")).events == EVENTS
    finally:
        await reopened.close()


async def test_sqlite_memory_waits_for_another_handle_opening_the_same_new_file(
    tmp_path: Path,
) -> None:
    """Switching a new file to WAL needs it to itself, and SQLite answers "locked" at once while
    another handle holds it (as when processes open one fresh file together): the open waits
    for it instead of refusing the file as no database."""
    path = tmp_path / "fresh.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # as another handle creating the file's table holds it
    release = threading.Timer(0.3, holder.execute, ("COMMIT",))
    release.start()
    try:
        memory = await SQLiteMemory.open(path)
    finally:
        release.join()
        holder.close()
    try:
        await memory.append_events("agent", "run-1", *EVENTS)
        assert (await memory.load_run("agent", "run-1")).events == EVENTS
    finally:
        await memory.close()


async def test_sqlite_memory_refuses_a_file_that_is_no_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"not a database, just some text that is long enough" * 40)
    with pytest.raises(ValidationError) as caught:
        await SQLiteMemory.open(path)
    assert caught.value.field == "path"
    assert path.read_bytes().startswith(b"not a database")


async def test_last_returns_the_latest_events_in_order(memory: ProductMemory) -> None:
    """``load_run(last=n)`` is the tail of the run, still in append order; 0 is none."""
    await memory.append_events("agent", "run-1", *EVENTS)
    assert (await memory.load_run("agent", "run-1", last=2)).events == EVENTS[-2:]
    assert (await memory.load_run("agent", "run-1", last=0)).events == ()
    assert (await memory.load_run("agent", "run-1", last=len(EVENTS) + 1)).events == EVENTS
    assert (await memory.load_run("agent", "run-1", last=99)).events == EVENTS
    assert (await memory.load_run("agent", "nothing", last=3)).events == ()
    for bad in (-1, 1.5, True):
        with pytest.raises(ValidationError) as caught:
            await memory.load_run("agent", "run-1", last=bad)  # type: ignore[arg-type]
        assert caught.value.field == "last"


async def test_pop_removes_the_latest_event_and_delete_empties_the_run(
    memory: ProductMemory,
) -> None:
    """Pop returns and removes the last event (None when empty); delete counts what it removed."""
    await memory.append_events("agent", "run-1", *EVENTS)
    await memory.append_events("agent", "run-2", EVENTS[0])
    assert await memory.pop_event("agent", "run-1") == EVENTS[-1]
    assert await memory.pop_event("agent", "run-1") == EVENTS[-2]
    assert (await memory.load_run("agent", "run-1")).events == EVENTS[:-2]
    # an append after a pop goes after what is left, and the popped key can come back
    await memory.append_events("agent", "run-1", EVENTS[-1])
    assert (await memory.load_run("agent", "run-1")).events == (*EVENTS[:-2], EVENTS[-1])
    assert await memory.delete_run("agent", "run-1") == len(EVENTS) - 1
    assert await memory.delete_run("agent", "run-1") == 0
    assert await memory.pop_event("agent", "run-1") is None
    assert (await memory.load_run("agent", "run-1")).events == ()
    assert (await memory.load_run("agent", "run-2")).events == (EVENTS[0],)


async def test_a_conflicting_append_stores_none_of_its_events(memory: ProductMemory) -> None:
    """All or nothing: a conflict anywhere in one append leaves the run unchanged."""
    await memory.append_events("agent", "run-1", EVENTS[0])
    changed = UserMessage(key="k1", timestamp=AT, turn_id="t", text="hello")
    with pytest.raises(RecordConflictError):
        await memory.append_events("agent", "run-1", EVENTS[1], changed)
    assert (await memory.load_run("agent", "run-1")).events == (EVENTS[0],)


def test_the_old_name_still_works_with_a_warning() -> None:
    """``agentledger.memory.MemoryStore`` is ``ProductMemory`` for one more release."""
    import agentledger.memory
    from agentledger.memory import types

    with pytest.warns(DeprecationWarning, match="ProductMemory"):
        assert agentledger.memory.MemoryStore is ProductMemory
    with pytest.warns(DeprecationWarning, match="ProductMemory"):
        assert types.MemoryStore is ProductMemory
