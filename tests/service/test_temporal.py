"""Temporal workers that reach the store only through the service (``--store URL``).

Two ``agentledger worker --store URL`` processes hold a worker token and no
database path; the example script starts a run with a host token, also
through the service. The run's records are read back through the service.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from agentledger.service import StoreClient
from agentledger.storage import RunStatus
from tests.engine.temporal.processes import ROOT, WorkerProcess
from tests.service.process import ServiceProcess, Tokens


async def test_workers_reach_the_store_only_through_the_service(
    temporal_address: str,
    tmp_path: Path,
    tokens: Tokens,
) -> None:
    db = tmp_path / "behind-the-service.db"
    queue = f"svc-{uuid.uuid4().hex[:12]}"
    with ServiceProcess(str(db), tokens.path) as service:
        workers = []
        for _ in range(2):
            worker = WorkerProcess(temporal=temporal_address, db=service.url, task_queue=queue,
                                   app="agentledger.engine.temporal.example:setup",
                                   env={"AGENTLEDGER_TOKEN": tokens.worker})  # fmt: skip
            worker.cmd[worker.cmd.index("--db")] = "--store"
            assert str(db) not in " ".join(worker.cmd)
            workers.append(worker.start())
        try:
            done = _example(temporal_address, service.url, queue, tokens.host)
            assert done.returncode == 0, done.stdout + done.stderr
            assert "The sum is 11." in done.stdout
            for worker in workers:
                assert worker.stop() == 0, worker.output()
                assert f"store {service.url}" in worker.output()
        finally:
            for worker in workers:
                worker.kill()
        async with StoreClient(service.url, token=tokens.reader) as reader:
            sessions = (await reader.list_sessions()).sessions
            (session,) = [s for s in sessions if s.id.startswith("example-")]
            (run,) = await reader.list_runs_by_session(session.id)
            assert run.status is RunStatus.COMPLETED
            records = (await reader.list_run_records(run.run_id)).records
            assert records[0].type == "run_started"
            assert records[-1].type == "run_completed"


def _example(temporal: str, url: str, queue: str, token: str) -> subprocess.CompletedProcess[str]:
    """The example script, starting one run with a host token through the service."""
    env = {**os.environ, "AGENTLEDGER_TOKEN": token}
    return subprocess.run(
        [sys.executable, "-m", "agentledger.engine.temporal.example", "--temporal", temporal,
         "--store", url, "--task-queue", queue, "what is 5 + 6?"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
