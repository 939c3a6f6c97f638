"""``agentledger worker`` and the example script, as real processes: both exit 0.

The worker is started with the console script's own module (``python -m
agentledger worker``), the run from a third process
(``python -m agentledger.engine.temporal.example``), the way docs/temporal.md
sets it up. Both must exit 0 (temporalio/sdk-python#300: a client can abort
the interpreter at exit; the commands end without that teardown).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from agentledger.storage import RunStatus
from agentledger.storage.sqlite import SQLiteStore
from tests.engine.temporal.processes import ROOT, WorkerProcess


def _example(
    temporal: str, db: Path, queue: str, question: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "agentledger.engine.temporal.example",
            "--temporal",
            temporal,
            "--db",
            str(db),
            "--task-queue",
            queue,
            question,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_worker_command_and_example_script_exit_zero(
    temporal_address: str, tmp_path: Path
) -> None:
    """Two terminals (worker, run) as in the docs; SIGTERM stops the worker cleanly."""
    db = tmp_path / "ledger.db"
    queue = f"cli-{uuid.uuid4().hex[:12]}"
    worker = WorkerProcess(
        temporal=temporal_address,
        db=str(db),
        task_queue=queue,
        app="agentledger.engine.temporal.example:setup",
    ).start()
    try:
        done = _example(temporal_address, db, queue, "what is 2 + 3 + 4?")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "completed" in done.stdout
        assert "The sum is 9." in done.stdout
        assert worker.stop() == 0, worker.output()
        assert worker.lines[-1] == "agentledger worker: stopped"
    finally:
        worker.kill()
    store = await SQLiteStore.open(db)
    try:
        sessions = (await store.list_sessions()).sessions
        assert len(sessions) == 1
        runs = await store.list_runs_by_session(sessions[0].id)
        assert [r.status for r in runs] == [RunStatus.COMPLETED]
    finally:
        await store.close()


def test_worker_reports_an_unreachable_server_in_one_line(tmp_path: Path) -> None:
    """A refusal is one line on stderr and exit 1, not a traceback."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentledger",
            "worker",
            "--temporal",
            "127.0.0.1:9",
            "--db",
            str(tmp_path / "x.db"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("agentledger: error: ")
    assert done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr


def test_worker_help_lists_its_options() -> None:
    """The subcommand is registered on the main CLI."""
    done = subprocess.run(
        [sys.executable, "-m", "agentledger", "worker", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    for option in ("--temporal", "--db", "--task-queue", "--app"):
        assert option in done.stdout


def _worker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentledger", "worker", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_worker_help_shows_the_recovery_options() -> None:
    """--sticky-timeout decides how soon another worker takes over a dead worker's runs:
    --help shows it and says what recovery takes (issue 14, defect 7)."""
    done = _worker("--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for option in ("--sticky-timeout", "--max-concurrent-activities", "--grace"):
        assert option in text
    assert "recover" in text
    assert "TemporalEngine(heartbeat_timeout" in text


def test_worker_refuses_a_heartbeat_timeout_it_cannot_apply(tmp_path: Path) -> None:
    """The heartbeat timeout of a run is the host's TemporalEngine(heartbeat_timeout=...);
    the worker says so instead of silently ignoring --heartbeat-timeout."""
    db = tmp_path / "never.db"
    done = _worker("--temporal", "127.0.0.1:1", "--db", str(db), "--heartbeat-timeout", "5")
    assert not db.exists()  # refused before anything is opened
    assert done.returncode == 2
    assert "TemporalEngine(heartbeat_timeout" in done.stderr
    assert "Traceback" not in done.stderr
