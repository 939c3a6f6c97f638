"""``agentledger transcript`` shows where a history policy cut the model input and what a
compaction's summary replaced; ``--model-input`` shows only what the model is sent."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentledger.runtime import Agent, Compaction, ModelPlanner, QueueSink, Runtime
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing.scripted import ScriptedModel, reply
from agentledger.transcript import decode_messages
from tests.cli.conftest import run_cli
from tests.runtime.support import now_ms


async def _compacted(db: Path) -> str:
    store = await SQLiteStore.open(db, durability="normal")
    try:
        await store.create_session("s", created_at=now_ms())
        runtime = Runtime(store, stream=QueueSink())
        runtime.register_model("m", ScriptedModel([reply("x" * 200) for _ in range(4)]))
        runtime.register_model("sum", ScriptedModel([reply("They talked about x.")] * 4))
        policy = Compaction("sum", threshold_tokens=100, keep_tokens=40, prompt_version="3")
        runtime.register_agent(Agent("chat", ModelPlanner("m"), history=policy))
        client = runtime.agent_client("chat")
        previous = None
        for i in range(4):
            out = await client.run("s", f"question {i}", after=previous)
            previous = out.run_id
        assert previous is not None
        return previous
    finally:
        await store.close()


def test_transcript_shows_compactions_and_model_input(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    run_id = asyncio.run(_compacted(db))
    full = run_cli("--db", str(db), "transcript", run_id)
    assert full.code == 0, full.err
    assert "-- compacted (compaction:100" in full.out
    assert "with prompt agentledger.compaction version 3" in full.out
    assert "   | They talked about x." in full.out
    assert "question 0" in full.out  # the whole conversation, summarised or not
    sent = run_cli("--db", str(db), "transcript", "--model-input", run_id)
    assert sent.code == 0, sent.err
    assert "question 0" not in sent.out
    assert "They talked about x." in sent.out
    assert "-- compacted" not in sent.out
    whole = decode_messages(run_cli("--db", str(db), "--json", "transcript", run_id).out.encode())
    model = run_cli("--db", str(db), "--json", "transcript", "--model-input", run_id)
    assert len(decode_messages(model.out.encode())) < len(whole) == 8
