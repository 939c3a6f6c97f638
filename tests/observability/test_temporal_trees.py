"""The same span trees on the Temporal engine: one trace from the client through the worker."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from agentledger.errors import TransientError
from agentledger.runtime import Agent, ModelPlanner, Runtime, user_message
from agentledger.storage import RunStatus
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.engine.temporal.harness import temporal_runtime
from tests.observability.conftest import Spans
from tests.observability.support import (
    SCENARIOS,
    Failing,
    check_store_spans,
    check_turns,
    draw,
    one_trace,
    weather,
)


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_span_tree(
    name: str, spans: Spans, temporal_client: Client, store: SQLiteStore, session: str
) -> None:
    """Workflow spans (run, agent tool) and activity spans nest as on the in-process engine."""
    scenario = SCENARIOS[name]()
    async with temporal_runtime(temporal_client, store, scenario.setup) as runtime:
        runs = await scenario.drive(runtime, session)
    finished = spans.finished()
    assert draw(finished) == scenario.expected
    one_trace(finished)
    check_turns(finished)
    await check_store_spans(finished, store, runs)


async def test_a_turn_after_a_call_handed_back_is_retried_in_a_turn_span_of_its_own(
    spans: Spans, temporal_client: Client, store: SQLiteStore, session: str
) -> None:
    """The call's activity ran the planner turn after it, whose model failed transiently:
    that attempt's turn span is marked failed, and the retry (its own activity, as the loop
    asks for the turn) times itself in a second span of the same turn."""
    model = Failing(
        ScriptedModel([tool_calls(("c1", "weather", {"city": "Paris"})), reply("21C.")]),
        {1: TransientError("model overloaded", operation="complete")},
    )

    def setup(runtime: Runtime) -> None:
        runtime.register_model("m", model)
        runtime.register_agent(Agent("chat", ModelPlanner("m"), tools=[weather]))

    async with temporal_runtime(temporal_client, store, setup) as runtime:
        out = await runtime.agent_client("chat").run(session, [user_message("go")])
    assert out.status is RunStatus.COMPLETED
    finished = spans.finished()
    assert draw(finished) == [
        "agentledger.run chat status=completed",
        "  agentledger.turn #1 resume=False",
        "    chat m",
        "    execute_tool weather is_error=False",
        "  agentledger.turn #2 resume=True error=TransientError",
        "    chat m error=TransientError",
        "  agentledger.turn #2 resume=True",
        "    chat m",
    ]
    one_trace(finished)
    check_turns(finished)
    await check_store_spans(finished, store, [out.run_id])
