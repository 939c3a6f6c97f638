"""Crash safety: SIGKILL in the middle of lifecycle operations leaves a consistent file [L8].

A child process streams starts, appends, retries, child links, cancellations,
suspensions, continuations, terminals, session ends and purges into one file
with the default durability; it is killed at a random moment, the invariant
checker runs on the file, and a new child carries on in the same file. Some
kills land while the first child is still creating and migrating the file.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from agentledger.storage.sqlite import check_invariants
from agentledger.storage.sqlite.schema import applied, migrate, pending
from tests.storage.sqlite import _workers

KILLS = 20
BUDGET = 20.0  # seconds for all kills together; fewer kills if the machine is slow
MIN_KILLS = 8


def _context() -> Any:
    """Fork children from a fresh preloaded server: as clean as spawn, without 20 start-ups."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([_workers.__name__])
    return ctx


def _finish_migrations(path: Path) -> None:
    """A kill during the first open may leave the schema a few migrations behind (each
    commits whole, with its record): the next writer's open applies the rest, as here."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        behind = pending(conn)
        done = applied(conn)
        assert [v for v, _ in done] == list(range(1, len(done) + 1))  # a prefix, no gaps
        if behind:
            migrate(conn)
    finally:
        conn.close()


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
def test_sigkill_at_random_moments_leaves_the_file_consistent(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    rng = random.Random(os.environ.get("AGENTLEDGER_CRASH_SEED", "4"))
    ctx = _context()
    started = time.monotonic()
    kills = 0
    while kills < KILLS and (kills < MIN_KILLS or time.monotonic() - started < BUDGET):
        ready = ctx.Event()
        child = ctx.Process(target=_workers.crash_worker, args=(str(path), f"k{kills}", ready))
        child.start()
        if kills < 3:  # the first kills hit start-up: creating, migrating, WAL set-up
            time.sleep(rng.uniform(0.0, 0.08))
        else:
            assert ready.wait(timeout=60), "the child never opened the store"
            time.sleep(rng.uniform(0.02, 0.4))
        assert child.is_alive(), f"the child stopped on its own (exit code {child.exitcode})"
        os.kill(child.pid, signal.SIGKILL)
        child.join(timeout=30)
        assert child.exitcode == -signal.SIGKILL
        kills += 1
        if not path.exists():
            continue  # killed before SQLite created the file
        _finish_migrations(path)
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
