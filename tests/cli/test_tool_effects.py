"""``agentledger transcript`` and ``runs`` show each call's effect class (unless retry),
a call in doubt, and the answer it got with who gave it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentledger.engine import InProcessEngine
from agentledger.runtime import Agent, ModelPlanner, QueueSink, Runtime, ToolFailed
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.cli.conftest import run_cli
from tests.runtime.support import now_ms
from tests.runtime.test_effects import FAST, Ledger, LoseWrite


async def _in_doubt(db: Path, answer: bool) -> tuple[str, str]:
    store = await SQLiteStore.open(db, durability="normal")
    try:
        await store.create_session("s", created_at=now_ms())
        model = ScriptedModel(
            [
                tool_calls(("c1", "send", {"to": "a"}), ("c2", "book", {"to": "b"})),
                reply("Sorry."),
            ]
        )
        runtime = Runtime(
            LoseWrite(store, "turn:1:tool:c1:result"),
            engine=InProcessEngine(FAST),
            stream=QueueSink(),
        )
        runtime.register_model("m", model)
        tools = [Ledger().tool("once"), Ledger().tool("keyed", name="book")]
        runtime.register_agent(Agent("chat", ModelPlanner("m"), tools=tools))
        client = runtime.agent_client("chat")
        first = await client.run("s", "Go", run_id="r1")
        if not answer:
            return first.run_id, ""
        done = await client.resume("s", "r1", ToolFailed("bounced", by="ops@example"))
        return first.run_id, done.run_id
    finally:
        await store.close()


def test_a_call_in_doubt_and_its_answer(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    asyncio.run(_in_doubt(db, answer=False))
    waiting = run_cli("--db", str(db), "transcript", "r1")
    assert waiting.code == 0, waiting.err
    assert "[once; in doubt (attempt 1, key al1-" in waiting.out
    assert "      [keyed]" in waiting.out
    runs = run_cli("--db", str(db), "runs", "s")
    assert runs.code == 0, runs.err
    assert "call c1: once; in doubt (attempt 1" in runs.out
    assert "call c2: keyed" in runs.out
    assert "tool_calls" in run_cli("--db", str(db), "--json", "runs", "s").out
    checked = run_cli("--db", str(db), "check")  # the new records decode strictly
    assert checked.code == 0, checked.out


def test_the_answer_and_who_gave_it(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    _, done = asyncio.run(_in_doubt(db, answer=True))
    shown = run_cli("--db", str(db), "transcript", done)
    assert shown.code == 0, shown.err
    assert "[once; was in doubt (attempt 1, key al1-" in shown.out
    assert "; answered failed by ops@example: bounced]" in shown.out
    runs = run_cli("--db", str(db), "runs", "s")
    assert "call c1: answered failed by ops@example: bounced" in runs.out
    assert done in runs.out
    checked = run_cli("--db", str(db), "check")
    assert checked.code == 0, checked.out
