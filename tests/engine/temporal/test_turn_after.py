"""A lone tool call's activity runs the planner turn after it (``engine/temporal/fused.py``).

The turn the loop runs right after a lone call whose activity recorded the
step's results message (``runtime.planner_input.turn_after_call``, the one
function the loop builds planner inputs with) runs in the call's activity:
a one-tool run takes 2 workflow tasks, each further one-call turn one more.
These tests cover the shape and the records (the same as in process), a
cancel that interrupts that turn or meets it finished, a steer that comes
while it plans, a turn that suspends the run, a TransientError in it, and a
plan too large to carry back. Lost attempts (a worker killed in that turn)
run on real worker processes in ``test_crash_loop.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentledger.engine.base import RetryPolicy
from agentledger.engine.temporal import TemporalEngine, create_replayer, create_worker
from agentledger.engine.temporal.options import CALL_AND_PLAN, PLAN_AFTER_CALL, PLAN_AND_CALL
from agentledger.errors import TransientError
from agentledger.runtime import (
    Agent,
    Answer,
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
from agentledger.runtime.planner import AwaitClarification
from agentledger.runtime.stream import QueueSink
from agentledger.storage import MessageFate, RunStatus
from agentledger.storage.protocol import Store
from agentledger.testing import ScriptedModel, reply, tool_calls
from agentledger.transcript import ToolResultPart, validate_planner_transcript
from tests.engine.temporal.harness import temporal_runtime
from tests.runtime.support import records, types, valid_transcript
from tests.runtime.test_busy_steer import _text
from tests.runtime.test_tool_loop import weather

_WITHIN = 60


async def _shape(client: Client, run_id: str) -> tuple[int, list[str]]:
    history = await client.get_workflow_handle(run_id).fetch_history()
    tasks = sum(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in history.events
    )
    activities = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    replayed = await create_replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, repr(replayed.replay_failure)
    return tasks, activities


def _chat(model: ScriptedModel, tools: Any) -> Any:
    def setup(runtime: Runtime) -> None:
        runtime.register_model("m", model)
        runtime.register_agent(Agent("chat", ModelPlanner("m", system="Be brief."), tools=tools))

    return setup


def _agent(planner: Any, *tools: Any) -> Any:
    def setup(runtime: Runtime) -> None:
        runtime.register_agent(Agent("a", planner, tools=list(tools)))

    return setup


def _two_turns() -> ScriptedModel:
    return ScriptedModel(
        [
            tool_calls(("c1", "weather", {"city": "Paris"})),
            tool_calls(("c2", "weather", {"city": "Oslo"})),
            reply("21C and 21C."),
        ]
    )


@tool
async def quick() -> str:
    """Answer at once."""
    return "found"


class _First:
    """Calls ``quick`` on turn 1; ``resume`` decides turn 2."""

    def __init__(self) -> None:
        self.resumes = 0

    async def plan_start(self, input: PlanInput) -> PlanResult:
        return PlanResult.call(ToolCall(id="c1", name="quick", input={}))

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        self.resumes += 1
        return await self.resume(input)

    async def resume(self, input: PlanResumeInput) -> PlanResult:
        raise NotImplementedError


async def test_two_one_call_turns_take_three_workflow_tasks_and_the_same_records(
    temporal_client: Client, store: Store, session: str
) -> None:
    """Turn 1, its call and turn 2 in one activity; turn 2's call and turn 3 in the next:
    3 workflow tasks, the in-process records and stream, and the history replays."""
    async with temporal_runtime(temporal_client, store, _chat(_two_turns(), [weather])) as runtime:
        out = await runtime.agent_client("chat").run(session, [user_message("Weather?")])
        published = [
            e.key
            for e in runtime.stream.for_run(out.run_id)  # type: ignore[union-attr]
            if type(e).__name__ != "ModelDelta"
        ]
    assert out.status is RunStatus.COMPLETED, out.failure
    assert out.text == "21C and 21C."
    assert await _shape(temporal_client, out.run_id) == (3, [PLAN_AND_CALL, CALL_AND_PLAN])

    local = Runtime(store, stream=QueueSink())
    _chat(_two_turns(), [weather])(local)
    alone = await local.agent_client("chat").run(session, [user_message("Weather?")])
    assert await types(store, out.run_id) == await types(store, alone.run_id)
    stored = await records(store, out.run_id)
    assert published == [f"{r.run_id}/{r.event_key}" for r in stored]
    messages = await valid_transcript(store, out.run_id)
    assert [m.role for m in messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]


async def test_a_cancel_while_the_turn_after_the_call_plans_interrupts_it(
    temporal_client: Client, store: Store, session: str
) -> None:
    """The cancel reaches the activity in the turn after the call: that turn is interrupted,
    nothing of it is recorded, the call's result stands and the run ends canceled."""
    planning, interrupted = asyncio.Event(), asyncio.Event()

    class Held(_First):
        async def resume(self, input: PlanResumeInput) -> PlanResult:
            planning.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                interrupted.set()
                raise
            raise AssertionError("not canceled")

    planner = Held()
    async with temporal_runtime(temporal_client, store, _agent(planner, quick)) as runtime:
        handle = await runtime.agent_client("a").start(session, [user_message("go")])
        await asyncio.wait_for(planning.wait(), _WITHIN)
        await handle.cancel("stop")
        out = await asyncio.wait_for(handle.wait(), _WITHIN)
        await asyncio.wait_for(interrupted.wait(), _WITHIN)
    assert out.status is RunStatus.CANCELED, out.failure
    assert out.cancellation_reason == "stop"
    assert planner.resumes == 1  # the turn is not planned again
    kinds = await types(store, handle.run_id)
    assert kinds.count("tool_result_received") == 1
    assert kinds.count("transcript_messages_appended") == 3  # input, plan, results: no turn 2
    assert kinds[-1] == "run_completed"
    messages = await valid_transcript(store, handle.run_id)
    assert [m.role for m in messages] == ["user", "assistant", "user"]
    result = messages[-1].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.content == "found"
    assert (await _shape(temporal_client, handle.run_id))[1] == [PLAN_AND_CALL]


async def test_a_cancel_that_meets_the_turn_after_finished_records_its_plan(
    temporal_client: Client, store: Store, session: str
) -> None:
    """The turn after the call finishes in spite of the cancel, with a plan of one more call:
    the loop takes its plan (recorded), then ends the run canceled, that call unrun with an
    interrupted result: every tool use has its result."""
    planning = asyncio.Event()
    ran: list[str] = []

    @tool
    async def act() -> str:
        """Must not run."""
        ran.append("act")
        return "acted"

    class Stubborn(_First):
        async def resume(self, input: PlanResumeInput) -> PlanResult:
            planning.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                assert task is not None
                task.uncancel()
            return PlanResult.call(ToolCall(id="c2", name="act", input={}))

    planner = Stubborn()
    async with temporal_runtime(temporal_client, store, _agent(planner, quick, act)) as runtime:
        handle = await runtime.agent_client("a").start(session, [user_message("go")])
        await asyncio.wait_for(planning.wait(), _WITHIN)
        await handle.cancel("stop")
        out = await asyncio.wait_for(handle.wait(), _WITHIN)
    assert out.status is RunStatus.CANCELED, out.failure
    assert ran == []
    assert planner.resumes == 1
    kinds = await types(store, handle.run_id)
    assert kinds.count("tool_call_scheduled") == 2
    assert kinds[-3:] == ["tool_result_received", "transcript_messages_appended", "run_completed"]
    messages = await valid_transcript(store, handle.run_id)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    result = messages[-1].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.tool_use_id == "c2"
    assert result.is_error


async def test_a_steer_while_the_turn_after_the_call_plans_is_the_next_turn(
    temporal_client: Client, store: Store, session: str
) -> None:
    """A steering message sent while the turn after the call plans (the run's last) comes too
    late for the run, as in process: it becomes its own turn, which sees the whole talk."""
    holding, release = asyncio.Event(), asyncio.Event()

    class Gated(_First):
        async def resume(self, input: PlanResumeInput) -> PlanResult:
            messages = await input.prepare_messages()
            if self.resumes == 1:
                holding.set()
                await release.wait()
            users = [_text(m) for m in messages if m.role == "user" and _text(m)]
            return PlanResult.answer("re: " + " / ".join(users))

        async def plan_start(self, input: PlanInput) -> PlanResult:
            if self.resumes:  # the steer's own turn
                messages = await input.prepare_messages()
                users = [_text(m) for m in messages if m.role == "user" and _text(m)]
                return PlanResult.answer("then: " + " / ".join(users))
            return await super().plan_start(input)

    planner = Gated()
    async with temporal_runtime(temporal_client, store, _agent(planner, quick)) as runtime:
        client = runtime.agent_client("a")
        first = await client.start(session, "look it up", if_busy="queue")
        await asyncio.wait_for(holding.wait(), _WITHIN)
        steer = await client.start(session, "cats", if_busy="steer")
        release.set()
        out = await asyncio.wait_for(first.wait(), _WITHIN)
        assert out.status is RunStatus.COMPLETED, out.failure
        assert out.text == "re: look it up"
        then = await asyncio.wait_for(steer.wait(), _WITHIN)
        assert then.run_id == steer.run_id != first.run_id
        assert then.text == "then: look it up / cats"
        validate_planner_transcript(await runtime.transcript(first.run_id))
    stored = await store.list_session_messages(session)
    assert [m.fate for m in stored] == [MessageFate.START, MessageFate.STEERING]
    assert (await _shape(temporal_client, first.run_id))[1] == [PLAN_AND_CALL]


async def test_a_turn_after_the_call_that_waits_suspends_the_run(
    temporal_client: Client, store: Store, session: str
) -> None:
    """The turn after the call asks the user: the run suspends with that question (from the
    same activity), and resuming it answers."""

    class Asks(_First):
        async def resume(self, input: PlanResumeInput) -> PlanResult:
            if input.answer is not None:
                return PlanResult.answer(f"ok: {input.answer.text}")
            return PlanResult(await_=AwaitClarification(question="Which city?"))

    async with temporal_runtime(temporal_client, store, _agent(Asks(), quick)) as runtime:
        client = runtime.agent_client("a")
        out = await client.run(session, [user_message("go")])
        assert out.status is RunStatus.SUSPENDED, out.failure
        assert out.awaiting is not None
        assert out.awaiting.question == "Which city?"
        assert (await types(store, out.run_id))[-1] == "run_suspended"
        assert await _shape(temporal_client, out.run_id) == (2, [PLAN_AND_CALL])
        done = await client.resume(session, out.run_id, Answer(text="Oslo"))
    assert done.status is RunStatus.COMPLETED, done.failure
    assert done.text == "ok: Oslo"


async def test_a_transient_error_in_the_turn_after_the_call_hands_it_back(
    temporal_client: Client, store: Store, session: str
) -> None:
    """The turn after the call fails with a TransientError in the call's activity: it is
    handed back and retried in an activity of its own (its second attempt), the call not
    run again."""
    calls: list[str] = []

    @tool
    async def counted() -> str:
        """Count each run."""
        calls.append("x")
        return "found"

    class Flaky(_First):
        async def plan_start(self, input: PlanInput) -> PlanResult:
            return PlanResult.call(ToolCall(id="c1", name="counted", input={}))

        async def resume(self, input: PlanResumeInput) -> PlanResult:
            if self.resumes == 1:
                raise TransientError("busy", operation="model")
            return PlanResult.answer(str(input.tool_results[0].content))

    planner = Flaky()
    async with temporal_runtime(temporal_client, store, _agent(planner, counted)) as runtime:
        out = await runtime.agent_client("a").run(session, [user_message("go")])
    assert out.status is RunStatus.COMPLETED, out.failure
    assert out.text == "found"
    assert planner.resumes == 2
    assert calls == ["x"]
    assert (await _shape(temporal_client, out.run_id))[1] == [PLAN_AND_CALL, PLAN_AFTER_CALL]
    await valid_transcript(store, out.run_id)


async def test_a_turn_after_too_large_to_carry_is_read_back_not_planned_again(
    temporal_client: Client, store: Store, session: str
) -> None:
    """The call's result and the next plan fit the payload limit apart, not together: the
    recorded plan is read back by the handed-back turn, and the planner is asked once."""

    @tool
    async def big() -> str:
        """Return a large text."""
        return "y" * 30_000

    class Long(_First):
        async def plan_start(self, input: PlanInput) -> PlanResult:
            return PlanResult.call(ToolCall(id="c1", name="big", input={}))

        async def resume(self, input: PlanResumeInput) -> PlanResult:
            return PlanResult.answer("z" * 40_000)

    planner = Long()
    async with temporal_runtime(
        temporal_client, store, _agent(planner, big), max_payload_bytes=64 * 1024
    ) as runtime:
        out = await runtime.agent_client("a").run(session, [user_message("go")])
    assert out.status is RunStatus.COMPLETED, out.failure
    assert out.text == "z" * 40_000
    assert planner.resumes == 1
    assert (await _shape(temporal_client, out.run_id))[1] == [PLAN_AND_CALL, PLAN_AFTER_CALL]
    await valid_transcript(store, out.run_id)


async def test_a_cancel_while_the_turn_after_a_later_call_plans_interrupts_it(
    temporal_client: Client, store: Store, session: str
) -> None:
    """The same for a later turn's lone call, which runs with the turn after it in an
    activity of its own: both calls' results stand, turn 3 is interrupted, nothing of it
    recorded."""
    planning, interrupted = asyncio.Event(), asyncio.Event()

    class HeldLater(_First):
        async def resume(self, input: PlanResumeInput) -> PlanResult:
            if self.resumes == 1:
                return PlanResult.call(ToolCall(id="c2", name="quick", input={}))
            planning.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                interrupted.set()
                raise
            raise AssertionError("not canceled")

    planner = HeldLater()
    async with temporal_runtime(temporal_client, store, _agent(planner, quick)) as runtime:
        handle = await runtime.agent_client("a").start(session, [user_message("go")])
        await asyncio.wait_for(planning.wait(), _WITHIN)
        await handle.cancel("stop")
        out = await asyncio.wait_for(handle.wait(), _WITHIN)
        await asyncio.wait_for(interrupted.wait(), _WITHIN)
    assert out.status is RunStatus.CANCELED, out.failure
    assert planner.resumes == 2
    messages = await valid_transcript(store, handle.run_id)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert (await types(store, handle.run_id))[-1] == "run_completed"
    assert (await _shape(temporal_client, handle.run_id))[1] == [PLAN_AND_CALL, CALL_AND_PLAN]


async def test_a_later_call_s_transient_errors_keep_its_key_attempts_and_budget(
    temporal_client: Client, store: Store, session: str
) -> None:
    """A keyed tool that always raises TransientError on turn 2, in the activity that would
    run turn 3 too: maximum_attempts calls under one key, attempts 1..N, then an error
    result; turn 3 is planned in an activity of its own."""
    seen: list[tuple[str, int]] = []

    @tool(effect="keyed")
    async def flaky(ctx: ToolContext) -> str:
        """Never works."""
        seen.append((ctx.idempotency_key, ctx.attempt))
        raise TransientError("try again", operation="flaky")

    class Later(_First):
        async def resume(self, input: PlanResumeInput) -> PlanResult:
            if self.resumes == 1:
                return PlanResult.call(ToolCall(id="c2", name="flaky", input={}))
            return PlanResult.answer("gave up")

    policy = RetryPolicy(initial_interval=0.05, maximum_interval=0.2, maximum_attempts=3)
    queue = f"later-{session}"
    engine = TemporalEngine(temporal_client, task_queue=queue, retry_policy=policy)
    runtime = Runtime(store, engine=engine)
    _agent(Later(), quick, flaky)(runtime)
    async with create_worker(runtime, temporal_client, queue):
        out = await runtime.agent_client("a").run(session, [user_message("go")])
    assert out.status is RunStatus.COMPLETED, out.failure
    assert [attempt for _, attempt in seen] == [1, 2, 3]
    assert len({key for key, _ in seen}) == 1
    result = (await valid_transcript(store, out.run_id))[4].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.is_error
    assert "try again" in str(result.content)
    activities = (await _shape(temporal_client, out.run_id))[1]
    assert activities == [PLAN_AND_CALL, CALL_AND_PLAN, PLAN_AND_CALL]


async def test_a_turn_after_the_call_that_keeps_failing_gets_the_run_s_attempts(
    temporal_client: Client, store: Store, session: str
) -> None:
    """A TransientError on every attempt of the turn after the call: maximum_attempts in
    all (the first in the call's activity), then the run fails as a planner error."""

    class Failing(_First):
        async def resume(self, input: PlanResumeInput) -> PlanResult:
            raise TransientError("busy", operation="model")

    planner = Failing()
    policy = RetryPolicy(initial_interval=0.05, maximum_interval=0.2, maximum_attempts=3)
    queue = f"failing-{session}"
    engine = TemporalEngine(temporal_client, task_queue=queue, retry_policy=policy)
    runtime = Runtime(store, engine=engine)
    _agent(planner, quick)(runtime)
    async with create_worker(runtime, temporal_client, queue):
        out = await runtime.agent_client("a").run(session, [user_message("go")])
    assert out.status is RunStatus.FAILED
    assert out.failure is not None
    assert out.failure.kind == "planner_error"
    assert planner.resumes == 3
    assert (await _shape(temporal_client, out.run_id))[1] == [PLAN_AND_CALL, PLAN_AFTER_CALL]
