"""[G2] Product-memory events fed from a run name their source (session, run, record), and
``delete_derived(session)`` erases what a purged session left in product memory, listing
each event; a table from before sources is upgraded on open, its events kept."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentledger.memory import (
    AssistantMessage,
    ErasedEvent,
    EventSource,
    InMemoryMemory,
    SQLiteMemory,
    UserMessage,
)
from agentledger.runtime import Agent, ModelPlanner, Runtime
from agentledger.storage import MemoryStore
from agentledger.testing import ScriptedModel, reply
from tests.runtime.support import now_ms

AT = datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)


def _from(session: str, record: str) -> EventSource:
    return EventSource(session_id=session, run_id=f"{session}-run", record_key=record)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def memory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """Each product-memory backend (PostgreSQL: the test server's table, emptied)."""
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


async def test_delete_derived_erases_a_sessions_events_and_lists_each(memory: Any) -> None:
    gone = UserMessage(key="a", timestamp=AT, text="mine", source=_from("s1", "3"))
    also = AssistantMessage(key="b", timestamp=AT, text="re", source=_from("s1", "4"))
    other = UserMessage(key="c", timestamp=AT, text="theirs", source=_from("s2", "3"))
    bare = UserMessage(key="d", timestamp=AT, text="no source")
    await memory.append_events("agent", "r1", gone, other, also, bare)
    await memory.append_events("agent", "r0", gone)
    assert (await memory.load_run("agent", "r1")).events == (gone, other, also, bare)
    assert await memory.delete_derived("s1") == [
        ErasedEvent(agent_id="agent", run_id="r0", key="a"),
        ErasedEvent(agent_id="agent", run_id="r1", key="a"),
        ErasedEvent(agent_id="agent", run_id="r1", key="b"),
    ]
    assert (await memory.load_run("agent", "r1")).events == (other, bare)
    assert (await memory.load_run("agent", "r0")).events == ()
    assert await memory.delete_derived("s1") == []


async def test_a_table_from_before_sources_is_upgraded_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE agentledger_memory_events (agent_id TEXT NOT NULL, run_id TEXT NOT NULL,"
        " seq INTEGER NOT NULL, key TEXT NOT NULL, type TEXT NOT NULL, payload BLOB NOT NULL,"
        " PRIMARY KEY (agent_id, run_id, key)) STRICT"
    )
    old = b'{"type":"user_message","key":"k","timestamp":"2026-01-02T03:04:05.006Z","text":"x"}'
    conn.execute(
        "INSERT INTO agentledger_memory_events VALUES ('agent', 'r', 1, 'k', 'user_message', ?)",
        (old,),
    )
    conn.commit()
    conn.close()
    memory = await SQLiteMemory.open(path)
    try:
        (kept,) = (await memory.load_run("agent", "r")).events
        assert (kept.key, kept.source) == ("k", None)
        new = UserMessage(key="n", timestamp=AT, text="y", source=_from("s", "2"))
        await memory.append_events("agent", "r", new)
        assert await memory.delete_derived("s") == [
            ErasedEvent(agent_id="agent", run_id="r", key="n")
        ]
        assert (await memory.load_run("agent", "r")).events == (kept,)
    finally:
        await memory.close()


async def test_the_runtime_names_each_events_record_and_a_purge_erases_them() -> None:
    store, memory = MemoryStore(), InMemoryMemory()
    runtime = Runtime(store, memory=memory)
    runtime.register_model("m", ScriptedModel([reply("Paris.")]))
    runtime.register_agent(Agent("chat", ModelPlanner("m")))
    await store.create_session("s", created_at=now_ms())
    out = await runtime.agent_client("chat").run("s", "Where?")
    events = (await memory.load_run("chat", out.run_id)).events
    assert [type(e).__name__ for e in events] == ["UserMessage", "AssistantMessage"]
    page = await store.list_run_records(out.run_id, limit=100)
    records = {r.event_key: r for r in page.records}
    for event in events:
        assert event.source is not None
        assert (event.source.session_id, event.source.run_id) == ("s", out.run_id)
        assert records[event.source.record_key].type == "transcript_messages_appended"
    await store.end_session("s", ended_at=now_ms())
    receipt = await store.purge_session("s", cascade=True)
    erased = [
        e for s in (receipt.session_id, *receipt.cascaded) for e in await memory.delete_derived(s)
    ]
    assert [e.key for e in erased] == [e.key for e in events]
    assert (await memory.load_run("chat", out.run_id)).events == ()
