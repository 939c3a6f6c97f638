"""The engine boundary: what a run loop may ask of the thing that runs it.

The run loop (:mod:`agentledger.runtime.workflow`) is written once, as
orchestration code over :class:`WorkflowContext`; an :class:`Engine` runs it.
The in-process engine runs it on asyncio tasks; a Temporal engine runs the
same code as a Temporal workflow. Nothing outside :mod:`agentledger.engine`
knows which engine runs.

Contract every engine keeps:

* :meth:`Engine.start` accepts a workflow before any store write [O1]; the
  workflow id is the run id.
* Activities are retried on :class:`~agentledger.errors.TransientError` with
  exponential backoff up to :attr:`RetryPolicy.maximum_attempts`, never on any
  other error (a :class:`~agentledger.errors.ContractError` is permanent). A
  final failure reaches the workflow as :class:`ActivityFailedError`.
* A non-interruptible activity (a store write) always runs to its end, even
  while the workflow is being canceled, so the loop knows exactly what was
  written. An interruptible one (a planner turn, a tool call, a child run) is
  stopped when cancellation arrives and raises :class:`WorkflowCanceled`.
* An activity whose input carries ``max_turn_attempts`` N > 0 (a planner
  turn, a tool call) and that was *started N times without finishing* (its
  worker died, ran out of memory or timed out) is not run again: it fails for
  good with error type :data:`CRASH_LOOP` (``attempts`` = N). Attempts that
  ended with a TransientError do not count: they follow the retry policy.
  Only an engine that outlives its workers (Temporal) can see this; in
  process, a crash ends the process and every attempt with it.
* When a workflow closes, the engine remembers when and whether it was
  canceled, for :meth:`Engine.describe` (used by ``ensure_run_completion`` [E2]).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol, TypeVar, runtime_checkable

import msgspec

from agentledger.errors import ActivityFailedError, ChildFailedError, TransientError

__all__ = [
    "CRASH_LOOP",
    "Activity",
    "ActivityFailedError",
    "ChildFailedError",
    "Engine",
    "RetryPolicy",
    "Workflow",
    "WorkflowContext",
    "WorkflowInfo",
    "WorkflowStatus",
    "activity_attempt",
    "attempt_of",
    "result_problem",
]

T = TypeVar("T")

CRASH_LOOP = "CrashLoop"
"""The ``error_type`` of an :class:`ActivityFailedError` whose activity was started
``max_turn_attempts`` times without finishing (see the contract above); the run
loop pauses the run on it instead of failing it."""


class WorkflowCanceled(Exception):
    """Raised into a run's loop at an interruptible await once the run is being canceled.

    The engines' and the run loop's own control flow (like
    :class:`asyncio.CancelledError`), not an error of :mod:`agentledger.errors`:
    the loop catches it and records the cancellation, so no caller ever sees it.
    ``run_id`` is the run's, when the engine knows it.
    """

    def __init__(self, *, run_id: str = "") -> None:
        super().__init__(
            f"run {run_id!r} is being canceled" if run_id else "the run is being canceled"
        )
        self.run_id = run_id


_ATTEMPT: ContextVar[int] = ContextVar("agentledger_activity_attempt", default=1)


def activity_attempt() -> int:
    """Which attempt of the running activity this is: 1 first, 2 and on for retries.

    An activity that may have done its work before (a lost completion) reads
    what it stored instead of doing it again when this is over 1.
    """
    return _ATTEMPT.get()


_RESULT_CHECK: ContextVar[Callable[[Any], str] | None] = ContextVar(
    "agentledger_activity_result_check", default=None
)


def result_problem(result: Any) -> str:
    """Why the engine could not carry ``result`` back from the running activity ("" if it can).

    An activity that records its result checks first: a result the workflow
    never gets must not be in the log either.
    """
    check = _RESULT_CHECK.get()
    return check(result) if check is not None else ""


@contextmanager
def attempt_of(attempt: int, check: Callable[[Any], str] | None = None) -> Iterator[None]:
    """Engines: run an activity's attempt ``attempt`` (results judged by ``check``) here."""
    token = _ATTEMPT.set(attempt)
    checked = _RESULT_CHECK.set(check)
    try:
        yield
    finally:
        _RESULT_CHECK.reset(checked)
        _ATTEMPT.reset(token)


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How activities are retried; the same fields and meaning as Temporal's.

    Only :class:`~agentledger.errors.TransientError` is retried; every other
    error fails the activity at once.
    """

    initial_interval: float = 0.05
    """Seconds to wait before the first retry."""
    backoff_coefficient: float = 2.0
    """Each wait is this many times the previous one."""
    maximum_interval: float = 2.0
    """No wait is longer than this many seconds."""
    maximum_attempts: int = 5
    """Attempts in all, the first included (>= 1)."""

    def __post_init__(self) -> None:
        if self.maximum_attempts < 1:
            raise ValueError("maximum_attempts must be >= 1")
        if self.initial_interval < 0 or self.maximum_interval < 0:
            raise ValueError("intervals must be >= 0")
        if self.backoff_coefficient < 1:
            raise ValueError("backoff_coefficient must be >= 1")

    def retries(self, error: BaseException, attempt: int) -> bool:
        """Whether attempt number ``attempt`` (1-based), which raised ``error``, is retried."""
        return isinstance(error, TransientError) and attempt < self.maximum_attempts

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        wait = self.initial_interval * self.backoff_coefficient ** (attempt - 1)
        return float(min(wait, self.maximum_interval))


class WorkflowStatus(StrEnum):
    """Where a workflow stands in its engine."""

    RUNNING = "running"
    COMPLETED = "completed"  # the workflow function returned
    FAILED = "failed"  # it raised


class WorkflowInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What an engine knows of one workflow."""

    workflow_id: str
    status: WorkflowStatus
    cancel_requested: bool = False
    """Whether the engine was asked to cancel it."""
    closed_at: datetime | None = None
    """When it closed (UTC, millisecond precision); None while running."""
    error: str = ""
    """Why it failed, when it raised."""


Activity = Callable[[Any], Awaitable[Any]]
"""An activity: one msgspec Struct in, one out; any I/O lives here."""


@runtime_checkable
class WorkflowContext(Protocol):
    """Everything a workflow may do besides computing: the whole engine boundary.

    Workflow code does no I/O of its own. It reads time from :meth:`now`
    (deterministic in a replaying engine), does work through :meth:`activity`
    and :meth:`child`, and checks :meth:`cancel_requested` at safe points.
    """

    @property
    def workflow_id(self) -> str:
        """This workflow's id (the run id)."""
        ...

    def now(self) -> datetime:
        """The workflow's current time: UTC, millisecond precision, never going back."""
        ...

    def cancel_requested(self) -> bool:
        """Whether the engine was asked to cancel this workflow."""
        ...

    @property
    def waits_for_fixes(self) -> bool:
        """Whether a bug in the workflow should only fail this attempt and leave the run
        waiting for fixed code (Temporal retries a failed workflow task), rather than
        end it (an in-process engine cannot wait for a deploy)."""
        ...

    async def activity(
        self, name: str, arg: Any, result_type: type[T], *, interruptible: bool = False
    ) -> T:
        """Run activity ``name`` with ``arg`` under the retry policy and return its result.

        An interruptible activity that finished its work while its cancellation
        was on the way returns its result (what it recorded is in the log).

        Raises:
            ActivityFailedError: the activity failed for good.
            WorkflowCanceled: ``interruptible`` and cancellation arrived first.
        """
        ...

    async def child(self, workflow_id: str, arg: Any, result_type: type[T]) -> T:
        """Run a child workflow (same workflow function) and return its output.

        Cancellation of this workflow is passed on to the child, which then
        closes on its own; this call raises :class:`WorkflowCanceled` after it.

        Raises:
            ChildFailedError: the child raised.
            WorkflowCanceled: this workflow is being canceled.
        """
        ...


Workflow = Callable[[WorkflowContext, Any], Awaitable[Any]]
"""A workflow: orchestration code run by an engine, given its context and input."""


@runtime_checkable
class Engine(Protocol):
    """Runs workflows and their activities; the only place that knows how."""

    @property
    def retry_policy(self) -> RetryPolicy:
        """How this engine retries activities."""
        ...

    def bind(self, workflow: Workflow, activities: Mapping[str, Activity]) -> None:
        """Install the workflow function and the activities it calls by name (once)."""
        ...

    async def start(self, workflow_id: str, arg: Any) -> None:
        """Accept a workflow and schedule it; no store write happens before this [O1].

        Raises:
            ValidationError: the id was already started in this engine.
        """
        ...

    async def result(self, workflow_id: str) -> Any:
        """Wait for the workflow to close and return its output (or raise its error)."""
        ...

    async def cancel(self, workflow_id: str) -> bool:
        """Ask a running workflow to cancel; False when this engine has no such workflow."""
        ...

    async def describe(self, workflow_id: str) -> WorkflowInfo | None:
        """What the engine knows of the workflow, or None if it never ran it."""
        ...

    async def close(self) -> None:
        """Cancel running workflows and wait for them to close."""
        ...
