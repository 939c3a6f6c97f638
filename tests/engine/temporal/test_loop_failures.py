"""A bug in the run loop pauses the run on Temporal (the workflow task fails and is retried)
until fixed code is deployed; the in-process engine fails the run (tests/runtime)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus

from agentledger.engine.temporal import TemporalEngine
from agentledger.engine.temporal.paused import Pause, find_pause
from agentledger.runtime import AgentClient, Runtime, user_message
from agentledger.storage import RunStatus
from agentledger.storage.protocol import Store
from tests.cli.conftest import run_process
from tests.engine.temporal import apps
from tests.engine.temporal.harness import FAST_RETRY, now_ms
from tests.engine.temporal.processes import WorkerProcess
from tests.runtime.support import records, types


async def _task_failure(client: Client, workflow_id: str, within: float = 60) -> str:
    """The workflow's last workflow-task failure message, once it has one (still running)."""
    from temporalio.api.enums.v1 import EventType

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        handle = client.get_workflow_handle(workflow_id)
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                return str(event.workflow_task_failed_event_attributes.failure.message)
        await asyncio.sleep(0.2)
    raise AssertionError(f"no workflow task of {workflow_id} failed within {within} s")


@dataclass
class _Seen:
    """What ``agentledger check`` and ``agentledger runs`` printed about one run."""

    check: str
    check_code: int
    paused: dict[str, Any] | None
    runs: str


def _seen_by_the_cli(temporal: str, db: str, session: str, run_id: str) -> _Seen:
    """``check --temporal`` (text and JSON) and ``runs SESSION --temporal``, as processes."""
    server = ("--temporal", temporal)
    text = run_process("check", "--db", db, *server)
    as_json = run_process("check", "--db", db, *server, "--json")
    listed = run_process("runs", session, "--db", db, *server)
    assert listed.returncode == 0, listed.stderr
    paused = [p for p in json.loads(as_json.stdout)["paused"] if p["run_id"] == run_id]
    return _Seen(text.stdout, text.returncode, paused[0] if paused else None, listed.stdout)


@dataclass
class _Deploy:
    """A task queue served by a worker process with a bug, until :meth:`fix` replaces it."""

    temporal: str
    db: str
    queue: str
    client: AgentClient
    session: str
    buggy: WorkerProcess
    fixed: WorkerProcess | None = None

    def fix(self) -> None:
        """Stop the buggy worker (it exits cleanly), then start one running ``apps.setup``."""
        assert self.buggy.stop() == 0, self.buggy.output()
        self.fixed = WorkerProcess(
            temporal=self.temporal, db=self.db, task_queue=self.queue, extra=_OPTIONS
        ).start()


_OPTIONS = ("--sticky-timeout", "1")


@contextlib.asynccontextmanager
async def _buggy_deploy(
    temporal_address: str, temporal_client: Client, store: Store, worker_db: str, app: str
) -> AsyncIterator[_Deploy]:
    """A session of ``stepper`` runs on a fresh task queue served by a worker set up by
    ``tests.engine.temporal.apps:<app>``; both workers are killed at the end."""
    queue = f"{app.replace('_', '-')}-{uuid.uuid4().hex[:12]}"
    buggy = WorkerProcess(
        temporal=temporal_address, db=worker_db, task_queue=queue,
        app=f"tests.engine.temporal.apps:{app}", extra=_OPTIONS,
    ).start()  # fmt: skip
    deploy: _Deploy | None = None
    try:
        runtime = Runtime(
            store, engine=TemporalEngine(temporal_client, task_queue=queue, retry_policy=FAST_RETRY)
        )
        apps.setup(runtime)
        session = f"s-{uuid.uuid4().hex}"
        await store.create_session(session, created_at=now_ms())  # type: ignore[attr-defined]
        client = runtime.agent_client("stepper")
        deploy = _Deploy(temporal_address, worker_db, queue, client, session, buggy)
        yield deploy
        if deploy.fixed is not None:
            assert deploy.fixed.stop() == 0, deploy.fixed.output()
    finally:
        buggy.kill()
        if deploy is not None and deploy.fixed is not None:
            deploy.fixed.kill()


async def test_a_fixed_worker_continues_the_run_a_buggy_one_paused(
    temporal_address: str, temporal_client: Client, store: Store, worker_db: str
) -> None:
    """A worker process with a bug in its run loop fails the workflow task after the first
    planner turn; once it is replaced by a worker with the fix, the run completes, its log
    that of an uninterrupted run."""
    async with _buggy_deploy(
        temporal_address, temporal_client, store, worker_db, "buggy_setup"
    ) as deploy:
        session, client = deploy.session, deploy.client
        handle = await client.start(session, [user_message("fix me")])
        message = await _task_failure(temporal_client, handle.run_id)
        assert "KeyError: 'a bug in this deploy'" in message
        assert (await store.load_run(handle.run_id)).status is RunStatus.RUNNING
        described = await temporal_client.get_workflow_handle(handle.run_id).describe()
        assert described.status is WorkflowExecutionStatus.RUNNING  # paused, not failed
        pause = await _paused(temporal_client, handle.run_id, attempts=2)
        bug = "a bug in the run loop: KeyError: 'a bug in this deploy'"
        assert pause.error == bug
        seen = _seen_by_the_cli(temporal_address, worker_db, session, handle.run_id)
        assert f"run {handle.run_id!r} is paused: {bug}; its workflow task failed" in seen.check
        assert "deploy fixed code and the run continues by itself" in seen.check
        assert seen.check_code == 1
        assert seen.paused is not None
        assert seen.paused["error"] == bug
        assert seen.paused["attempts"] >= 2
        assert f"stepper  running (paused: {bug}; its workflow task failed" in seen.runs
        before = await types(store, handle.run_id)
        assert "run_completed" not in before
        deploy.fix()
        out = await asyncio.wait_for(handle.wait(), 120)
        assert out.status is RunStatus.COMPLETED, out.failure
        assert out.text == "finished: fix me done"
        done = await types(store, out.run_id)
        assert done[: len(before)] == before  # nothing rewritten
        reference = await client.run(session, [user_message("fix me")])
        assert done == await types(store, reference.run_id)
        seen = _seen_by_the_cli(temporal_address, worker_db, session, handle.run_id)
        assert seen.paused is None
        assert handle.run_id not in seen.check
        assert f"{handle.run_id}  stepper  completed  started" in seen.runs
        assert [r.id for r in await records(store, out.run_id)] == [
            str(i) for i in range(1, len(done) + 1)
        ]


async def _task_failures(client: Client, workflow_id: str) -> list[datetime]:
    """When each ``WorkflowTaskFailed`` event of the workflow's history happened."""
    from temporalio.api.enums.v1 import EventType

    return [
        event.event_time.ToDatetime().replace(tzinfo=UTC)
        async for event in client.get_workflow_handle(workflow_id).fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]


async def _paused(client: Client, run_id: str, *, attempts: int = 1, within: float = 90) -> Pause:
    """The run's pause once its workflow task has failed ``attempts`` times."""
    deadline = time.monotonic() + within
    seen: Pause | None = None
    while time.monotonic() < deadline:
        seen = await find_pause(client, run_id)
        if seen is not None and seen.attempts >= attempts:
            return seen
        await asyncio.sleep(0.2)
    raise AssertionError(f"{run_id} did not fail {attempts} workflow tasks in {within} s: {seen}")


async def test_a_bug_in_the_first_task_pauses_the_run_too(
    temporal_address: str, temporal_client: Client, store: Store, worker_db: str
) -> None:
    """A bug right after the run starts (in its first workflow task, where the start runs as
    a local activity): each retried task starts the run again with the same inputs, an exact
    retry, so the run pauses like any other; a fixed worker then finishes it."""
    async with _buggy_deploy(
        temporal_address, temporal_client, store, worker_db, "first_task_buggy_setup"
    ) as deploy:
        session, client = deploy.session, deploy.client
        handle = await client.start(session, [user_message("fix me")])
        pause = await _paused(temporal_client, handle.run_id, attempts=3)
        assert pause.error == "a bug in the run loop: KeyError: 'a bug right after the start'"
        failed = await _task_failures(temporal_client, handle.run_id)
        assert len(failed) == 1  # later attempts leave no event: since is the first failure
        assert pause.since == failed[0]
        assert pause.run_id == handle.run_id
        described = await temporal_client.get_workflow_handle(handle.run_id).describe()
        assert described.status is WorkflowExecutionStatus.RUNNING  # paused, not failed
        meta = await store.load_run(handle.run_id)
        assert meta.status is RunStatus.RUNNING
        before = await types(store, handle.run_id)
        assert before[0] == "run_started"
        assert "run_completed" not in before
        deploy.fix()
        out = await asyncio.wait_for(handle.wait(), 120)
        assert out.status is RunStatus.COMPLETED, out.failure
        assert out.text == "finished: fix me done"
        assert (await store.load_run(out.run_id)).started_at == meta.started_at
        assert await find_pause(temporal_client, out.run_id) is None  # closed: no pause
        done = await types(store, out.run_id)
        assert done[: len(before)] == before
        reference = await client.run(session, [user_message("fix me")])
        assert done == await types(store, reference.run_id)


async def test_a_bug_right_after_a_write_in_a_later_task_pauses_the_run(
    temporal_address: str, temporal_client: Client, store: Store, worker_db: str
) -> None:
    """A bug in a later workflow task, right after that task wrote the run's ending (a local
    activity, whose result Temporal keeps only if the task completes): each retry writes it
    again at the same time (the run's clock comes from its history, not from the retry's
    own), an exact retry, so the run pauses; a fixed worker then closes the workflow."""
    async with _buggy_deploy(
        temporal_address, temporal_client, store, worker_db, "later_task_buggy_setup"
    ) as deploy:
        session, client = deploy.session, deploy.client
        handle = await client.start(session, [user_message("fix me")])
        pause = await _paused(temporal_client, handle.run_id, attempts=3)
        assert pause.error == "a bug in the run loop: KeyError: 'a bug after a write'"
        assert (await store.load_run(handle.run_id)).status is RunStatus.COMPLETED
        before = await records(store, handle.run_id)
        assert before[-1].type == "run_completed"
        # Its workflow is open though the store says completed: check and runs still see it.
        bug = "a bug in the run loop: KeyError: 'a bug after a write'"
        seen = _seen_by_the_cli(temporal_address, worker_db, session, handle.run_id)
        assert f"run {handle.run_id!r} is paused: {bug}; its workflow task failed" in seen.check
        assert seen.paused is not None
        assert seen.paused["error"] == bug
        assert f"stepper  completed (paused: {bug}; its workflow task failed" in seen.runs
        deploy.fix()
        out = await asyncio.wait_for(handle.wait(), 120)
        assert out.status is RunStatus.COMPLETED, out.failure
        assert out.text == "finished: fix me done"
        assert await records(store, out.run_id) == before  # nothing written twice
        seen = _seen_by_the_cli(temporal_address, worker_db, session, handle.run_id)
        assert seen.paused is None
        assert handle.run_id not in seen.check
        reference = await client.run(session, [user_message("fix me")])
        assert await types(store, out.run_id) == await types(store, reference.run_id)
