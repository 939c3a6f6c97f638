"""The run's Temporal workflow: the runtime's run loop over a Temporal ``WorkflowContext``.

Deterministic code only, because Temporal replays it: no I/O, no wall clock
(time is ``workflow.now()``), no randomness, no threads. The sandbox
re-imports this module for every workflow run; everything it uses from
outside comes through ``workflow.unsafe.imports_passed_through()`` and is
itself pure (models, the engine boundary, the run loop).

How the engine boundary maps onto Temporal:

* ``ctx.activity`` schedules a Temporal activity with the run's
  :class:`~agentledger.engine.temporal.options.EngineOptions` (timeouts,
  retry policy mirrored from :class:`~agentledger.engine.RetryPolicy`).
  A final failure becomes :class:`~agentledger.engine.ActivityFailedError`,
  carrying the rebuilt :mod:`agentledger.errors` error. A planner turn or
  tool call whose input carries ``max_turn_attempts`` N gets N more attempts
  than the policy's ``maximum_attempts``: the attempts its worker lost (it
  died, timed out) are counted apart by the worker (see
  :class:`~agentledger.engine.temporal.worker._Starts`), which fails the N+1st
  start with :data:`~agentledger.engine.CRASH_LOOP` before it runs. Activities that
  only talk to the store (:data:`~agentledger.runtime.wire.STORE_ONLY`) run
  as local activities, on the worker that runs the workflow task: no task
  queue round trip, one marker event in the history.
* A planner turn whose plan is one plain tool call runs the call in its own
  activity (:data:`~agentledger.engine.temporal.options.PLAN_AND_CALL`, see
  :mod:`~agentledger.engine.temporal.fused`): the loop's tool call then takes
  the carried result without scheduling anything, or, for a call the turn
  could not finish, runs it as
  :data:`~agentledger.engine.temporal.options.CALL_AFTER_PLAN`. After the
  call the same activity runs the planner turn the loop runs next
  (:func:`~agentledger.runtime.planner_input.turn_after_call`), and a later
  turn's lone call runs with the turn after it
  (:data:`~agentledger.engine.temporal.options.CALL_AND_PLAN`): the loop's
  next planner turn, which must be exactly that one, takes the carried plan,
  or runs a turn handed back as
  :data:`~agentledger.engine.temporal.options.PLAN_AFTER_CALL`. The worker
  that began the run says which it does, in ``begin_run``'s recorded result
  (:class:`~agentledger.engine.temporal.options.BeganRun`): runs begun by an
  earlier worker keep their steps apart on every replay.
* An interruptible activity that finished its work while its cancellation
  was on the way returns its result (its records are in the log).
* Cancellation: the run loop runs in its own task, shielded from Temporal's
  cancellation. A cancel request (``RunHandle.cancel`` after [C1] was
  recorded, or one sent straight to Temporal, [C3]) only sets a flag:
  ``ctx.cancel_requested()`` turns true, a store write in flight still runs
  to its end, and an interruptible activity or child workflow in flight is
  canceled (its worker learns it from the next heartbeat) and raises
  :class:`~agentledger.engine.base.WorkflowCanceled`. The loop then writes the
  canceled ending itself, so the workflow completes normally with a canceled
  :class:`~agentledger.runtime.wire.RunOutput`.
* ``ctx.child`` starts a child workflow (workflow id = the child's run id)
  with parent close policy TERMINATE: if the parent closes first, Temporal
  ends the child and ``ensure_run_completion`` gives it its [C3] ending [E2].
* ``ctx.now()`` comes from the run's history only, truncated to
  milliseconds: the workflow's start time, then, each time the loop gets
  work back from outside the workflow task, when that work finished (the
  worker that ran an activity stamps its result, or its failure; a child
  run's output says when it ended). So record timestamps are the same on
  every replay [X1], and also in every retry of a workflow task that a bug
  in the run loop failed: the local activities it ran before the bug (the
  run's start, records, its ending) run again with the very same inputs, an
  exact retry the store answers with the original ids. ``workflow.now()``
  cannot serve: it is each retry's own time, and Temporal keeps a local
  activity's result only when its workflow task completes. A result from an
  older worker that does not stamp falls back to ``workflow.now()``.
* A payload over ``max_payload_bytes`` is never sent: the activity fails
  for good (:data:`~agentledger.engine.temporal.options.PAYLOAD_TOO_LARGE`)
  and the loop ends the run as failed, instead of Temporal failing the
  workflow task over and over.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy as TemporalRetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    FailureError,
)

with workflow.unsafe.imports_passed_through():
    from agentledger.engine.base import ActivityFailedError, ChildFailedError, WorkflowCanceled
    from agentledger.engine.temporal.failures import (
        ACTIVITY_FAILED,
        FINISHED_AT,
        error_details,
        rebuild_error,
    )
    from agentledger.engine.temporal.options import (
        CALL_AFTER_PLAN,
        CALL_AND_PLAN,
        PAYLOAD_TOO_LARGE,
        PLAN_AFTER_CALL,
        PLAN_AND_CALL,
        START_DUE,
        BeganRun,
        CallAfterPlan,
        CallAndPlan,
        CallAndPlanOutput,
        EngineOptions,
        PlanAfterCall,
        PlanAndCall,
        PlanAndCallOutput,
        StartDue,
        StartedTurns,
        TurnAfter,
    )
    from agentledger.errors import AgentledgerError, ContractError, RunLoopError
    from agentledger.runtime.planner_input import turn_after_call
    from agentledger.runtime.wire import (
        BEGIN_RUN,
        PLAN_TURN,
        STORE_ONLY,
        TOOL_CALL,
        AgentPlan,
        CompleteRunOutput,
        PlanTurnInput,
        PlanTurnOutput,
        RunInput,
        RunOutput,
        ToolCallInput,
        ToolCallOutput,
    )
    from agentledger.runtime.workflow import run_workflow

__all__ = [
    "RETIRED_WORKFLOW_NAMES",
    "WORKFLOW_NAME",
    "AgentRunWorkflow",
    "RetiredRunWorkflow",
    "TemporalContext",
    "activity_failed",
    "activity_failed_details",
    "drive",
]

T = TypeVar("T")

WORKFLOW_NAME = "agentledger.run.v2"
"""The Temporal workflow type of a run (roots, children and continuations alike).

The version names the shape of the run's history (which activities, in
which order): a change that old histories cannot replay gets a new name.
"""

RETIRED_WORKFLOW_NAMES = ("agentledger.run",)
"""Earlier workflow types: this code refuses their runs (see :class:`RetiredRunWorkflow`)."""

RETIRED = "RetiredWorkflowType"
"""The error type of a workflow task refused by :class:`RetiredRunWorkflow`."""


def activity_failed_details(error: ActivityFailedError) -> dict[str, Any]:
    """What a workflow that ended on ``error`` carries in its failure."""
    details: dict[str, Any] = {
        "activity": error.activity,
        "error_type": error.error_type,
        "message": error.reason,
        "retryable": error.retryable,
        "attempts": error.attempts,
        "state": {},
    }
    if isinstance(error.error, AgentledgerError):
        details["state"] = error_details(error.error, attempt=error.attempts)["state"]
    return details


def activity_failed(details: Any, *, activity: str = "") -> ActivityFailedError:
    """An :class:`ActivityFailedError` from failure details (an activity's or a workflow's)."""
    d: dict[str, Any] = details if isinstance(details, dict) else {}
    return ActivityFailedError(
        activity=str(d.get("activity", activity)),
        error_type=str(d.get("error_type", "")),
        reason=str(d.get("message", "")),
        retryable=bool(d.get("retryable", False)),
        attempts=int(d.get("attempts", 0)),
        error=rebuild_error(d),
    )


def _from_activity_error(name: str, error: FailureError) -> ActivityFailedError:
    # A local activity's failure comes unwrapped (no ActivityError around it).
    cause = error.cause if isinstance(error, ActivityError) else error
    if isinstance(cause, ApplicationError):
        if cause.details and isinstance(cause.details[0], dict):
            return activity_failed(cause.details[0], activity=name)
        return ActivityFailedError(
            activity=name,
            error_type=cause.type or "ApplicationError",
            reason=cause.message,
            retryable=not cause.non_retryable,
            attempts=0,
        )
    # A timeout (the attempts ran out on lost workers) or another Temporal failure.
    message = str(cause) if cause is not None else str(error)
    return ActivityFailedError(
        activity=name,
        error_type=type(cause).__name__ if cause is not None else type(error).__name__,
        reason=message,
        retryable=True,
        attempts=0,
    )


def _payload_size(value: Any) -> int:
    return sum(p.ByteSize() for p in workflow.payload_converter().to_payloads([value]))


class TemporalContext:
    """The :class:`~agentledger.engine.WorkflowContext` of one run's Temporal workflow."""

    def __init__(self, options: EngineOptions) -> None:
        self.options = options
        self._canceled = asyncio.Event()
        self._last = datetime.min.replace(tzinfo=workflow.now().tzinfo)
        self._clock = workflow.info().workflow_start_time  # advanced by _finished
        self.agent: AgentPlan | None = None  # the run's agent, once begin_run said it
        self._fused = False  # whether planner turns run their lone call too (BeganRun)
        self._then = False  # ... and the planner turn after it (BeganRun)
        self._handed: PlanAndCallOutput | None = None  # a turn's call, for the loop's next
        self._prompt: Any = None  # the prompt of the turn whose call is handed
        # the planner turn the loop runs next, as the call's activity ran it: its input
        self._after: tuple[PlanTurnInput, TurnAfter] | None = None
        self._trace: dict[str, str] = {}  # the run span's carrier (see trace_turns_under)
        self.waiting: bool | None = None
        """Whether a message of the session waited once the run's ending was written
        (the worker's ``complete_run`` says; None: unknown)."""

    @property
    def workflow_id(self) -> str:
        return workflow.info().workflow_id

    @property
    def waits_for_fixes(self) -> bool:
        return True  # a failed workflow task is retried: the run waits for a fixed worker

    def now(self) -> datetime:
        # From the history only (see the module docstring): the same in every retry of a
        # workflow task, so the task's local activities are exact retries.
        now = self._clock
        now = now.replace(microsecond=now.microsecond - now.microsecond % 1000)
        self._last = max(self._last, now)
        return self._last

    def _finished(self, at: datetime | None) -> None:
        """Advance the clock to ``at``, when work outside the task finished (None: a
        result from a worker that does not stamp, so this task's own time)."""
        self._clock = max(self._clock, workflow.now() if at is None else at)

    def cancel_requested(self) -> bool:
        # Not while a finished tool call is on its way to the loop: the loop records its
        # result first (as if the cancel came just after it), never an interrupted one.
        return self._canceled.is_set() and not self._holding()

    def request_cancel(self) -> None:
        """Temporal asked this workflow to cancel (called by :func:`drive`)."""
        self._canceled.set()

    def _retry_policy(self, lost: int = 0, spent: int = 0) -> TemporalRetryPolicy:
        """The options' retry policy, with ``lost`` more attempts for lost ones (see above)
        and ``spent`` fewer, used before the activity."""
        retry = self.options.retry
        return TemporalRetryPolicy(
            initial_interval=timedelta(seconds=retry.initial_interval),
            backoff_coefficient=retry.backoff_coefficient,
            maximum_interval=timedelta(seconds=retry.maximum_interval),
            maximum_attempts=retry.maximum_attempts - spent + lost,
        )

    async def activity(
        self, name: str, arg: Any, result_type: type[T], *, interruptible: bool = False
    ) -> T:
        handed, self._handed = self._handed, None
        after, self._after = self._after, None
        if after is not None:
            turn = await self._turn_after(after, name, arg, interruptible=interruptible)
            if turn is not None:
                return turn  # type: ignore[return-value]
        if (
            handed is not None
            and name == TOOL_CALL
            and isinstance(arg, ToolCallInput)
            and arg.call.id == handed.call_id
        ):
            out = await self._handed_call(handed, arg, interruptible=interruptible)
            return out  # type: ignore[return-value]
        if name == PLAN_TURN:
            self._prompt = arg.prompt  # what the turn after a lone call carries
        elif name == TOOL_CALL and self._then and isinstance(arg, ToolCallInput) and arg.then_turn:
            called = await self._call_and_plan(arg, interruptible=interruptible)
            return called  # type: ignore[return-value]
        if name == PLAN_TURN and self._fuses():
            assert self.agent is not None
            fused = PlanAndCall(
                plan=arg,
                agent=self.agent,
                not_before=self.now(),
                turn_after=self._then,
                trace=self._trace,
            )
            both = await self._schedule(
                PLAN_AND_CALL,
                fused,
                PlanAndCallOutput,
                interruptible=interruptible,
                reported=PLAN_TURN,
                seconds=(3 if self._then else 2) * self.options.activity_timeout,
            )
            self._finished(both.plan.finished_at)
            if both.call_id:
                self._handed, self._prompt = both, arg.prompt
            plan: T = both.plan  # type: ignore[assignment]
            return plan
        if name == BEGIN_RUN:  # what a worker of this version says (see BeganRun)
            began = await self._schedule(name, arg, BeganRun, interruptible=interruptible)
            self.agent, self._fused = began.agent, began.lone_calls_in_turn
            self._then = began.lone_calls_in_turn and began.turns_after_calls
            return began  # type: ignore[return-value]
        return await self._schedule(name, arg, result_type, interruptible=interruptible)

    def trace_turns_under(self, carrier: dict[str, str]) -> None:
        """The run span's context (a W3C carrier): the planner turns the fused activities
        run after a call open their spans under it (see
        :class:`~agentledger.runtime.tracing.CarriesTurns`)."""
        self._trace = carrier

    def carried_turn(self, arg: PlanTurnInput) -> dict[str, str] | None:
        """The carrier of the span the activity that ran planner turn ``arg`` after a call
        opened for it, if this context answers ``arg`` with that activity's plan or its
        failure for good (a turn handed back to be retried is traced as the loop's own)."""
        after = self._after
        if after is None or not after[1].trace or after[0] != arg:
            return None
        turn = after[1]
        if _carries(turn) or (turn.failure is not None and not self._retries(turn.failure)):
            return turn.trace
        return None

    def _retries(self, failure: dict[str, Any]) -> bool:
        """Whether an activity's attempt that failed with ``failure`` is retried."""
        return bool(failure.get("retryable")) and self.options.retry.maximum_attempts > 1

    def _fuses(self) -> bool:
        """Whether this run's planner turns run their lone tool call too (see :mod:`.fused`):
        as the worker that began the run said, so a history recorded before keeps its shape."""
        return self._fused and self.agent is not None

    def _holding(self) -> bool:
        """Whether a tool call's result, or the planner turn's after it, is recorded but not
        yet given to the loop."""
        handed = self._handed
        if handed is not None and (
            handed.tool is not None or (not handed.lost and handed.failure is None)
        ):
            return True
        return self._after is not None and _carries(self._after[1])

    async def _turn_after(
        self, after: tuple[PlanTurnInput, TurnAfter], name: str, arg: Any, *, interruptible: bool
    ) -> PlanTurnOutput | None:
        """The loop's planner turn that its call's activity ran (or started) right after the
        call; None when the loop asks for other work (a cancel came: the turn was
        interrupted or never carried back).

        Raises:
            RuntimeError: the loop asked for anything else while that turn's plan is
                recorded (a bug: the activity ran the turn the loop runs after the call,
                built by the same function).
        """
        expected, turn = after
        if name != PLAN_TURN or arg != expected:
            if not _carries(turn):
                return None
            raise RuntimeError(
                f"the run loop asked for {name} where the planner turn {expected.turn} that "
                "its last tool call's activity ran was due"
            )
        if turn.plan is not None:
            self._finished(turn.plan.finished_at)
            return turn.plan
        spent = 0
        if turn.failure is not None:
            if not self._retries(turn.failure):
                raise activity_failed(turn.failure, activity=PLAN_TURN)
            spent = 1  # a TransientError: one of the turn's attempts is used
        elif not turn.lost:  # recorded, too large to carry with the call: read it back
            interruptible = False
        return await self._schedule(
            PLAN_AFTER_CALL,
            PlanAfterCall(plan=expected, lost=turn.lost),
            PlanTurnOutput,
            interruptible=interruptible,
            reported=PLAN_TURN,
            spent=spent,
        )

    async def _call_and_plan(self, arg: ToolCallInput, *, interruptible: bool) -> ToolCallOutput:
        """A lone call of a planner turn's step, and the planner turn the loop runs after it,
        in one activity (:data:`CALL_AND_PLAN`)."""
        both = await self._schedule(
            CALL_AND_PLAN,
            CallAndPlan(call=arg, prompt=self._prompt, trace=self._trace),
            CallAndPlanOutput,
            interruptible=interruptible,
            reported=TOOL_CALL,
            seconds=2 * self.options.activity_timeout,
        )
        self._finished(both.tool.finished_at)
        self._expect_after(arg, both.tool, both.after)
        return both.tool

    def _expect_after(
        self, call: ToolCallInput, tool: ToolCallOutput, after: TurnAfter | None
    ) -> None:
        """The planner turn that ``call``'s activity ran after it is the loop's next."""
        if after is None:
            return
        then = turn_after_call(call, tool, self._prompt)
        if then is None:
            raise RuntimeError(
                f"tool call {call.call.id}'s activity ran a planner turn after it that the "
                "run loop does not run next"
            )
        self._after = (then, after)

    async def _handed_call(
        self, handed: PlanAndCallOutput, arg: ToolCallInput, *, interruptible: bool
    ) -> ToolCallOutput:
        """The loop's tool call that its planner turn's activity ran (or started)."""
        if handed.tool is not None:
            self._finished(handed.tool.finished_at)
            self._expect_after(arg, handed.tool, handed.after)
            return handed.tool
        failure = handed.failure
        spent = 0
        if failure is not None:
            if not failure.get("retryable") or self.options.retry.maximum_attempts <= 1:
                raise activity_failed(failure, activity=TOOL_CALL)
            spent = 1  # a TransientError: one of the call's attempts is used
        elif not handed.lost:  # recorded, too large to carry with the plan: read it back
            interruptible = False
        return await self._schedule(
            CALL_AFTER_PLAN,
            CallAfterPlan(call=arg, lost=handed.lost),
            ToolCallOutput,
            interruptible=interruptible,
            reported=TOOL_CALL,
            spent=spent,
        )

    async def _schedule(
        self,
        name: str,
        arg: Any,
        result_type: type[T],
        *,
        interruptible: bool = False,
        reported: str = "",
        seconds: float = 0.0,
        spent: int = 0,
    ) -> T:
        """Run activity ``name`` (its failures named ``reported``; ``spent`` attempts of its
        retry policy used up before it; ``seconds``: its start-to-close timeout, if not the
        options' activity timeout)."""
        reported = reported or name
        if interruptible and self.cancel_requested():
            raise WorkflowCanceled()
        size = _payload_size(arg)
        if size > self.options.max_payload_bytes:
            raise ActivityFailedError(
                activity=reported,
                error_type=PAYLOAD_TOO_LARGE,
                reason=f"the input of {reported} is {size} bytes encoded, over the "
                f"{self.options.max_payload_bytes}-byte payload limit",
                retryable=False,
                attempts=0,
            )
        handle: asyncio.Future[T]
        local = name in STORE_ONLY and not interruptible
        if local:
            handle = workflow.start_local_activity(
                name,
                arg,
                result_type=result_type,
                start_to_close_timeout=timedelta(seconds=self.options.activity_timeout),
                retry_policy=self._retry_policy(),
            )
        else:
            handle = workflow.start_activity(
                name,
                arg,
                result_type=result_type,
                start_to_close_timeout=timedelta(seconds=seconds or self.options.activity_timeout),
                heartbeat_timeout=timedelta(seconds=self.options.heartbeat_timeout),
                retry_policy=self._retry_policy(
                    max(0, getattr(arg, "max_turn_attempts", 0)), spent
                ),
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        if interruptible:
            await self._until_done_or_canceled(handle)
            if not handle.done():
                handle.cancel()
                await _settle(handle)
                if handle.cancelled() or handle.exception() is not None:
                    raise WorkflowCanceled()
        try:
            result: T = await handle
        except FailureError as e:
            if not local:
                stamp = _failure_stamp(e)
                if stamp is not None:  # a timeout carries none: the clock stays
                    self._finished(stamp)
            raise _from_activity_error(reported, e) from None
        if not local and hasattr(result, "finished_at"):
            self._finished(result.finished_at)
        if isinstance(result, CompleteRunOutput):
            self.waiting = result.waiting
        return result

    async def child(self, workflow_id: str, arg: Any, result_type: type[T]) -> T:
        if self.cancel_requested():
            raise WorkflowCanceled()
        handle = await workflow.start_child_workflow(
            WORKFLOW_NAME,
            args=[arg, self.options],
            id=workflow_id,
            task_queue=workflow.info().task_queue,
            result_type=result_type,
            cancellation_type=workflow.ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
            parent_close_policy=workflow.ParentClosePolicy.TERMINATE,
        )
        await self._until_done_or_canceled(handle)
        if not handle.done():
            # The child closes on its own (writing its own ending), then we stop.
            handle.cancel()
            await _settle(handle)
            raise WorkflowCanceled()
        try:
            result: T = await handle
        except ChildWorkflowError as e:
            cause = e.cause
            message = cause.message if isinstance(cause, ApplicationError) else str(cause or e)
            inner: BaseException | None = None
            if isinstance(cause, ApplicationError) and cause.type == ACTIVITY_FAILED:
                inner = activity_failed(cause.details[0] if cause.details else {})
            raise ChildFailedError(workflow_id=workflow_id, reason=message, error=inner) from None
        self._finished(getattr(result, "finished_at", None))
        return result

    async def _until_done_or_canceled(self, job: asyncio.Future[Any]) -> None:
        canceled = asyncio.ensure_future(self._canceled.wait())
        try:
            await workflow.wait([job, canceled], return_when=asyncio.FIRST_COMPLETED)
        finally:
            canceled.cancel()


def _carries(turn: TurnAfter) -> bool:
    """Whether the planner turn a call's activity ran after the call has its plan recorded."""
    return turn.plan is not None or (not turn.lost and turn.failure is None)


def _failure_stamp(error: FailureError) -> datetime | None:
    """When a failed activity's last attempt ended, as its worker stamped the failure."""
    cause = error.cause if isinstance(error, ActivityError) else error
    if isinstance(cause, ApplicationError) and cause.details:
        details = cause.details[0]
        stamp = details.get(FINISHED_AT) if isinstance(details, dict) else None
        if isinstance(stamp, str):
            with contextlib.suppress(ValueError):
                return datetime.fromisoformat(stamp)
    return None


async def _settle(job: asyncio.Future[Any]) -> None:
    """Wait for a canceled activity or child to close, whatever it ended with."""
    with contextlib.suppress(asyncio.CancelledError, ActivityError, ChildWorkflowError):
        await job


async def drive(ctx: TemporalContext, loop: Coroutine[Any, Any, T]) -> T:
    """Run ``loop`` in its own task, turning Temporal's cancellation into ``ctx``'s flag.

    A run that cannot start, or whose final record cannot be written, fails the
    workflow: a failed activity as an ``ApplicationError`` of type
    :data:`~agentledger.engine.temporal.failures.ACTIVITY_FAILED`. A bug in the
    loop (:class:`~agentledger.errors.RunLoopError`) fails only the workflow
    task: Temporal retries it, and the run continues once fixed code is deployed.
    """
    task = asyncio.ensure_future(loop)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done() or workflow.cancellation_reason() is None:
                raise  # not a cancel request (e.g. the worker evicting this workflow)
            ctx.request_cancel()
        except ActivityFailedError as e:
            raise ApplicationError(
                str(e), activity_failed_details(e), type=ACTIVITY_FAILED, non_retryable=True
            ) from None
        except (WorkflowCanceled, ChildFailedError, RunLoopError):
            raise  # a bug (these escape the loop only by one): the task fails, the run waits
        except AgentledgerError as e:
            raise ApplicationError(
                str(e), error_details(e, attempt=0), type=type(e).__name__, non_retryable=True
            ) from None


@workflow.defn(name=WORKFLOW_NAME)
class AgentRunWorkflow:
    """One run: its start, planner turns, tool calls, child runs and its ending."""

    @workflow.run
    async def run(self, inp: RunInput, options: EngineOptions) -> RunOutput:
        """Run the runtime's run loop for ``inp`` and return how the run ended."""
        ctx = TemporalContext(options)
        try:
            output = await drive(ctx, run_workflow(ctx, inp))
        except ApplicationError:
            await _start_due(inp, options)  # the run failed for good: what waits may start
            raise
        if ctx.waiting is not False:  # False: nothing waits (see queue.py)
            await _start_due(inp, options)
        return output


_START_DUE_PATCH = "agentledger.start_due"
"""The patch marker of the :data:`START_DUE` step (histories recorded before it replay)."""


async def _start_due(inp: RunInput, options: EngineOptions) -> None:
    """A root run of a session has ended: start the session's due turn, if any (see
    :mod:`agentledger.engine.temporal.queue`). A start that fails for good leaves the
    message waiting in the store for repair: the run's own ending stands."""
    if not inp.session_id or inp.parent_run_id or not workflow.patched(_START_DUE_PATCH):
        return
    queue = workflow.info().task_queue
    arg = StartDue(session_id=inp.session_id, task_queue=queue, options=options)
    retry = options.retry
    with contextlib.suppress(FailureError):
        await workflow.execute_local_activity(
            START_DUE,
            arg,
            result_type=StartedTurns,
            start_to_close_timeout=timedelta(seconds=options.activity_timeout),
            retry_policy=TemporalRetryPolicy(
                initial_interval=timedelta(seconds=retry.initial_interval),
                backoff_coefficient=retry.backoff_coefficient,
                maximum_interval=timedelta(seconds=retry.maximum_interval),
                maximum_attempts=retry.maximum_attempts,
            ),
        )


class RetiredWorkflowTypeError(ContractError):
    """A run of a retired workflow type reached this worker (its workflow task fails).

    Attributes:
        run_id: the run (its workflow id).
        workflow_type: the retired type it was started as.
    """

    def __init__(self, *, run_id: str, workflow_type: str) -> None:
        super().__init__(
            f"{RETIRED}: run {run_id} was started as workflow type {workflow_type!r}, whose "
            f"history this agentledger cannot replay (it runs {WORKFLOW_NAME!r}); finish it "
            "with a worker of the earlier agentledger version, or close it with "
            "ensure_run_completion"
        )
        self.run_id = run_id
        self.workflow_type = workflow_type


@workflow.defn(name=RETIRED_WORKFLOW_NAMES[0])
class RetiredRunWorkflow:
    """Runs started by agentledger before the v2 shape: refused, clearly, and kept waiting.

    Its workflow task fails (it is not the workflow that fails), so Temporal
    keeps the run and retries the task: a worker of the earlier version can
    still finish it, and ``ensure_run_completion`` can close it [E2].
    """

    @workflow.run
    async def run(self, inp: RunInput, options: EngineOptions) -> RunOutput:
        """Refuse the run."""
        raise RetiredWorkflowTypeError(
            run_id=workflow.info().workflow_id, workflow_type=workflow.info().workflow_type
        )
