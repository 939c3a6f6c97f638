"""One function builds a planner turn's input (``runtime/planner_input.py``).

The run loop builds every planner turn's input with ``planner_input``; an engine
that runs the turn after a lone tool call in the call's activity (Temporal)
builds it with ``turn_after_call``. Watching the in-process engine's real
activities, the turn the loop runs right after each settled lone call has
exactly the input ``turn_after_call`` gives, and where the loop does something
else first, ``turn_after_call`` says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentledger.engine.base import Activity
from agentledger.engine.inprocess import InProcessEngine
from agentledger.runtime import Agent, ModelPlanner, Runtime, user_message
from agentledger.runtime.planner_input import turn_after_call
from agentledger.runtime.wire import (
    PLAN_TURN,
    TOOL_CALL,
    PlanTurnInput,
    ToolCallInput,
    ToolCallOutput,
)
from agentledger.storage import RunStatus
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.runtime.support import AnyStore
from tests.runtime.test_tool_loop import weather


class Watching(InProcessEngine):
    """The in-process engine, keeping each activity's input and output as it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, Any, Any]] = []

    def bind(self, workflow: Any, activities: Mapping[str, Activity]) -> None:
        def watched(name: str, fn: Activity) -> Activity:
            async def run(arg: Any) -> Any:
                out = await fn(arg)
                self.seen.append((name, arg, out))
                return out

            return run

        super().bind(workflow, {name: watched(name, fn) for name, fn in activities.items()})


async def _run(store: AnyStore, session: str, model: ScriptedModel, max_turns: int) -> Watching:
    engine = Watching()
    runtime = Runtime(store, engine=engine)
    runtime.register_model("m", model)
    runtime.register_agent(
        Agent("chat", ModelPlanner("m", system="Be brief."), tools=[weather], max_turns=max_turns)
    )
    out = await runtime.agent_client("chat").run(session, [user_message("Weather?")])
    await runtime.close()
    assert out.status in (RunStatus.COMPLETED, RunStatus.FAILED), out
    return engine


async def test_the_turn_after_each_lone_call_is_the_one_turn_after_call_builds(
    store: AnyStore, session: str
) -> None:
    model = ScriptedModel(
        [
            tool_calls(("c1", "weather", {"city": "Paris"})),
            tool_calls(("c2", "weather", {"city": "Oslo"})),
            tool_calls(("c3", "weather", {"city": "Rome"})),
            reply("Sunny everywhere."),
        ]
    )
    engine = await _run(store, session, model, max_turns=8)
    names = [name for name, _, _ in engine.seen]
    pairs = 0
    prompt = None
    for (name, arg, out), (after, then, _) in zip(engine.seen, engine.seen[1:], strict=False):
        if name == PLAN_TURN:
            assert isinstance(arg, PlanTurnInput)
            prompt = arg.prompt
        if name != TOOL_CALL:
            continue
        assert isinstance(arg, ToolCallInput)
        assert isinstance(out, ToolCallOutput)
        assert out.settled
        assert after == PLAN_TURN
        assert turn_after_call(arg, out, prompt) == then
        pairs += 1
    assert pairs == 3, names


async def test_no_turn_after_a_call_when_the_agent_is_out_of_turns(
    store: AnyStore, session: str
) -> None:
    """The last turn the agent may take plans a call: the loop plans no turn after it."""
    model = ScriptedModel([tool_calls(("c1", "weather", {"city": "Paris"})), reply("never")])
    engine = await _run(store, session, model, max_turns=1)
    calls = [(arg, out) for name, arg, out in engine.seen if name == TOOL_CALL]
    assert len(calls) == 1
    arg, out = calls[0]
    assert turn_after_call(arg, out, None) is None
    assert [name for name, _, _ in engine.seen].count(PLAN_TURN) == 1
