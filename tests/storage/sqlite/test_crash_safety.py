"""Crash safety: SIGKILL in the middle of lifecycle operations leaves a consistent file [L8].

A child process streams starts, appends, retries, child links, cancellations,
suspensions, continuations, terminals, session ends and purges into one file
with the default durability; it is killed at a random moment, the invariant
checker runs on the file, and a new child carries on in the same file. Some
kills land while the first child is still creating and migrating the file.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentledger.storage.sqlite import check_invariants
from tests.storage.sqlite import _workers

KILLS = 20
BUDGET = 25.0  # seconds for all kills together; fewer kills if the machine is slow
MIN_KILLS = 8


def _spawn(path: Path, tag: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, _workers.__file__, str(path), tag],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _kill(child: subprocess.Popen[bytes]) -> bytes:
    child.send_signal(signal.SIGKILL)
    _, err = child.communicate(timeout=30)
    return err


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
def test_sigkill_at_random_moments_leaves_the_file_consistent(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    rng = random.Random(os.environ.get("AGENTLEDGER_CRASH_SEED", "4"))
    started = time.monotonic()
    kills = 0
    while kills < KILLS and (kills < MIN_KILLS or time.monotonic() - started < BUDGET):
        child = _spawn(path, f"k{kills}")
        if kills < 3:  # the first kills hit start-up: creating, migrating, WAL set-up
            time.sleep(rng.uniform(0.05, 0.6))
        else:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line == b"ready\n", (line, child.stderr.read() if child.stderr else b"")
            time.sleep(rng.uniform(0.02, 0.4))
        assert child.poll() is None, _kill(child).decode()  # it must still be working
        _kill(child)
        kills += 1
        if not path.exists():
            continue  # killed before SQLite created the file
        problems = check_invariants(path)
        assert problems == [], f"after kill {kills}: {problems}"
    assert kills >= MIN_KILLS
    # The stream made progress across the kills: there is something to check.
    conn = sqlite3.connect(path)
    try:
        (records,) = conn.execute("SELECT count(*) FROM records").fetchone()
        (runs,) = conn.execute("SELECT count(*) FROM runs").fetchone()
    finally:
        conn.close()
    assert records > 0
    assert runs > 0
