"""Paused runs: runs whose workflow task keeps failing, read from Temporal.

A bug in the run loop (:class:`~agentledger.errors.RunLoopError`) or a run of a
retired workflow type fails the run's *workflow task*, not the run: Temporal
retries the task, the run stays as the store has it (``running``, or already
ended when the bug struck right after its ending was written) and carries on once
a worker with fixed code takes the task. Nothing about the pause is written
to the run's log (its records are immutable, and replayed); Temporal knows
it: the workflow is open, its pending workflow task is past its first attempt
(``DescribeWorkflowExecution``), the last workflow task in the history failed
(one that timed out, its worker lost, is no pause), and that
``WorkflowTaskFailed`` event holds the error and when the current streak of
failures began (later attempts of a failing task leave no event of their own).

``agentledger check``, ``agentledger runs`` and the inspector show pauses
through :func:`find_pauses`; :func:`open_runs` lists the runs whose workflow is
still open, whatever the store says of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from agentledger.errors import TransientError

__all__ = ["Pause", "find_pause", "find_pauses", "open_runs"]


@dataclass(frozen=True)
class Pause:
    """A run waiting for fixed code: its workflow task failed and Temporal retries it.

    Attributes:
        run_id: the run (its workflow id).
        error: what failed the workflow task, e.g. ``a bug in the run loop:
            KeyError: 'x'``: the message of the streak's first failure (without
            the ``run 'ID': `` it may begin with).
        attempts: how many attempts of the task have failed so far (at least 1).
        since: when the first of them failed (UTC).
    """

    run_id: str
    error: str
    attempts: int
    since: datetime

    def describe(self) -> str:
        """One line: the error, how often and since when (for ``check`` and the CLI)."""
        times = "once" if self.attempts == 1 else f"{self.attempts} times"
        since = self.since.strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"{self.error}; its workflow task failed {times} since {since}"


_TASK_ENDED_OTHERWISE = frozenset(
    {
        EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
    }
)
"""How a workflow task ends when it does not fail: then the run is not paused."""


def _transient(error: RPCError, run_id: str) -> TransientError:
    return TransientError(
        f"temporal: {error.status.name}: {error.message} (run {run_id})",
        operation="describe_workflow",
    )


async def find_pause(client: Client, run_id: str) -> Pause | None:
    """The pause of run ``run_id``; None if its workflow is unknown, closed or not failing.

    Raises:
        TransientError: Temporal cannot be reached.
    """
    handle = client.get_workflow_handle(run_id)
    try:
        description = await handle.describe()
    except RPCError as e:
        if e.status is RPCStatusCode.NOT_FOUND:  # not a Temporal run, or long gone
            return None
        raise _transient(e, run_id) from e
    if description.status is not WorkflowExecutionStatus.RUNNING:
        return None
    raw = description.raw_description
    if not raw.HasField("pending_workflow_task") or raw.pending_workflow_task.attempt < 2:
        return None  # no workflow task pending, or its first attempt: not failing
    attempts = raw.pending_workflow_task.attempt - 1
    error, since, failing = "", datetime.now(UTC), False
    try:
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                error = event.workflow_task_failed_event_attributes.failure.message
                since = event.event_time.ToDatetime().replace(tzinfo=UTC)
                failing = True
            elif event.event_type in _TASK_ENDED_OTHERWISE:
                failing = False
    except RPCError as e:
        if e.status is RPCStatusCode.NOT_FOUND:
            return None
        raise _transient(e, run_id) from e
    if not failing:  # its last task timed out (a worker lost while it held it): no pause
        return None
    error = error.removeprefix(f"run {run_id!r}: ") or "its workflow task fails"
    return Pause(run_id=run_id, error=error, attempts=attempts, since=since)


async def open_runs(client: Client) -> list[str]:
    """The ids of the runs whose workflow is still open on the server (its visibility store,
    which may lag a workflow started a moment ago).

    Raises:
        TransientError: Temporal cannot be reached.
    """
    from agentledger.engine.temporal.workflows import WORKFLOW_NAME

    query = f'WorkflowType = "{WORKFLOW_NAME}" AND ExecutionStatus = "Running"'
    try:
        return [execution.id async for execution in client.list_workflows(query)]
    except RPCError as e:
        raise TransientError(
            f"temporal: {e.status.name}: {e.message}", operation="list_workflows"
        ) from e


async def find_pauses(
    client: Client, run_ids: Iterable[str], *, concurrency: int = 8
) -> dict[str, Pause]:
    """The paused runs among ``run_ids`` (at most ``concurrency`` asked at once), by run id.

    Raises:
        TransientError: Temporal cannot be reached.
    """
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(run_id: str) -> Pause | None:
        async with gate:
            return await find_pause(client, run_id)

    found = await asyncio.gather(*(one(r) for r in dict.fromkeys(run_ids)))
    return {pause.run_id: pause for pause in found if pause is not None}
