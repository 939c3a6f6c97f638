"""The worker: a runtime's activities and the run workflow, polling one task queue.

:func:`create_worker` takes a configured :class:`~agentledger.runtime.Runtime`
(its store, agents, toolsets, models, stream) and returns a Temporal
``Worker`` that runs :class:`~agentledger.engine.temporal.workflows.AgentRunWorkflow`
and every activity of the runtime. Each activity is wrapped so that:

* a :class:`~agentledger.errors.TransientError` is raised as a retryable
  ``ApplicationError`` (Temporal retries it with the run's retry policy) and
  every other error as a non-retryable one (a
  :class:`~agentledger.errors.ContractError` is permanent), carrying the
  error's fields so the workflow gets the same error back;
* it heartbeats while it runs, so a worker that dies is noticed within the
  heartbeat timeout and the attempt is retried on another worker, and a
  cancellation (an interrupted planner turn or tool call) reaches it;
* a planner turn or tool call (an input with ``max_turn_attempts`` N > 0)
  that was started N times without finishing is not run again: it fails for
  good with :data:`~agentledger.engine.CRASH_LOOP` (see :class:`_Starts`);
* a result too large to send fails it for good instead of wedging the
  workflow (:data:`~agentledger.engine.temporal.options.PAYLOAD_TOO_LARGE`);
* outside local activities, its result (when it has a ``finished_at``) or its
  failure says when it finished: what the run's clock advances to, so a
  retried workflow task repeats its writes exactly (see :mod:`.workflows`).
"""

from __future__ import annotations

import asyncio
import contextlib
import typing
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import msgspec
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from agentledger import __version__
from agentledger.engine.base import CRASH_LOOP, Activity, attempt_of
from agentledger.engine.temporal.client import check_client
from agentledger.engine.temporal.converter import data_converter
from agentledger.engine.temporal.failures import FINISHED_AT, error_details
from agentledger.engine.temporal.fused import (
    began_run_activity,
    call_after_plan_activity,
    call_and_plan_activity,
    call_settled,
    plan_after_call_activity,
    plan_and_call_activity,
    plan_recorded,
)
from agentledger.engine.temporal.options import (
    CALL_AFTER_PLAN,
    CALL_AND_PLAN,
    DEFAULT_MAX_PAYLOAD_BYTES,
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
from agentledger.engine.temporal.queue import complete_and_look, start_due_activity
from agentledger.engine.temporal.workflows import AgentRunWorkflow, RetiredRunWorkflow
from agentledger.errors import TransientError, ValidationError
from agentledger.runtime import wire
from agentledger.runtime.planner import ToolOutcome

if TYPE_CHECKING:
    from agentledger.runtime.runtime import Runtime

__all__ = [
    "activity_definitions",
    "create_replayer",
    "create_worker",
    "warm_types",
    "workflow_runner",
]

_WORKFLOWS = [AgentRunWorkflow, RetiredRunWorkflow]

_MAX_HEARTBEAT_INTERVAL = 1.0
"""Seconds between heartbeats at most: how long a cancellation may take to reach an activity."""


async def _heartbeat(interval: float, *details: Any) -> None:
    # The first beat waits one interval: most activities (store writes) end
    # before it, and need no heartbeat call at all. Every beat carries the
    # same details (a beat replaces the details the server keeps).
    while True:
        await asyncio.sleep(interval)
        activity.heartbeat(*details)


class _Starts(msgspec.Struct, frozen=True, kw_only=True):
    """How often an activity was started without finishing: the heartbeat details it carries.

    Temporal tells an attempt only its number (``activity.info().attempt``)
    and the details of the last heartbeat any earlier attempt sent
    (``activity.info().heartbeat_details``); it does not say why earlier
    attempts ended, and an attempt that ended with a TransientError counts
    the same as one whose worker died. So each attempt ``k`` of a counted
    activity says it itself, in its heartbeat details:

    * when it starts, before any work, it heartbeats ``{attempt: k, lost: L,
      transient: T, ended: false}``: L attempts before it were lost, T ended
      with a TransientError. The first attempt, given no details, does not:
      no details say the same of it (``{attempt: 1, lost: 0, transient: 0}``,
      lost unless it says it ended), so a run's planner turns and tool calls
      send the server no heartbeat unless retried or longer than an interval;
    * when it ends with a TransientError, it heartbeats the same with
      ``ended: true`` before it fails. The SDK sends an activity's last
      heartbeat before its failure (it waits for the pending heartbeat, past
      the throttle), and the server keeps heartbeat details across retries of
      any kind, so the next attempt reads it.

    Attempt ``k`` then knows exactly how many attempts before it were lost:
    from the last details it got, ``{attempt: j, lost: L, ended: e}``, attempt
    ``j`` was lost unless ``e``, and so was every attempt between ``j`` and
    ``k`` (none of them got a single heartbeat through, so none of them ended
    with a TransientError); with no details at all, all ``k - 1`` were.
    An attempt whose worker dies, runs out of memory or times out (heartbeat
    or start-to-close) never marks itself ended: it is lost. One that finds N
    attempts lost fails at once with :data:`CRASH_LOOP`, before running.

    The retry policy of a counted activity allows ``maximum_attempts + N``
    attempts in all (see the workflow): the attempts that end with a
    TransientError still get ``maximum_attempts`` (this wrapper ends them
    after that many), and N lost ones come on top, so the crash loop is
    always seen before Temporal's own attempts run out.
    """

    attempt: int
    lost: int = 0
    transient: int = 0
    ended: bool = False

    @classmethod
    def at_start(cls, attempt: int, details: Any) -> _Starts:
        """Attempt ``attempt``'s count, from the heartbeat details it was given."""
        last: _Starts | None = None
        if details:
            with contextlib.suppress(msgspec.ValidationError, TypeError):
                last = msgspec.convert(details[0], _Starts)
        if last is None or last.attempt >= attempt:  # no details (or not ours): all lost
            return cls(attempt=attempt, lost=attempt - 1)
        gap = attempt - 1 - last.attempt  # attempts that never got a heartbeat through
        lost = last.lost + gap + (0 if last.ended else 1)
        return cls(attempt=attempt, lost=lost, transient=last.transient)

    def details(self) -> dict[str, Any]:
        """As heartbeat details (plain JSON)."""
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]


def _now() -> datetime:
    """This worker's time, to the millisecond (what record timestamps keep)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


def _size_check(name: str, max_payload_bytes: int) -> Callable[[Any], str]:
    """Why a result of activity ``name`` cannot be sent back ("" if it can)."""

    def oversized(value: Any) -> str:
        size = sum(p.ByteSize() for p in activity.payload_converter().to_payloads([value]))
        if size <= max_payload_bytes:
            return ""
        return (
            f"the result of {name} is {size} bytes encoded, over the "
            f"{max_payload_bytes}-byte payload limit"
        )

    return oversized


def _wrap(
    name: str,
    fn: Activity,
    max_payload_bytes: int,
    *,
    reported: str = "",
    spared: Callable[[Any], Awaitable[bool]] | None = None,
) -> Callable[..., Awaitable[Any]]:
    """``fn`` as a Temporal activity named ``name``, typed by ``fn``'s own hints.

    ``reported``: the activity name its failures carry (default ``name``);
    ``spared(arg)``: whether an attempt that finds the crash-loop limit reached
    may run all the same (its lost attempts were another step's). An input's
    ``lost_before`` counts lost attempts made before this activity, and its
    ``started_before`` numbers this activity's attempts on from those.
    """
    reported = reported or name
    hints = typing.get_type_hints(fn)
    params = [p for p in hints if p != "return"]
    if len(params) != 1:
        raise ValidationError(
            field=f"activity {name}", expected="one typed parameter", got=list(hints)
        )
    arg_type, result_type = hints[params[0]], hints.get("return", type(None))
    _warm(arg_type, result_type)
    oversized = _size_check(name, max_payload_bytes)

    async def run(arg: Any) -> Any:
        info = activity.info()
        timeout = info.heartbeat_timeout.total_seconds() if info.heartbeat_timeout else 0.0
        interval = min(timeout / 3, _MAX_HEARTBEAT_INTERVAL) if timeout else _MAX_HEARTBEAT_INTERVAL
        limit = getattr(arg, "max_turn_attempts", 0)
        starts: _Starts | None = None
        if limit > 0 and not info.is_local:
            starts = _Starts.at_start(info.attempt, info.heartbeat_details)
            lost = starts.lost + getattr(arg, "lost_before", 0)
            if lost >= limit and not (spared is not None and await spared(arg)):
                raise _crash_loop(reported, lost)
            if info.attempt > 1 or info.heartbeat_details:  # else no details say it all
                activity.heartbeat(starts.details())  # this attempt has started
        beat = () if starts is None else (starts.details(),)
        # Local activities (store-only steps) do not heartbeat: they are short.
        beating = asyncio.ensure_future(
            asyncio.sleep(0) if info.is_local else _heartbeat(interval, *beat)
        )

        def stamped(details: dict[str, Any]) -> dict[str, Any]:
            if not info.is_local:
                details[FINISHED_AT] = _now().isoformat()
            return details

        try:
            with attempt_of(getattr(arg, "started_before", 0) + info.attempt, oversized):
                result = await fn(arg)
        except TransientError as e:
            details = stamped(error_details(e, attempt=info.attempt))
            if starts is None:
                raise ApplicationError(str(e), details, type=type(e).__name__) from e
            ended = msgspec.structs.replace(starts, transient=starts.transient + 1, ended=True)
            activity.heartbeat(ended.details())  # sent before the failure: not a lost attempt
            budget = _transient_budget(info, limit)
            last = budget > 0 and ended.transient >= budget
            raise ApplicationError(
                str(e), details, type=type(e).__name__, non_retryable=last
            ) from e
        except Exception as e:
            details = stamped(error_details(e, attempt=info.attempt))
            kind = type(e).__name__
            raise ApplicationError(str(e), details, type=kind, non_retryable=True) from e
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
        if not info.is_local and "finished_at" in getattr(result, "__struct_fields__", ()):
            result = msgspec.structs.replace(result, finished_at=_now())
        message = oversized(result)
        if message:
            details = {
                "error_type": PAYLOAD_TOO_LARGE,
                "message": message,
                "retryable": False,
                "attempts": info.attempt,
                "state": {},
            }
            raise ApplicationError(
                message, stamped(details), type=PAYLOAD_TOO_LARGE, non_retryable=True
            )
        return result

    run.__name__ = run.__qualname__ = name.rpartition(".")[2]
    run.__annotations__ = {"arg": arg_type, "return": result_type}
    return activity.defn(name=name)(run)


def _transient_budget(info: activity.Info, limit: int) -> int:
    """How many attempts a counted activity's TransientErrors get (0: Temporal bounds them):
    the run's ``maximum_attempts``, its retry policy's total less the ``limit`` lost ones."""
    policy = info.retry_policy
    if policy is None or policy.maximum_attempts <= limit:
        return 0
    return policy.maximum_attempts - limit


def _crash_loop(name: str, attempts: int) -> ApplicationError:
    """The failure of an activity started ``attempts`` times without finishing."""
    message = f"{name} was started {attempts} times without finishing (its worker died)"
    details = {
        "activity": name,
        "error_type": CRASH_LOOP,
        "message": message,
        "retryable": False,
        "attempts": attempts,
        "state": {},
        FINISHED_AT: _now().isoformat(),
    }
    return ApplicationError(message, details, type=CRASH_LOOP, non_retryable=True)


def _warm(*types: Any) -> None:
    """Have msgspec resolve these types' annotations now, outside the workflow sandbox.

    msgspec resolves a Struct's string annotations in its module's globals
    the first time a decoder for it is built; inside the sandbox those
    globals are not the module's, so every type a workflow decodes is
    resolved here first (msgspec caches the result on the class).
    """
    for hint in types:
        msgspec.json.Decoder(hint)


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox our workflow runs in: agentledger and msgspec passed through.

    The sandbox still re-imports the workflow module itself
    (:mod:`~agentledger.engine.temporal.workflows`) for every run; everything
    else of agentledger is pure or unused there, and passing it through keeps
    one copy of each class (an error raised by the workflow module is the
    very class the run loop catches).
    """
    restrictions = SandboxRestrictions.default.with_passthrough_modules("agentledger", "msgspec")
    return SandboxedWorkflowRunner(restrictions=restrictions)


def warm_types() -> None:
    """Resolve every type a run workflow decodes (see :func:`_warm`)."""
    structs = [
        v for v in vars(wire).values() if isinstance(v, type) and issubclass(v, msgspec.Struct)
    ]
    _warm(
        EngineOptions,
        StartDue,
        StartedTurns,
        BeganRun,
        PlanAndCall,
        PlanAndCallOutput,
        CallAfterPlan,
        CallAndPlan,
        CallAndPlanOutput,
        PlanAfterCall,
        TurnAfter,
        ToolOutcome,
        *structs,
    )


def create_replayer(**replayer_options: Any) -> Replayer:
    """A ``temporalio.worker.Replayer`` for run histories, set up like a worker."""
    warm_types()
    replayer_options.setdefault("workflow_runner", workflow_runner())
    return Replayer(workflows=_WORKFLOWS, data_converter=data_converter, **replayer_options)


def activity_definitions(
    activities: Mapping[str, Activity], *, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
) -> list[Callable[..., Awaitable[Any]]]:
    """The runtime's activities as Temporal activities (what a worker registers)."""
    return [_wrap(name, fn, max_payload_bytes) for name, fn in activities.items()]


def create_worker(
    runtime: Runtime,
    client: Client,
    task_queue: str,
    *,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    **worker_options: Any,
) -> Worker:
    """A Temporal worker for ``runtime``'s runs on ``task_queue``.

    Besides the runtime's activities it runs the one that starts a session's
    queued turn when the turn ahead of it ends (see
    :mod:`~agentledger.engine.temporal.queue`): it starts workflows with ``client``.

    Run it with ``await worker.run()`` (stop with ``await worker.shutdown()``)
    or ``async with worker: ...``. Any number of workers, in any number of
    processes, may poll one task queue; they must share one store.

    Args:
        runtime: the configured runtime whose activities this worker runs.
        client: a Temporal client connected with agentledger's data converter.
        task_queue: the queue the engine starts runs on.
        max_payload_bytes: the largest activity result sent back to Temporal.
        **worker_options: passed to ``temporalio.worker.Worker`` (e.g.
            ``max_concurrent_activities``, ``graceful_shutdown_timeout``).

    Raises:
        ValidationError: the client lacks agentledger's data converter.
    """
    check_client(client)
    warm_types()
    if not isinstance(task_queue, str) or not task_queue:
        raise ValidationError(field="task_queue", expected="a non-empty string", got=task_queue)
    worker_options.setdefault("workflow_runner", workflow_runner())
    # Temporal's default build id hashes the code of every loaded module (seconds).
    worker_options.setdefault("build_id", f"agentledger-{__version__}")
    worker_options.setdefault(
        "max_heartbeat_throttle_interval", timedelta(seconds=_MAX_HEARTBEAT_INTERVAL)
    )
    worker_options.setdefault(
        "default_heartbeat_throttle_interval", timedelta(seconds=_MAX_HEARTBEAT_INTERVAL)
    )
    activities = {**runtime.activity_table(), START_DUE: start_due_activity(runtime, client)}
    activities[wire.COMPLETE_RUN] = complete_and_look(runtime, activities[wire.COMPLETE_RUN])
    # Its planner turns run their lone tool call: it says so when it begins a run.
    activities[wire.BEGIN_RUN] = began_run_activity(activities[wire.BEGIN_RUN])
    return Worker(
        client,
        task_queue=task_queue,
        workflows=_WORKFLOWS,
        activities=[
            *activity_definitions(activities, max_payload_bytes=max_payload_bytes),
            *_fused_definitions(runtime, activities, max_payload_bytes),
        ],
        **worker_options,
    )


def _fused_definitions(
    runtime: Runtime, activities: Mapping[str, Activity], max_payload_bytes: int
) -> list[Callable[..., Awaitable[Any]]]:
    """A planner turn with its lone tool call (and the planner turn after it), and that call or
    turn handed back (see :mod:`.fused`)."""
    plan_turn, tool_call = activities[wire.PLAN_TURN], activities[wire.TOOL_CALL]
    store = runtime.store

    async def spared(arg: PlanAndCall) -> bool:
        return await plan_recorded(store, arg)

    async def call_spared(arg: CallAndPlan) -> bool:
        return await call_settled(store, arg.call)

    check = _size_check(PLAN_AND_CALL, max_payload_bytes)
    call_check = _size_check(CALL_AND_PLAN, max_payload_bytes)
    fused = plan_and_call_activity(plan_turn, tool_call, store, check)
    return [
        _wrap(PLAN_AND_CALL, fused, max_payload_bytes, reported=wire.PLAN_TURN, spared=spared),
        _wrap(
            CALL_AFTER_PLAN,
            call_after_plan_activity(tool_call),
            max_payload_bytes,
            reported=wire.TOOL_CALL,
        ),
        _wrap(
            CALL_AND_PLAN,
            call_and_plan_activity(plan_turn, tool_call, store, call_check),
            max_payload_bytes,
            reported=wire.TOOL_CALL,
            spared=call_spared,
        ),
        _wrap(
            PLAN_AFTER_CALL,
            plan_after_call_activity(plan_turn),
            max_payload_bytes,
            reported=wire.PLAN_TURN,
        ),
    ]
