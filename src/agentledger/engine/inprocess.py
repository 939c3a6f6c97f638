"""InProcessEngine: workflows as asyncio tasks in this process; no durability.

The default engine. It keeps the contract of :mod:`agentledger.engine.base`
(the same retry policy as the Temporal engine, interruptible and
non-interruptible activities, child workflows canceled with their parent), so
code that runs here runs unchanged on a durable engine. What it cannot do is
survive its process: a run whose process died stays ``running`` in the store
until ``Runtime.ensure_run_completion`` closes it [E2].
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from agentledger.engine.base import (
    Activity,
    ActivityFailedError,
    ChildFailedError,
    RetryPolicy,
    Workflow,
    WorkflowCanceled,
    WorkflowInfo,
    WorkflowStatus,
    attempt_of,
)
from agentledger.errors import TransientError, ValidationError

__all__ = ["InProcessEngine"]

T = TypeVar("T")


def _now_ms() -> datetime:
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


class _Clock:
    """Millisecond UTC time that never goes back, shared by an engine's workflows."""

    def __init__(self) -> None:
        self._last = datetime.min.replace(tzinfo=UTC)

    def now(self) -> datetime:
        self._last = max(self._last, _now_ms())
        return self._last


class _Workflow:
    """One accepted workflow: its task, cancellation flag and closing facts."""

    def __init__(self, workflow_id: str) -> None:
        self.workflow_id = workflow_id
        self.cancel_event = asyncio.Event()
        self.task: asyncio.Task[Any] | None = None
        self.closed_at: datetime | None = None
        self.status = WorkflowStatus.RUNNING
        self.error = ""
        self.interruptible: set[asyncio.Future[Any]] = set()
        """Interruptible activities under way: a cancellation cancels them at once."""

    def cancel(self) -> None:
        """Ask the workflow to stop: flag it, and interrupt its interruptible activities."""
        self.cancel_event.set()
        for job in self.interruptible:
            job.cancel()


class _Context:
    """The :class:`~agentledger.engine.base.WorkflowContext` of one in-process workflow."""

    def __init__(self, engine: InProcessEngine, state: _Workflow) -> None:
        self._engine = engine
        self._state = state

    @property
    def workflow_id(self) -> str:
        return self._state.workflow_id

    def now(self) -> datetime:
        return self._engine._clock.now()

    def cancel_requested(self) -> bool:
        return self._state.cancel_event.is_set()

    @property
    def waits_for_fixes(self) -> bool:
        return False  # nothing would ever continue the run: a bug ends it

    async def activity(
        self, name: str, arg: Any, result_type: type[T], *, interruptible: bool = False
    ) -> T:
        job = self._engine._run_activity(name, arg)
        if not interruptible:
            result: T = await job
            return result
        if self.cancel_requested():
            job.close()
            raise WorkflowCanceled()
        return await self._interruptible(asyncio.ensure_future(job))

    async def _interruptible(self, job: asyncio.Future[T]) -> T:
        """Await an activity that a cancellation interrupts (``_Workflow.cancel`` cancels it);
        then raise WorkflowCanceled, unless it finished its work anyway."""
        jobs = self._state.interruptible
        jobs.add(job)
        try:
            return await job
        except asyncio.CancelledError:
            if not job.done() or not self.cancel_requested():
                raise  # this workflow's own task is being canceled
            raise WorkflowCanceled() from None
        finally:
            jobs.discard(job)

    async def child(self, workflow_id: str, arg: Any, result_type: type[T]) -> T:
        if self.cancel_requested():
            raise WorkflowCanceled()
        await self._engine.start(workflow_id, arg)
        waiting = asyncio.ensure_future(self._engine._wait(workflow_id))
        return await self._interruptibly(waiting, workflow_id)

    async def _interruptibly(self, job: asyncio.Future[T], child_id: str | None) -> T:
        """Wait for ``job`` unless cancellation comes first; then stop it and raise."""
        canceled = asyncio.ensure_future(self._state.cancel_event.wait())
        try:
            waiting: set[asyncio.Future[Any]] = {job, canceled}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            canceled.cancel()
        if job.done():
            return job.result()
        if child_id is None:
            job.cancel()
            with contextlib.suppress(BaseException):
                await job
            if not job.cancelled() and job.exception() is None:
                return job.result()  # it finished its work anyway (its records are in)
        else:
            # The child closes on its own (writing its own ending), then we stop.
            await self._engine.cancel(child_id)
            with contextlib.suppress(BaseException):
                await job
        raise WorkflowCanceled()


class InProcessEngine:
    """Runs workflows on asyncio tasks, activities with the shared retry policy.

    Args:
        retry_policy: how activities are retried (only on TransientError).
    """

    def __init__(self, retry_policy: RetryPolicy | None = None) -> None:
        self._retry = retry_policy or RetryPolicy()
        self._workflow: Workflow | None = None
        self._activities: dict[str, Activity] = {}
        self._workflows: dict[str, _Workflow] = {}
        self._clock = _Clock()

    @property
    def retry_policy(self) -> RetryPolicy:
        return self._retry

    def bind(self, workflow: Workflow, activities: Mapping[str, Activity]) -> None:
        if self._workflow is not None:
            raise ValidationError(
                field="engine", expected="an engine not yet bound to a runtime", got="bound"
            )
        self._workflow = workflow
        self._activities = dict(activities)

    async def start(self, workflow_id: str, arg: Any) -> None:
        if self._workflow is None:
            raise ValidationError(field="engine", expected="a bound engine", got="unbound")
        if not workflow_id:
            raise ValidationError(field="workflow_id", expected="a non-empty id", got=workflow_id)
        if workflow_id in self._workflows:
            raise ValidationError(
                field="run_id", expected="a run id this engine has not started", got=workflow_id
            )
        state = self._workflows[workflow_id] = _Workflow(workflow_id)
        state.task = asyncio.create_task(
            self._execute(state, self._workflow, arg), name=f"agentledger-run:{workflow_id}"
        )

    async def _execute(self, state: _Workflow, workflow: Workflow, arg: Any) -> Any:
        try:
            result = await workflow(_Context(self, state), arg)
        except BaseException as e:
            state.status = WorkflowStatus.FAILED
            state.error = f"{type(e).__name__}: {e}"
            raise
        else:
            state.status = WorkflowStatus.COMPLETED
            return result
        finally:
            state.closed_at = self._clock.now()

    def _state(self, workflow_id: str) -> _Workflow:
        state = self._workflows.get(workflow_id)
        if state is None or state.task is None:
            raise ValidationError(
                field="workflow_id", expected="a workflow this engine started", got=workflow_id
            )
        return state

    async def _wait(self, workflow_id: str) -> Any:
        task = self._state(workflow_id).task
        assert task is not None
        try:
            return await asyncio.shield(task)
        except WorkflowCanceled:
            raise
        except BaseException as e:
            if isinstance(e, asyncio.CancelledError) and not task.done():
                raise
            raise ChildFailedError(workflow_id=workflow_id, reason=str(e), error=e) from e

    async def result(self, workflow_id: str) -> Any:
        task = self._state(workflow_id).task
        assert task is not None
        return await asyncio.shield(task)

    async def cancel(self, workflow_id: str) -> bool:
        state = self._workflows.get(workflow_id)
        if state is None:
            return False
        state.cancel()
        return True

    async def describe(self, workflow_id: str) -> WorkflowInfo | None:
        state = self._workflows.get(workflow_id)
        if state is None:
            return None
        return WorkflowInfo(
            workflow_id=workflow_id,
            status=state.status,
            cancel_requested=state.cancel_event.is_set(),
            closed_at=state.closed_at,
            error=state.error,
        )

    async def close(self) -> None:
        tasks = []
        for state in self._workflows.values():
            if state.task is not None and not state.task.done():
                state.cancel()
                tasks.append(state.task)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _run_activity(self, name: str, arg: Any) -> Any:
        """One activity under the retry policy; its final failure as ActivityFailedError."""
        fn = self._activities.get(name)
        if fn is None:
            raise ActivityFailedError(
                activity=name,
                error_type="ValidationError",
                reason=f"no activity named {name!r}",
                retryable=False,
                attempts=0,
            )
        attempt = 0
        while True:
            attempt += 1
            try:
                with attempt_of(attempt):
                    return await fn(arg)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if self._retry.retries(e, attempt):
                    await asyncio.sleep(self._retry.delay(attempt))
                    continue
                raise ActivityFailedError(
                    activity=name,
                    error_type=type(e).__name__,
                    reason=str(e),
                    retryable=isinstance(e, TransientError),
                    attempts=attempt,
                    error=e,
                ) from e
