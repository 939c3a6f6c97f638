"""A worker killed mid-run: another worker finishes the run, exactly once.

Killed inside a tool, the tool runs again (tools are at least once). Killed
after an activity stored its records but before its completion reached
Temporal, the retry reads them: the model and the tool are not called again.

The worker runs in a subprocess (the real ``agentledger worker`` command);
it is SIGKILLed while a slow tool runs. Temporal notices the lost attempt by
its missing heartbeat and retries the tool on a second worker process; the
run completes once, with the very records an uninterrupted run writes [X1].
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from temporalio.client import Client

from agentledger.engine.temporal import TemporalEngine
from agentledger.runtime import Runtime, user_message
from agentledger.runtime.completion import check_lifecycle
from agentledger.storage import RunStatus
from agentledger.storage.protocol import Store
from tests.engine.temporal import apps
from tests.engine.temporal.harness import FAST_RETRY, now_ms
from tests.engine.temporal.processes import WorkerProcess
from tests.runtime.support import records, types, valid_transcript

STEPPER = [
    "run_started",
    "transcript_messages_appended",
    "phase:prompted",
    "phase:planning",
    "transcript_messages_appended",
    "phase:executing_tools",
    "tool_call_scheduled",
    "tool_result_received",
    "transcript_messages_appended",
    "phase:synthesizing",
    "transcript_messages_appended",
    "run_completed",
]


async def _wait_for_markers(folder: Path, prefix: str, count: int, within: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while len(apps.markers(folder, prefix)) < count:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"no {count} {prefix} markers within {within}s")
        await asyncio.sleep(0.05)


async def test_worker_killed_mid_tool_run_completes_exactly_once(
    temporal_address: str, temporal_client: Client, store: Store, worker_db: str, tmp_path: Path
) -> None:
    """SIGKILL the worker inside a tool; a new worker completes the run with no lost records."""
    folder = tmp_path / "markers"
    folder.mkdir()
    env = {apps.MARKERS_ENV: str(folder), apps.SLOW_SECONDS_ENV: "2"}
    queue = f"crash-{uuid.uuid4().hex[:12]}"
    options = ("--sticky-timeout", "1")
    first = WorkerProcess(
        temporal=temporal_address, db=worker_db, task_queue=queue, env=env, extra=options
    ).start()
    second: WorkerProcess | None = None
    try:
        engine = TemporalEngine(
            temporal_client, task_queue=queue, retry_policy=FAST_RETRY, heartbeat_timeout=2.0
        )
        runtime = Runtime(store, engine=engine)
        apps.setup(runtime)
        session = f"s-{uuid.uuid4().hex}"
        await store.create_session(session, created_at=now_ms())  # type: ignore[attr-defined]
        client = runtime.agent_client("stepper")
        handle = await client.start(session, [user_message("crash me")])
        await _wait_for_markers(folder, f"started-{handle.run_id}", 1)
        first.kill()
        second = WorkerProcess(
            temporal=temporal_address, db=worker_db, task_queue=queue, env=env, extra=options
        ).start()
        out = await asyncio.wait_for(handle.wait(), 90)
        assert out.status is RunStatus.COMPLETED, out.failure
        assert out.text == "finished: crash me done"
        # The tool ran again on the second worker (tools are at least once) ...
        assert len(apps.markers(folder, f"started-{handle.run_id}")) == 2
        assert len(apps.markers(folder, f"finished-{handle.run_id}")) == 1
        # ... and the run's log is exactly that of an uninterrupted run.
        reference = await client.run(session, [user_message("crash me")])
        assert await types(store, out.run_id) == STEPPER
        crashed, clean = await records(store, out.run_id), await records(store, reference.run_id)
        assert [(r.id, r.type, r.event_key) for r in crashed] == [
            (r.id, r.type, r.event_key) for r in clean
        ]
        assert [r.id for r in crashed] == [str(i) for i in range(1, len(STEPPER) + 1)]
        check_lifecycle(await store.load_run(out.run_id), crashed)
        messages = await valid_transcript(store, out.run_id)
        assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
        assert second.stop() == 0, second.output()
    finally:
        first.kill()
        if second is not None:
            second.kill()


ASKER = [
    "run_started",
    "transcript_messages_appended",
    "phase:prompted",
    "phase:planning",
    "transcript_messages_appended",
    "run_suspended",
]


@contextlib.asynccontextmanager
async def _killed_once_paused(
    *,
    pause_key: str,
    agent: str,
    message: str,
    temporal_address: str,
    temporal_client: Client,
    store: Store,
    worker_db: str,
    folder: Path,
) -> AsyncIterator[tuple[Any, str, Any]]:
    """Start a run on a worker that pauses once ``pause_key`` is stored, SIGKILL that
    worker there (the activity never completes), start a second one, and yield the
    client, the session and the run's handle; the second worker must stop cleanly."""
    env = {apps.MARKERS_ENV: str(folder), apps.PAUSE_KEY_ENV: pause_key}
    queue = f"lost-{uuid.uuid4().hex[:12]}"
    options = ("--sticky-timeout", "1")
    first = WorkerProcess(
        temporal=temporal_address,
        db=worker_db,
        task_queue=queue,
        env=env,
        extra=options,
        app="tests.engine.temporal.pausing:setup",
    ).start()
    second: WorkerProcess | None = None
    try:
        engine = TemporalEngine(
            temporal_client, task_queue=queue, retry_policy=FAST_RETRY, heartbeat_timeout=2.0
        )
        runtime = Runtime(store, engine=engine)
        apps.setup(runtime)
        session = f"s-{uuid.uuid4().hex}"
        await store.create_session(session, created_at=now_ms())  # type: ignore[attr-defined]
        client = runtime.agent_client(agent)
        handle = await client.start(session, [user_message(message)])
        await _wait_for_markers(folder, "paused", 1)  # stored; the activity never completes
        first.kill()
        second = WorkerProcess(
            temporal=temporal_address, db=worker_db, task_queue=queue, env=env, extra=options
        ).start()
        yield client, session, handle
        assert second.stop() == 0, second.output()
    finally:
        first.kill()
        if second is not None:
            second.kill()


@pytest.mark.parametrize(
    ("key", "agent", "what"),
    [
        ("turn:1:assistant:messages", "stepper", "the planner turn's plan"),
        ("turn:1:tool:step-1:result", "stepper", "the tool call's result"),
        ("run_suspended", "asker", "the planner turn's plan that waits for the user"),
    ],
    ids=["plan", "tool", "await"],
)
async def test_a_retry_after_a_lost_completion_reads_instead_of_working_again(
    key: str,
    agent: str,
    what: str,
    temporal_address: str,
    temporal_client: Client,
    store: Store,
    worker_db: str,
    tmp_path: Path,
) -> None:
    """The worker dies after an activity stored its records but before Temporal heard it
    finished: the retry on another worker finds them, so the model and the tool are each
    called exactly once per turn, and the run's log is that of an uninterrupted run."""
    folder = tmp_path / "markers"
    folder.mkdir()
    async with _killed_once_paused(
        pause_key=key,
        agent=agent,
        message="once",
        temporal_address=temporal_address,
        temporal_client=temporal_client,
        store=store,
        worker_db=worker_db,
        folder=folder,
    ) as (client, session, handle):
        out = await asyncio.wait_for(handle.wait(), 90)
        run = handle.run_id
        assert len(apps.markers(folder, f"planned-{run}-1")) == 1, what
        if agent == "stepper":
            assert out.status is RunStatus.COMPLETED, out.failure
            assert out.text == "finished: once done"
            assert len(apps.markers(folder, f"planned-{run}-2")) == 1, what
            assert len(apps.markers(folder, f"started-{run}")) == 1, what
            assert await types(store, run) == STEPPER
        else:
            assert out.status is RunStatus.SUSPENDED, out.failure
            assert out.awaiting is not None
            assert out.awaiting.kind == "confirmation"
            assert out.awaiting.question == "Go ahead?"
            assert not apps.markers(folder, f"started-{run}"), what
            assert await types(store, run) == ASKER
        reference = await client.run(session, [user_message("once")])
        lost, clean = await records(store, run), await records(store, reference.run_id)
        assert [(r.type, r.event_key) for r in lost] == [(r.type, r.event_key) for r in clean]
        check_lifecycle(await store.load_run(run), lost)
        await valid_transcript(store, run)


def _saved_results(kind: str, db: str, run_id: str) -> int:
    """How many saved tool results of ``run_id`` the worker's database holds."""
    if kind == "postgres":
        with psycopg.connect(db) as pg:
            row = pg.execute(
                "SELECT count(*) FROM agentledger_tool_results WHERE run_id = %s", (run_id,)
            ).fetchone()
    else:
        conn = sqlite3.connect(db)
        try:
            row = conn.execute(
                "SELECT count(*) FROM tool_results WHERE run_id = ?", (run_id,)
            ).fetchone()
        finally:
            conn.close()
    assert row is not None
    return int(row[0])


async def test_parallel_calls_whose_results_were_saved_do_not_run_again(
    store_kind: str,
    temporal_address: str,
    temporal_client: Client,
    store: Store,
    worker_db: str,
    tmp_path: Path,
) -> None:
    """Two parallel tool calls save their results; the worker dies once both are kept and
    before (at least the last) activity completes: the retries on another worker read the
    saved results, so each tool runs exactly once, and the log is an uninterrupted run's."""
    folder = tmp_path / "markers"
    folder.mkdir()
    keys = "turn:1:tool:a:result,turn:1:tool:b:result"
    async with _killed_once_paused(
        pause_key=f"tool_results:{keys}",
        agent="pair",
        message="both",
        temporal_address=temporal_address,
        temporal_client=temporal_client,
        store=store,
        worker_db=worker_db,
        folder=folder,
    ) as (client, session, handle):
        out = await asyncio.wait_for(handle.wait(), 90)
        run = handle.run_id
        assert out.status is RunStatus.COMPLETED, out.failure
        assert out.text == "a done + b done"
        assert len(apps.markers(folder, f"ran-{run}-a")) == 1
        assert len(apps.markers(folder, f"ran-{run}-b")) == 1
        assert len(apps.markers(folder, f"planned-{run}-1")) == 1
        assert len(apps.markers(folder, f"planned-{run}-2")) == 1
        reference = await client.run(session, [user_message("both")])
        lost, clean = await records(store, run), await records(store, reference.run_id)
        assert [(r.id, r.type, r.event_key) for r in lost] == [
            (r.id, r.type, r.event_key) for r in clean
        ]
        results = [r.event_key for r in lost if r.type == "tool_result_received"]
        assert results == ["turn:1:tool:a:result", "turn:1:tool:b:result"]
        check_lifecycle(await store.load_run(run), lost)
        await valid_transcript(store, run)
        # The run ended: its saved results went with it.
        assert _saved_results(store_kind, worker_db, run) == 0
