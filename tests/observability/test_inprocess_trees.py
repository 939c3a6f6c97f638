"""The span tree of each scenario on the in-process engine (the Temporal engine must match)."""

from __future__ import annotations

import pytest

from agentledger.engine import InProcessEngine
from agentledger.runtime import Agent, ModelPlanner, Runtime, idempotency_key
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.observability.conftest import Spans
from tests.observability.support import (
    SCENARIOS,
    check_store_spans,
    check_turns,
    draw,
    one_trace,
)
from tests.runtime.test_effects import FAST, Ledger


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_span_tree(name: str, spans: Spans, store: SQLiteStore, session: str) -> None:
    """Run, turn, model and tool spans nest as the scenario says; store spans name every record."""
    scenario = SCENARIOS[name]()
    runtime = Runtime(store)
    scenario.setup(runtime)
    runs = await scenario.drive(runtime, session)
    await runtime.close()
    finished = spans.finished()
    assert draw(finished) == scenario.expected
    one_trace(finished)
    check_turns(finished)
    await check_store_spans(finished, store, runs)


async def test_a_tool_span_names_its_key_attempt_and_effect(
    spans: Spans, store: SQLiteStore, session: str
) -> None:
    """Each attempt of a keyed call is a span with the call's key, that attempt's number
    and the tool's effect class."""
    runtime = Runtime(store, engine=InProcessEngine(FAST))
    runtime.register_model(
        "m", ScriptedModel([tool_calls(("c1", "book", {"to": "a"})), reply("ok")])
    )
    tool = Ledger().tool("keyed", name="book", fail_first=True)
    runtime.register_agent(Agent("chat", ModelPlanner("m"), tools=[tool]))
    out = await runtime.agent_client("chat").run(session, "Book", run_id="traced-1")
    await runtime.close()
    tools = [s for s in spans.finished() if s.name == "execute_tool book"]
    seen = [
        (
            (s.attributes or {})["agentledger.tool.idempotency_key"],
            (s.attributes or {})["agentledger.tool.attempt"],
            (s.attributes or {})["agentledger.tool.effect"],
        )
        for s in tools
    ]
    key = idempotency_key(out.run_id, "c1")
    assert seen == [(key, 1, "keyed"), (key, 2, "keyed")]
