"""A planner turn's activity runs the plan's lone tool call too (``engine/temporal/fused.py``).

One activity and one workflow task for a planner turn and its call (and the
turn after it, see ``test_turn_after.py``): a one-tool run takes 2 workflow
tasks instead of 4, with the records, attempts, keys and retry budget the
call would have had in its own activity. The hard cases
(a worker lost inside the call, a once call in doubt, crash loops) run on
real worker processes in ``test_crash_loop.py``, ``test_effects.py`` and
``test_effects_sigkill.py``; these tests cover the shape, replay, a
cancel that meets a finished call or comes between the plan and the call,
and the retry budget.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from agentledger.engine.base import RetryPolicy
from agentledger.engine.temporal import TemporalEngine, create_replayer, create_worker
from agentledger.engine.temporal.options import CALL_AFTER_PLAN, PLAN_AND_CALL
from agentledger.errors import TransientError
from agentledger.runtime import (
    Agent,
    ModelPlanner,
    PlanInput,
    PlanResult,
    PlanResumeInput,
    Runtime,
    ToolCall,
    ToolContext,
    tool,
    user_message,
)
from agentledger.runtime.stream import QueueSink
from agentledger.storage import RunStatus
from agentledger.storage.protocol import Store
from agentledger.testing import ScriptedModel, reply, tool_calls
from agentledger.transcript import ToolResultPart
from tests.engine.temporal.harness import temporal_runtime
from tests.runtime.support import records, types, valid_transcript
from tests.runtime.test_tool_loop import weather


def _chat(model: ScriptedModel, tools: Any) -> Any:
    def setup(runtime: Runtime) -> None:
        runtime.register_model("m", model)
        runtime.register_agent(Agent("chat", ModelPlanner("m", system="Be brief."), tools=tools))

    return setup


def _one_tool() -> ScriptedModel:
    return ScriptedModel([tool_calls(("c1", "weather", {"city": "Paris"})), reply("21C.")])


async def _shape(client: Client, run_id: str) -> tuple[int, list[str], WorkflowHistory]:
    history = await client.get_workflow_handle(run_id).fetch_history()
    tasks = sum(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in history.events
    )
    activities = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    return tasks, activities, history


async def test_a_one_tool_run_takes_two_workflow_tasks_and_the_same_records(
    temporal_client: Client, store: Store, session: str
) -> None:
    """Planner turn + call + the turn after it in one activity: 2 workflow tasks, the
    in-process records and stream, and the history replays on this code."""
    async with temporal_runtime(temporal_client, store, _chat(_one_tool(), [weather])) as runtime:
        out = await runtime.agent_client("chat").run(session, [user_message("Weather?")])
        published = [
            e.key
            for e in runtime.stream.for_run(out.run_id)  # type: ignore[union-attr]
            if type(e).__name__ != "ModelDelta"
        ]
    assert out.status is RunStatus.COMPLETED, out.failure
    assert out.text == "21C."
    tasks, activities, history = await _shape(temporal_client, out.run_id)
    assert tasks == 2
    assert activities == [PLAN_AND_CALL]

    local = Runtime(store, stream=QueueSink())
    _chat(_one_tool(), [weather])(local)
    alone = await local.agent_client("chat").run(session, [user_message("Weather?")])
    assert await types(store, out.run_id) == await types(store, alone.run_id)
    stored = await records(store, out.run_id)
    assert published == [f"{r.run_id}/{r.event_key}" for r in stored]
    messages = await valid_transcript(store, out.run_id)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]

    replayed = await create_replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, repr(replayed.replay_failure)


async def test_a_cancel_that_meets_a_finished_call_records_its_result(
    temporal_client: Client, store: Store, session: str
) -> None:
    """The cancel reaches the activity while the tool runs, the tool finishes all the same:
    the loop records the call's result (it is in the log), then ends the run canceled."""
    started = asyncio.Event()

    @tool
    async def stubborn() -> str:
        """Finishes even when interrupted."""
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            assert task is not None
            task.uncancel()
        return "finished anyway"

    model = ScriptedModel([tool_calls(("c1", "stubborn", {})), reply("never")])
    async with temporal_runtime(temporal_client, store, _chat(model, [stubborn])) as runtime:
        handle = await runtime.agent_client("chat").start(session, [user_message("go")])
        await asyncio.wait_for(started.wait(), 30)
        await handle.cancel("stop")
        out = await asyncio.wait_for(handle.wait(), 60)
    assert out.status is RunStatus.CANCELED, out.failure
    assert out.cancellation_reason == "stop"
    kinds = await types(store, handle.run_id)
    assert kinds.count("tool_result_received") == 1
    # the call recorded its step's results message and turn 2's phase with its result
    assert kinds[-4:] == [
        "tool_result_received",
        "transcript_messages_appended",
        "phase:synthesizing",
        "run_completed",
    ]
    result = (await valid_transcript(store, handle.run_id))[-1].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.content == "finished anyway"
    assert not result.is_error
    assert len(model.requests) == 1  # no planner turn after the cancel


async def test_a_transient_error_in_the_turn_keeps_the_call_s_retry_budget(
    temporal_client: Client, store: Store, session: str
) -> None:
    """A keyed tool that always raises TransientError: maximum_attempts calls in all (the first
    in the planner turn's activity), attempts 1..N under one key, then an error result."""
    seen: list[tuple[str, int]] = []

    @tool(effect="keyed")
    async def flaky(ctx: ToolContext) -> str:
        """Never works."""
        seen.append((ctx.idempotency_key, ctx.attempt))
        raise TransientError("try again", operation="flaky")

    model = ScriptedModel([tool_calls(("c1", "flaky", {})), reply("gave up")])
    policy = RetryPolicy(initial_interval=0.05, maximum_interval=0.2, maximum_attempts=3)
    queue = f"fused-{session}"
    engine = TemporalEngine(temporal_client, task_queue=queue, retry_policy=policy)
    runtime = Runtime(store, engine=engine)
    _chat(model, [flaky])(runtime)
    async with create_worker(runtime, temporal_client, queue):
        out = await runtime.agent_client("chat").run(session, [user_message("go")])
    assert out.status is RunStatus.COMPLETED, out.failure
    assert [attempt for _, attempt in seen] == [1, 2, 3]
    assert len({key for key, _ in seen}) == 1
    result = (await valid_transcript(store, out.run_id))[2].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.is_error
    assert "try again" in str(result.content)
    _, activities, _ = await _shape(temporal_client, out.run_id)
    assert activities == [PLAN_AND_CALL, CALL_AFTER_PLAN, PLAN_AND_CALL]


async def test_a_cancel_between_the_plan_and_the_call_leaves_the_call_unrun(
    temporal_client: Client, store: Store, session: str
) -> None:
    """The cancel reaches the activity while the planner works; the planner finishes its plan
    all the same (recorded): the call is not started, the loop records it interrupted."""
    planning = asyncio.Event()
    ran: list[str] = []

    @tool
    async def act() -> str:
        """Must not run."""
        ran.append("act")
        return "acted"

    class Stubborn:
        async def plan_start(self, input: PlanInput) -> PlanResult:
            planning.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                assert task is not None
                task.uncancel()
            return PlanResult.call(ToolCall(id="c1", name="act", input={}))

        async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
            raise AssertionError("no planner turn after the cancel")

    def setup(runtime: Runtime) -> None:
        runtime.register_agent(Agent("stubborn", Stubborn(), tools=[act]))

    async with temporal_runtime(temporal_client, store, setup) as runtime:
        handle = await runtime.agent_client("stubborn").start(session, [user_message("go")])
        await asyncio.wait_for(planning.wait(), 30)
        await handle.cancel("stop")
        out = await asyncio.wait_for(handle.wait(), 60)
    assert out.status is RunStatus.CANCELED, out.failure
    assert ran == []
    kinds = await types(store, handle.run_id)
    assert kinds.count("tool_call_scheduled") == 1
    assert kinds[-3:] == ["tool_result_received", "transcript_messages_appended", "run_completed"]
    result = (await valid_transcript(store, handle.run_id))[-1].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.is_error


async def test_a_result_too_large_to_carry_with_its_plan_is_read_back_not_run_again(
    temporal_client: Client, store: Store, session: str
) -> None:
    """Plan and result fit the payload limit apart, not together: the call's recorded result
    is read back by the handed-back call, and the tool runs once."""
    calls: list[int] = []

    @tool
    async def big(blob: str) -> str:
        """Return a large text."""
        calls.append(len(blob))
        return "y" * 20_000

    model = ScriptedModel([tool_calls(("c1", "big", {"blob": "x" * 25_000})), reply("ok")])
    async with temporal_runtime(
        temporal_client, store, _chat(model, [big]), max_payload_bytes=64 * 1024
    ) as runtime:
        out = await runtime.agent_client("chat").run(session, [user_message("go")])
    assert out.status is RunStatus.COMPLETED, out.failure
    assert calls == [25_000]
    result = (await valid_transcript(store, out.run_id))[2].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.content == "y" * 20_000
    assert not result.is_error
    _, activities, _ = await _shape(temporal_client, out.run_id)
    assert activities == [PLAN_AND_CALL, CALL_AFTER_PLAN, PLAN_AND_CALL]
