"""TemporalEngine: the client side of the Temporal engine (start, wait, cancel, describe).

A runtime built with ``Runtime(store, engine=TemporalEngine(client,
task_queue="agentledger"))`` starts each run as one Temporal workflow whose
id is the run id; workers made by
:func:`~agentledger.engine.temporal.create_worker` (in this process or any
other) run it. The engine writes nothing to the store: ``start`` only asks
Temporal to accept the workflow, and the workflow's first activity starts
the run in the store [O1].
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from agentledger.engine.base import (
    Activity,
    ChildFailedError,
    RetryPolicy,
    Workflow,
    WorkflowInfo,
    WorkflowStatus,
)
from agentledger.engine.temporal.client import check_client
from agentledger.engine.temporal.failures import ACTIVITY_FAILED
from agentledger.engine.temporal.options import DEFAULT_MAX_PAYLOAD_BYTES, EngineOptions
from agentledger.engine.temporal.workflows import WORKFLOW_NAME, activity_failed
from agentledger.errors import TransientError, ValidationError
from agentledger.runtime.wire import RunOutput
from agentledger.runtime.workflow import run_workflow

__all__ = ["TemporalEngine"]

_TRANSIENT = frozenset(
    {
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.RESOURCE_EXHAUSTED,
        RPCStatusCode.ABORTED,
        RPCStatusCode.INTERNAL,
        RPCStatusCode.UNKNOWN,
    }
)
_CLOSED_BY_ENGINE = frozenset(
    {WorkflowExecutionStatus.CANCELED, WorkflowExecutionStatus.TERMINATED}
)


def _ms(value: datetime) -> datetime:
    value = value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return value.replace(microsecond=value.microsecond - value.microsecond % 1000)


def _transient(error: RPCError, operation: str) -> TransientError:
    return TransientError(f"temporal: {error.status.name}: {error.message}", operation=operation)


class TemporalEngine:
    """Runs each run as a Temporal workflow on ``task_queue``.

    Args:
        client: a Temporal client connected with agentledger's data converter
            (:func:`~agentledger.engine.temporal.connect`).
        task_queue: the queue workers poll.
        retry_policy: how activities are retried (only on TransientError);
            the same policy the in-process engine uses.
        activity_timeout: seconds one activity attempt may run.
        heartbeat_timeout: seconds after which an attempt whose worker stopped
            heartbeating is retried elsewhere. It travels with each run this
            engine starts (and its children): workers cannot change it.
        max_payload_bytes: the largest encoded workflow input or activity
            input; larger ones are refused (Temporal's own limit is 2 MiB).
        eager_start: ask Temporal to hand a run's first workflow task back
            with the start (eager workflow start) when a worker of this
            client polls ``task_queue`` in this process; otherwise, or when
            that worker is busy, the start is an ordinary one.
    """

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str,
        retry_policy: RetryPolicy | None = None,
        activity_timeout: float = 600.0,
        heartbeat_timeout: float = 30.0,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        eager_start: bool = True,
    ) -> None:
        check_client(client)
        if not isinstance(task_queue, str) or not task_queue:
            raise ValidationError(field="task_queue", expected="a non-empty string", got=task_queue)
        self.client = client
        self.task_queue = task_queue
        try:
            self.options = EngineOptions(
                retry=retry_policy or RetryPolicy(),
                activity_timeout=activity_timeout,
                heartbeat_timeout=heartbeat_timeout,
                max_payload_bytes=max_payload_bytes,
            )
        except ValueError as e:
            raise ValidationError(field="TemporalEngine", expected=str(e), got=None) from e
        self.eager_start = bool(eager_start)
        self._bound = False

    @property
    def retry_policy(self) -> RetryPolicy:
        return self.options.retry

    def bind(self, workflow: Workflow, activities: Mapping[str, Activity]) -> None:
        """Accept the runtime's run loop; its activities run on the workers, not here."""
        if self._bound:
            raise ValidationError(
                field="engine", expected="an engine not yet bound to a runtime", got="bound"
            )
        if workflow is not run_workflow:
            raise ValidationError(
                field="workflow",
                expected="agentledger.runtime.workflow.run_workflow (the one workflow "
                "Temporal workers run)",
                got=getattr(workflow, "__qualname__", workflow),
            )
        self._bound = True

    def _handle(self, workflow_id: str) -> WorkflowHandle[Any, RunOutput]:
        return self.client.get_workflow_handle(workflow_id, result_type=RunOutput)

    async def start(self, workflow_id: str, arg: Any) -> None:
        if not isinstance(workflow_id, str) or not workflow_id:
            raise ValidationError(field="workflow_id", expected="a non-empty id", got=workflow_id)
        payloads = self.client.data_converter.payload_converter.to_payloads([arg])
        size = sum(p.ByteSize() for p in payloads)
        if size > self.options.max_payload_bytes:
            raise ValidationError(
                field="messages",
                expected=f"a run input of at most {self.options.max_payload_bytes} bytes encoded "
                "(Temporal payload limit; the store, not the workflow, holds long histories)",
                got=f"{size} bytes",
            )
        try:
            await self.client.start_workflow(
                WORKFLOW_NAME,
                args=[arg, self.options],
                id=workflow_id,
                task_queue=self.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                request_eager_start=self.eager_start,
            )
        except WorkflowAlreadyStartedError as e:
            raise ValidationError(
                field="run_id", expected="a run id this engine has not started", got=workflow_id
            ) from e
        except RPCError as e:
            raise _transient(e, "start_workflow") from e

    async def result(self, workflow_id: str) -> Any:
        """Wait for the run's workflow and return its :class:`~agentledger.runtime.RunOutput`.

        Raises:
            ActivityFailedError: the workflow ended on an activity that failed for
                good (e.g. the start itself); ``error`` is the rebuilt error.
            ChildFailedError: the workflow ended without output (terminated, timed
                out, or its loop failed).
        """
        try:
            return await self._handle(workflow_id).result()
        except WorkflowFailureError as e:
            cause = e.cause
            if isinstance(cause, ApplicationError) and cause.type == ACTIVITY_FAILED:
                raise activity_failed(cause.details[0] if cause.details else {}) from None
            message = getattr(cause, "message", "") or str(cause or e)
            raise ChildFailedError(workflow_id=workflow_id, reason=message, error=None) from e
        except RPCError as e:
            if e.status is RPCStatusCode.NOT_FOUND:
                raise ValidationError(
                    field="workflow_id", expected="a workflow this engine started", got=workflow_id
                ) from e
            raise _transient(e, "result") from e

    async def cancel(self, workflow_id: str) -> bool:
        """Ask Temporal to cancel the workflow; with no reason recorded this is [C3]."""
        try:
            await self._handle(workflow_id).cancel()
        except RPCError as e:
            if e.status is RPCStatusCode.NOT_FOUND:  # unknown, or already closed
                return await self.describe(workflow_id) is not None
            raise _transient(e, "cancel") from e
        return True

    async def describe(self, workflow_id: str) -> WorkflowInfo | None:
        handle = self._handle(workflow_id)
        try:
            description = await handle.describe()
        except RPCError as e:
            if e.status is RPCStatusCode.NOT_FOUND:
                return None
            raise _transient(e, "describe") from e
        status = description.status
        if status is WorkflowExecutionStatus.RUNNING:
            engine_status = WorkflowStatus.RUNNING
        elif status is WorkflowExecutionStatus.COMPLETED:
            engine_status = WorkflowStatus.COMPLETED
        else:
            engine_status = WorkflowStatus.FAILED
        cancel_requested = status in _CLOSED_BY_ENGINE
        error = ""
        try:
            async for event in handle.fetch_history_events():
                kind = event.event_type
                if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED:
                    cancel_requested = True
                elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
                    error = event.workflow_execution_failed_event_attributes.failure.message
                elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
                    reason = event.workflow_execution_terminated_event_attributes.reason
                    error = f"terminated: {reason}" if reason else "terminated"
                elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
                    error = "timed out"
                elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
                    error = "canceled"
        except RPCError as e:
            raise _transient(e, "describe") from e
        closed_at = description.close_time
        if engine_status is WorkflowStatus.RUNNING or closed_at is None:
            closed_at = None
        else:
            closed_at = _ms(closed_at)
        return WorkflowInfo(
            workflow_id=workflow_id,
            status=engine_status,
            cancel_requested=cancel_requested,
            closed_at=closed_at,
            error=error if engine_status is WorkflowStatus.FAILED else "",
        )

    async def close(self) -> None:
        """Nothing to stop: the runs live in the Temporal cluster, not in this engine."""
