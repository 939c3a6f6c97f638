"""Live model output on the Temporal engine: the worker's planner turns stream model_delta."""

from __future__ import annotations

from temporalio.client import Client

from agentledger.runtime import events
from agentledger.storage import RunStatus
from agentledger.storage.protocol import Store
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.engine.temporal.harness import temporal_runtime
from tests.engine.temporal.test_scenarios import chat
from tests.runtime.support import records
from tests.runtime.test_tool_loop import weather


async def test_model_deltas_reach_the_workers_stream(
    temporal_client: Client, store: Store, session: str
) -> None:
    """Each planner-turn activity streams its model output as model_delta events to the
    worker's StreamSink, before the recorded assistant message; no delta is a record."""
    model = ScriptedModel(
        [tool_calls(("c1", "weather", {"city": "Rome"}), text="Checking."), reply("Warm, 21C.")],
        chunk=4,
    )
    async with temporal_runtime(temporal_client, store, chat(model, tools=[weather])) as runtime:
        out = await runtime.agent_client("chat").run(session, "Rome?")
        published = runtime.stream.for_run(out.run_id)  # type: ignore[union-attr]
    assert out.status is RunStatus.COMPLETED
    deltas = [e for e in published if isinstance(e, events.ModelDelta)]
    assert "".join(d.text for d in deltas if d.turn == 1 and d.kind == "text") == "Checking."
    assert [d.tool_name for d in deltas if d.kind == "tool_use"] == ["weather"]
    assert "".join(d.text for d in deltas if d.turn == 2 and d.kind == "text") == "Warm, 21C."
    assert len([d for d in deltas if d.turn == 2]) == 3  # "Warm", ", 21", "C."
    keys = [e.key.split("/", 1)[1] for e in published]
    last_of_turn_2 = max(keys.index(d.key.split("/", 1)[1]) for d in deltas if d.turn == 2)
    assert last_of_turn_2 < keys.index("turn:2:final:messages")
    stored = await records(store, out.run_id)
    assert {r.type for r in stored}.isdisjoint({"model_delta"})
    others = [e for e in published if not isinstance(e, events.ModelDelta)]
    assert [e.key for e in others] == [f"{r.run_id}/{r.event_key}" for r in stored]
