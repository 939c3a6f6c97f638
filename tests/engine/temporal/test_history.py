"""History policies and compaction on Temporal [V5]: the same cuts as in process, recorded
the same way, and a retried planner turn reuses the summary it already made."""

from __future__ import annotations

import uuid
from pathlib import Path

from temporalio.client import Client

from agentledger.runtime import Agent, Compaction, LastTurns, ModelPlanner, Runtime
from agentledger.runtime.history import SUMMARY_HEADER
from agentledger.storage import RunStatus, payloads
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing.scripted import ScriptedModel, reply
from agentledger.transcript import TextPart
from tests.engine.temporal.harness import now_ms, temporal_runtime
from tests.runtime.support import FailsOnce, provider_inputs_match_replay, records


async def _conversation(runtime: Runtime, session: str, turns: int) -> list[str]:
    client = runtime.agent_client("chat")
    previous: str | None = None
    runs = []
    for i in range(turns):
        out = await client.run(session, f"question {i}", after=previous)
        assert out.status is RunStatus.COMPLETED, out.failure
        previous = out.run_id
        runs.append(out.run_id)
    return runs


async def test_last_turns_on_temporal(temporal_client: Client, tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "h.db", durability="normal")
    session = f"s-{uuid.uuid4().hex}"
    await store.create_session(session, created_at=now_ms())
    model = ScriptedModel([reply(f"answer {i}") for i in range(5)])

    def setup(runtime: Runtime) -> None:
        runtime.register_model("m", model)
        runtime.register_agent(Agent("chat", ModelPlanner("m"), history=LastTurns(2)))

    try:
        async with temporal_runtime(temporal_client, store, setup) as runtime:
            runs = await _conversation(runtime, session, 5)
        users = [
            [m.parts[0] for m in request.messages if m.role == "user"] for request in model.requests
        ]
        assert users[-1] == [TextPart(text="question 3"), TextPart(text="question 4")]
        await provider_inputs_match_replay(store, model, runs)
    finally:
        await store.close()


async def test_compaction_on_temporal_summarises_once_across_retries(
    temporal_client: Client, tmp_path: Path
) -> None:
    """The third turn's model call fails after its summary was made: the retried planner
    turn uses the saved summary, so the summariser is asked once."""
    store = await SQLiteStore.open(tmp_path / "c.db", durability="normal")
    session = f"s-{uuid.uuid4().hex}"
    await store.create_session(session, created_at=now_ms())
    inner = ScriptedModel([reply("w" * 200) for _ in range(3)])
    model = FailsOnce(inner, fail_at=3)
    summariser = ScriptedModel([reply("the only summary")])

    def setup(runtime: Runtime) -> None:
        runtime.register_model("m", model)
        runtime.register_model("summariser", summariser)
        policy = Compaction("summariser", threshold_tokens=100, keep_tokens=40)
        runtime.register_agent(Agent("chat", ModelPlanner("m"), history=policy))

    try:
        async with temporal_runtime(temporal_client, store, setup) as runtime:
            runs = await _conversation(runtime, session, 3)
        assert len(summariser.requests) == 1
        assert model.calls == 4
        windows = [
            payloads.TranscriptWindow.decode(r.payload)
            for r in await records(store, runs[-1])
            if r.type == payloads.TRANSCRIPT_WINDOW
        ]
        assert [w.summary for w in windows] == [SUMMARY_HEADER + "the only summary"]
        await provider_inputs_match_replay(store, inner, runs)
    finally:
        await store.close()
