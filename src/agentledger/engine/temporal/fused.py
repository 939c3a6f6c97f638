"""A planner turn, its lone tool call and the planner turn after it in one activity.

A one-tool run on Temporal used to take four workflow tasks: the planner
turn's result came back to the workflow only for it to schedule the tool
call, whose result came back for it to schedule the next planner turn. The
worker can decide that middle step itself: a plan of exactly one tool call
(not an agent used as a tool), recorded and not suspended, is always
followed by that call, with the very input the run loop would give it. So
:data:`~agentledger.engine.temporal.options.PLAN_AND_CALL` runs the planner
turn and then, in the same attempt, the call; the workflow gets both results
in one task, and the loop's tool call takes the carried result instead of
scheduling an activity (see :class:`~agentledger.engine.temporal.workflows.TemporalContext`).

What stays the same, by construction:

* **Attempts and keys.** The call runs as attempt 1 of a tool call, with the
  key, effect class and ``started_at`` the loop gives it; it runs only in
  the attempt that recorded the plan. An attempt that finds the plan
  already recorded (an earlier one was lost after it, maybe inside the
  tool) does not run the call: it hands it back, and the workflow runs
  :data:`~agentledger.engine.temporal.options.CALL_AFTER_PLAN`, whose
  attempts count on from that first one (attempt 2, 3, ...: a retry reads
  the recorded result first, a ``once`` call without one is in doubt).
* **Crash loops.** A lost attempt counts against the step it was lost in:
  before the plan was recorded, the planner turn's (the activity pauses the
  run as a planner turn that kept dying); after, the tool call's (the
  handed-back call starts with that one lost attempt counted).
* **Errors.** A TransientError of the tool ends the attempt's tool part,
  not the activity: the call is handed back with the error and retried as
  :data:`~agentledger.engine.temporal.options.CALL_AFTER_PLAN` (its
  attempts still bounded by the run's retry policy); any other error is
  the tool call's failure, exactly as if its own activity had failed.
* **Cancellation.** A cancel that reaches the activity before the call
  starts leaves the call to the loop (which gives it its interrupted
  result); one that reaches it while the tool runs interrupts the tool,
  and the call comes back unfinished (the loop records it interrupted). A
  call that finished is always carried back, and the loop records it
  before it sees the cancel.

The planner turn after the call. A lone call of a planner turn's step
records, with its result, what the next turn writes first; the loop then
runs that turn with nothing written or decided between them, with the input
:func:`~agentledger.runtime.planner_input.turn_after_call` builds (the
function the loop builds every planner input with). So, when the workflow
asks (``PlanAndCall.turn_after``), the activity runs that turn too, after
the call, and carries its plan back: a one-tool run is one activity. A later
turn's lone call runs with the turn after it the same way
(:data:`~agentledger.engine.temporal.options.CALL_AND_PLAN`). The turn keeps
what it would have had in its own activity: it runs as its attempt 1; an
attempt of the activity that finds the call's result recorded (one before
it was lost after the call) does not run it but hands it back with that
lost attempt counted against it
(:data:`~agentledger.engine.temporal.options.PLAN_AFTER_CALL`, attempts
numbered on: a recorded plan is read back); a TransientError, an
interruption or a plan too large to carry back hands it back too; a cancel
that reached the activity before it keeps it from starting (the loop stops
before it), and a plan finished in spite of one is carried back, the
workflow holding the cancel until the loop has taken it.

Tracing. The turn after the call opens its ``agentledger.turn`` span here
(:class:`~agentledger.runtime.tracing.TurnSpan`), under the run's span that the
workflow sends as a W3C carrier (``trace``), and carries its own span's carrier
back (:attr:`TurnAfter.trace`): the workflow makes it the parent of what the plan
causes instead of opening a span of its own for the turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
from temporalio import activity

from agentledger.engine.base import Activity, activity_attempt, attempt_of
from agentledger.engine.temporal.failures import error_details
from agentledger.engine.temporal.options import (
    BeganRun,
    CallAfterPlan,
    CallAndPlan,
    CallAndPlanOutput,
    PlanAfterCall,
    PlanAndCall,
    PlanAndCallOutput,
    TurnAfter,
)
from agentledger.runtime import records as rt
from agentledger.runtime.planner import ToolCall
from agentledger.runtime.planner_input import turn_after_call
from agentledger.runtime.steps import effect_of
from agentledger.runtime.tracing import TurnSpan
from agentledger.runtime.wire import (
    PLAN_TURN,
    TOOL_CALL,
    BeginRunInput,
    BeginRunOutput,
    PlanTurnInput,
    PlanTurnOutput,
    ToolCallInput,
    ToolCallOutput,
)
from agentledger.storage.protocol import Store

__all__ = [
    "began_run_activity",
    "call_after_plan_activity",
    "call_and_plan_activity",
    "call_settled",
    "lone_call",
    "plan_after_call_activity",
    "plan_and_call_activity",
    "plan_recorded",
    "progress",
]


def _now() -> datetime:
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


def lone_call(out: PlanTurnOutput, arg: PlanAndCall) -> ToolCallInput | None:
    """The tool call the run loop makes right after this planner turn, with the input it
    gives it (its result stamped ``at``, the next turn's first records with it), if the
    turn planned exactly one plain tool call.

    None for anything else: a final answer, an await, several calls, an agent
    used as a tool, a failed or suspended turn, an ended session.
    """
    plan = out.result
    if (
        plan is None
        or out.failure is not None
        or not out.recorded
        or out.suspended
        or out.session_ended
        or plan.final is not None
        or plan.await_ is not None
        or len(plan.tool_calls) != 1
        or out.finished_at is None
    ):
        return None
    call: ToolCall = plan.tool_calls[0]
    if call.name in arg.agent.agent_tools:
        return None
    turn = arg.plan
    effect = effect_of(arg.agent.effects, call.name)
    return ToolCallInput(
        run=turn.run,
        turn_id=turn.turn_id,
        call=call,
        step=rt.turn_step(turn.turn),
        at=out.finished_at,
        max_turn_attempts=turn.max_turn_attempts,
        effect=effect,
        started_at=turn.at if effect == "once" else None,
        then_turn=arg.agent.turn_after(turn.turn),
    )


async def progress(store: Store, arg: PlanAndCall) -> int:
    """How far earlier attempts got: 0 nothing recorded of this turn's tool plan, 1 its plan
    (so one may have run the call), 2 the call's result too, with its step's results
    message (so one may have started the planner turn after it)."""
    prefix = f"{rt.turn_step(arg.plan.turn)}:tool:"
    settled = rt.messages_key(f"{rt.turn_step(arg.plan.turn)}:tool_results")
    found = 0
    cursor = ""
    while True:
        page = await store.list_run_records(arg.plan.run.run_id, cursor=cursor)
        for record in page.records:
            if record.type == rt.TOOL_CALL_SCHEDULED and record.event_key.startswith(prefix):
                found = max(found, 1)
            elif found and record.event_key == settled:
                return 2
        if not page.next_cursor:
            return found
        cursor = page.next_cursor


async def call_settled(store: Store, call: ToolCallInput) -> bool:
    """Whether an earlier attempt recorded lone call ``call``'s result with its step's results
    message (so one may have started the planner turn after it)."""
    settled = rt.messages_key(f"{call.step}:tool_results")
    cursor = ""
    while True:
        page = await store.list_run_records(call.run.run_id, cursor=cursor)
        if any(record.event_key == settled for record in page.records):
            return True
        if not page.next_cursor:
            return False
        cursor = page.next_cursor


async def plan_recorded(store: Store, arg: PlanAndCall) -> bool:
    """Whether an earlier attempt recorded this turn's tool plan (so it may have run the call)."""
    return await progress(store, arg) > 0


def _uncancel() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


def plan_and_call_activity(
    plan_turn: Activity, tool_call: Activity, store: Store, check: Callable[[Any], str]
) -> Callable[[PlanAndCall], Awaitable[PlanAndCallOutput]]:
    """The :data:`~agentledger.engine.temporal.options.PLAN_AND_CALL` activity over the
    runtime's planner turn and tool call (``check``: why a result cannot be carried)."""

    async def plan_and_call(arg: PlanAndCall) -> PlanAndCallOutput:
        done = await progress(store, arg) if activity_attempt() > 1 else 0
        out: PlanTurnOutput = await plan_turn(arg.plan)  # a retry returns the stored plan
        out = msgspec.structs.replace(out, finished_at=max(_now(), arg.not_before))
        call = lone_call(out, arg)
        if call is None:
            return PlanAndCallOutput(plan=out)
        if done == 2 and arg.turn_after:  # lost after the call's result: in the turn after
            with attempt_of(2, check):  # the call's retry reads its recorded result
                read: ToolCallOutput = await tool_call(call)
            read = msgspec.structs.replace(read, finished_at=max(_now(), out.finished_at or _now()))
            lost = TurnAfter(lost=True) if _turn_after(call, read, arg) is not None else None
            return PlanAndCallOutput(plan=out, call_id=call.call.id, tool=read, after=lost)
        if done:
            return PlanAndCallOutput(plan=out, call_id=call.call.id, lost=True)
        if activity.is_cancelled():
            return PlanAndCallOutput(plan=out)  # the loop gives the call its interrupted result
        try:
            with attempt_of(1, check):
                tool: ToolCallOutput = await tool_call(call)
        except asyncio.CancelledError:
            _uncancel()
            return PlanAndCallOutput(plan=out, call_id=call.call.id, lost=True)
        except Exception as e:
            failure = {**error_details(e, attempt=1), "activity": TOOL_CALL}
            return PlanAndCallOutput(plan=out, call_id=call.call.id, failure=failure)
        tool = msgspec.structs.replace(tool, finished_at=max(_now(), out.finished_at or _now()))
        fused = PlanAndCallOutput(plan=out, call_id=call.call.id, tool=tool)
        if check(fused):  # recorded, but too large to carry next to the plan
            return PlanAndCallOutput(plan=out, call_id=call.call.id)
        then = _turn_after(call, tool, arg)
        if then is None or activity.is_cancelled():  # a cancel: the loop stops before it
            return fused
        after = await _plan_after(plan_turn, then, tool, check, arg.trace)
        whole = msgspec.structs.replace(fused, after=after)
        if after.plan is not None and check(whole):  # recorded, too large to carry with the rest
            return msgspec.structs.replace(fused, after=TurnAfter(trace=after.trace))
        return whole

    return plan_and_call


def _turn_after(
    call: ToolCallInput, tool: ToolCallOutput, arg: PlanAndCall
) -> PlanTurnInput | None:
    """The planner turn the loop runs right after ``call``, if the run's workflow asked for it."""
    return turn_after_call(call, tool, arg.plan.prompt) if arg.turn_after else None


async def _plan_after(
    plan_turn: Activity,
    then: PlanTurnInput,
    tool: ToolCallOutput,
    check: Callable[[Any], str],
    run_trace: dict[str, str],
) -> TurnAfter:
    """Run planner turn ``then`` as its first attempt, in its span under the run's
    (``run_trace``): its result with the span's carrier, or what hands it back (the span
    then stands for this attempt only, marked failed or interrupted)."""
    span = TurnSpan(then, run_trace)
    trace = span.carrier
    try:
        with attempt_of(1, check), span.within():
            out: PlanTurnOutput = await plan_turn(then)
    except asyncio.CancelledError as e:  # it may have recorded its plan: its retry reads it
        span.failed(e)
        span.end()
        _uncancel()
        return TurnAfter(lost=True)
    except Exception as e:
        span.failed(e)  # the turn's failure for good, or this attempt's (a retry has its own)
        span.end()
        failure = {**error_details(e, attempt=1), "activity": PLAN_TURN}
        return TurnAfter(failure=failure, trace=trace)
    span.planned(out)
    span.end()
    at = max(_now(), tool.finished_at or _now())
    return TurnAfter(plan=msgspec.structs.replace(out, finished_at=at), trace=trace)


def call_and_plan_activity(
    plan_turn: Activity, tool_call: Activity, store: Store, check: Callable[[Any], str]
) -> Callable[[CallAndPlan], Awaitable[CallAndPlanOutput]]:
    """The :data:`~agentledger.engine.temporal.options.CALL_AND_PLAN` activity over the
    runtime's tool call and planner turn (``check``: why a result cannot be carried).

    The call runs as the activity's own attempts would run it in a tool call's
    activity (a retry reads its recorded result); an attempt that finds the
    call's result recorded by an earlier one (lost after it) hands the turn
    after it back, its one lost attempt counted.
    """

    async def call_and_plan(arg: CallAndPlan) -> CallAndPlanOutput:
        call = arg.call
        done = activity_attempt() > 1 and await call_settled(store, call)
        tool: ToolCallOutput = await tool_call(call)
        tool = msgspec.structs.replace(tool, finished_at=_now())
        out = CallAndPlanOutput(tool=tool)
        then = turn_after_call(call, tool, arg.prompt)
        if then is None or activity.is_cancelled():  # a cancel: the loop stops before it
            return out
        if done:
            return msgspec.structs.replace(out, after=TurnAfter(lost=True))
        after = await _plan_after(plan_turn, then, tool, check, arg.trace)
        whole = msgspec.structs.replace(out, after=after)
        if after.plan is not None and check(whole):  # recorded, too large to carry with it
            return msgspec.structs.replace(out, after=TurnAfter(trace=after.trace))
        return whole

    return call_and_plan


def began_run_activity(
    begin_run: Activity,
) -> Callable[[BeginRunInput], Awaitable[BeganRun]]:
    """The runtime's ``begin_run``, saying that this worker's planner turns run their lone
    tool call (recorded with the run's start: the run keeps that shape on every replay)."""

    async def begin_run_here(arg: BeginRunInput) -> BeganRun:
        out: BeginRunOutput = await begin_run(arg)
        fields = msgspec.structs.asdict(out)
        return BeganRun(**fields, lone_calls_in_turn=True, turns_after_calls=True)

    return begin_run_here


def call_after_plan_activity(
    tool_call: Activity,
) -> Callable[[CallAfterPlan], Awaitable[ToolCallOutput]]:
    """The :data:`~agentledger.engine.temporal.options.CALL_AFTER_PLAN` activity: the
    runtime's tool call, its attempts counted on from the one its planner turn made."""

    async def call_after_plan(arg: CallAfterPlan) -> ToolCallOutput:
        out: ToolCallOutput = await tool_call(arg.call)
        return out

    return call_after_plan


def plan_after_call_activity(
    plan_turn: Activity,
) -> Callable[[PlanAfterCall], Awaitable[PlanTurnOutput]]:
    """The :data:`~agentledger.engine.temporal.options.PLAN_AFTER_CALL` activity: the
    runtime's planner turn, its attempts counted on from the one its call's activity made."""

    async def plan_after_call(arg: PlanAfterCall) -> PlanTurnOutput:
        out: PlanTurnOutput = await plan_turn(arg.plan)
        return out

    return plan_after_call
