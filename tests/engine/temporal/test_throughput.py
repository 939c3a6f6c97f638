"""Two worker processes, one PostgreSQL store, one Temporal server: 50 concurrent runs.

Every run must complete exactly once with exactly its records, whichever
worker ran which step. The test prints runs/s and where the time went
(per activity type, from the workflow histories): run with ``-s`` to see it.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections import defaultdict
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentledger.engine.temporal import TemporalEngine
from agentledger.runtime import Runtime, user_message
from agentledger.runtime.completion import check_lifecycle
from agentledger.storage import RunStatus
from agentledger.storage.postgres import PostgresStore
from tests.engine.temporal import apps
from tests.engine.temporal.harness import FAST_RETRY, now_ms
from tests.engine.temporal.processes import WorkerProcess
from tests.engine.temporal.test_crash import STEPPER
from tests.runtime.support import records, types, valid_transcript

RUNS = 50
SESSIONS = 5


async def _step_times(client: Client, run_ids: list[str]) -> dict[str, list[float]]:
    """Seconds per step kind over the runs' histories, queueing and running apart.

    ``<activity> wait`` is scheduled -> started (waiting for a worker),
    ``<activity> run`` started -> completed; the same for workflow tasks.
    """
    seconds: dict[str, list[float]] = defaultdict(list)
    for run_id in run_ids:
        names: dict[int, str] = {}
        times: dict[int, float] = {}
        async for event in client.get_workflow_handle(run_id).fetch_history_events():
            at = event.event_time.ToDatetime().timestamp()
            times[event.event_id] = at
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attributes = event.activity_task_scheduled_event_attributes
                names[event.event_id] = attributes.activity_type.name.removeprefix("agentledger.")
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                scheduled = event.activity_task_started_event_attributes.scheduled_event_id
                seconds[f"{names[scheduled]} wait"].append(at - times[scheduled])
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                attributes = event.activity_task_completed_event_attributes
                name = names[attributes.scheduled_event_id]
                seconds[f"{name} run"].append(at - times[attributes.started_event_id])
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                scheduled = event.workflow_task_started_event_attributes.scheduled_event_id
                seconds["workflow task wait"].append(at - times[scheduled])
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                started = event.workflow_task_completed_event_attributes.started_event_id
                seconds["workflow task run"].append(at - times[started])
    return seconds


async def test_two_workers_fifty_concurrent_runs(
    temporal_address: str, temporal_client: Client, postgres_dsn: str, tmp_path: Path
) -> None:
    """50 runs over 2 worker processes sharing PostgreSQL: totals exact, each run once."""
    folder = tmp_path / "markers"
    folder.mkdir()
    env = {apps.MARKERS_ENV: str(folder), apps.SLOW_SECONDS_ENV: "0.05"}
    queue = f"pair-{uuid.uuid4().hex[:12]}"
    workers = [
        WorkerProcess(temporal=temporal_address, db=postgres_dsn, task_queue=queue, env=env)
        for _ in range(2)
    ]
    store = await PostgresStore.open(postgres_dsn)
    try:
        for worker in workers:
            worker.start()
        runtime = Runtime(
            store, engine=TemporalEngine(temporal_client, task_queue=queue, retry_policy=FAST_RETRY)
        )
        apps.setup(runtime)
        sessions = [f"pair-{uuid.uuid4().hex[:10]}" for _ in range(SESSIONS)]
        for session in sessions:
            await store.create_session(session, created_at=now_ms())
        client = runtime.agent_client("stepper")
        began = time.perf_counter()
        handles = await asyncio.gather(
            *(client.start(sessions[i % SESSIONS], [user_message(f"job {i}")]) for i in range(RUNS))
        )
        outs = await asyncio.wait_for(asyncio.gather(*(h.wait() for h in handles)), 180)
        elapsed = time.perf_counter() - began

        assert [o.status for o in outs] == [RunStatus.COMPLETED] * RUNS
        assert sorted(o.text for o in outs) == sorted(
            f"finished: job {i} done" for i in range(RUNS)
        )
        total = 0
        for out in outs:
            kinds = await types(store, out.run_id)
            assert kinds == STEPPER, out.run_id
            assert kinds.count("run_started") == 1
            assert kinds.count("run_completed") == 1
            stored = await records(store, out.run_id)
            check_lifecycle(await store.load_run(out.run_id), stored)
            await valid_transcript(store, out.run_id)
            total += len(stored)
        assert total == RUNS * len(STEPPER)
        for session in sessions:
            page = await store.list_session_run_records(session, limit=1000)
            assert len(page.records) == RUNS // SESSIONS * len(STEPPER)
            assert page.next_cursor == ""
            runs = await store.list_runs_by_session(session)
            assert len(runs) == RUNS // SESSIONS
            assert all(r.status is RunStatus.COMPLETED for r in runs)
        pids = {p.name.split(".")[0] for p in folder.iterdir() if p.name.startswith("worker-")}
        assert len(pids) == 2, f"one worker did everything: {pids}"
        assert len(list(folder.glob("finished-*"))) == RUNS  # no tool ran twice here

        times = await _step_times(temporal_client, [o.run_id for o in outs])
        print(f"\n{RUNS} runs on 2 workers: {elapsed:.2f}s, {RUNS / elapsed:.1f} runs/s")
        for name, values in sorted(times.items(), key=lambda kv: -statistics.mean(kv[1])):
            print(
                f"  {name:32} n={len(values):4} mean={statistics.mean(values) * 1000:7.1f}ms "
                f"max={max(values) * 1000:7.1f}ms"
            )
        for worker in workers:
            assert worker.stop() == 0, worker.output()
    finally:
        for worker in workers:
            worker.kill()
        await store.close()
