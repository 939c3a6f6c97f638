"""Runs with keyed and once tools (a call in doubt, answered) on every backend; their new
records archive, restore, pass the store check and are purged like any record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentledger.engine import InProcessEngine
from agentledger.errors import AgentledgerError
from agentledger.runtime import (
    Agent,
    ModelPlanner,
    QueueSink,
    Runtime,
    ToolHappened,
    idempotency_key,
)
from agentledger.runtime.events import event_from_record
from agentledger.storage import MemoryStore, RunStatus
from agentledger.storage.archive import archive_session, restore_archive
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.runtime.support import now_ms, records
from tests.runtime.test_effects import FAST, Ledger, LoseWrite


async def test_once_and_keyed_tools_on_every_backend(
    every_store: Any, every_session: str, tmp_path: Path
) -> None:
    store, session = every_store, every_session
    once, keyed = Ledger(), Ledger()
    lossy = LoseWrite(store, "turn:1:tool:c1:result")
    model = ScriptedModel(
        [
            tool_calls(("c1", "send", {"to": "a"}), ("c2", "book", {"to": "b"})),
            reply("Sent and booked."),
            tool_calls(("c3", "send", {"to": "c"})),
            reply("Again."),
        ]
    )
    runtime = Runtime(lossy, engine=InProcessEngine(FAST), stream=QueueSink())
    runtime.register_model("m", model)
    tools = [once.tool("once"), keyed.tool("keyed", name="book", fail_first=True)]
    runtime.register_agent(Agent("chat", ModelPlanner("m"), tools=tools))
    client = runtime.agent_client("chat")
    run_id = f"r-{session}"
    first = await client.run(session, "Go", run_id=run_id)
    assert first.status is RunStatus.SUSPENDED
    assert first.awaiting is not None
    assert first.awaiting.kind == "in_doubt"
    assert [k for k, _, _ in keyed.calls] == [idempotency_key(run_id, "c2")] * 2
    done = await client.resume(session, run_id, ToolHappened("sent a", by="ops"))
    assert done.status is RunStatus.COMPLETED, done.failure
    again = await client.run(session, "Once more", after=done.run_id, run_id=f"{run_id}-2")
    assert again.status is RunStatus.COMPLETED, again.failure
    assert len(once.calls) == 2  # c1 once (in doubt, answered), c3 once
    runs = [run_id, done.run_id, again.run_id]
    kinds = [r.type for rid in runs for r in await records(store, rid)]
    assert kinds.count("tool_call_started") == 2
    assert kinds.count("tool_call_answered") == 1
    for rid in runs:  # every record decodes strictly as its event
        for record in await records(store, rid):
            event_from_record(record)
    # archive and restore: the same records, byte for byte; then purge removes them
    await store.end_session(session, ended_at=now_ms())
    path = tmp_path / "effects.archive"
    await archive_session(store, session, path)
    target = MemoryStore()
    await restore_archive(target, path)
    for rid in runs:
        assert await records(target, rid) == await records(store, rid)
    receipt = await store.purge_session(session)
    assert receipt.records >= len(kinds)
    for rid in runs:
        with pytest.raises(AgentledgerError):
            await records(store, rid)
