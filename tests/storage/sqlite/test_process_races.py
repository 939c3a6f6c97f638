"""Races across processes: exactly one winner, the others the documented conflict [X5].

Four spawned processes, each with its own handles on one file, are released
together by a barrier for every race. Nothing but AgentledgerErrors may come
back (they pickle), and a lock is a TransientError only once the busy
timeout truly expired.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import sqlite3
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from agentledger.errors import (
    RunCancellationConflictError,
    RunConflictError,
    RunNotFoundError,
    RunTerminalConflictError,
    TransientError,
)
from agentledger.storage import Checkpoint, RecordBuilder, RunStatus, Session
from agentledger.storage.sqlite import SQLiteStore, check_invariants
from agentledger.storage.types import AppendResult, StartResult
from tests.storage.sqlite._workers import TERMINALS, at, race_worker, run_start

WORKERS = 4
ROUNDS = 4
KINDS = ("start", "cancel", "successor", "terminal")


async def _prepare(path: Path, plan: list[tuple[str, str]]) -> None:
    """Sessions and runs each race needs before its contenders are released."""
    async with await SQLiteStore.open(path, durability="normal") as store:
        for kind, target in plan:
            session = f"{target}-session"
            await store.create_session(session, created_at=at(0))
            if kind in ("cancel", "terminal", "successor"):
                run = RecordBuilder(run_start(target, session))
                await store.start_root_run(run.root_start())
            if kind == "successor":
                checkpoint = Checkpoint(id="cp", data=b"\x01")
                await store.record_run_suspension(run.suspension(checkpoint, at=at(2)))


def _won(outcome: Any) -> bool:
    if isinstance(outcome, StartResult):
        return outcome.started.inserted
    if isinstance(outcome, AppendResult):
        return outcome.inserted
    return False


_CONFLICTS: dict[str, type[Exception]] = {
    "start": RunConflictError,
    "cancel": RunCancellationConflictError,
    "successor": RunConflictError,
    "terminal": RunTerminalConflictError,
}


@pytest.fixture(scope="module")
def raced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any], dict[int, Any]]:
    """Run every race once in four processes; the tests below read the outcomes."""
    path = tmp_path_factory.mktemp("races") / "races.db"
    plan = [(kind, f"{kind}-{r}") for r in range(ROUNDS) for kind in KINDS]
    plan.append(("locked", "locked"))
    asyncio.run(_prepare(path, plan))
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WORKERS + 1, timeout=60)
    results = ctx.Queue()
    workers = [
        ctx.Process(target=race_worker, args=(str(path), me, barrier, plan, results))
        for me in range(WORKERS)
    ]
    for worker in workers:
        worker.start()
    outcomes: dict[int, dict[int, Any]] = defaultdict(dict)
    held: dict[int, Any] = {}
    try:
        for number, (kind, _) in enumerate(plan):
            holder = None
            if kind == "locked":
                holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
                holder.execute("BEGIN IMMEDIATE")
                release = threading.Timer(1.0, holder.rollback)
            barrier.wait()
            if holder is not None:
                started = time.monotonic()
                release.start()
                release.join()
                held[number] = time.monotonic() - started
                holder.close()
            for _ in range(WORKERS):
                got, me, outcome = results.get(timeout=60)
                outcomes[got][me] = outcome
    except (threading.BrokenBarrierError, queue.Empty):
        pytest.fail("a racing process failed or hung; see its traceback above")
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
    assert [w.exitcode for w in workers] == [0] * WORKERS
    return path, plan, {n: (outcomes[n], held.get(n)) for n in outcomes}


@pytest.mark.parametrize("kind", KINDS)
def test_exactly_one_winner_and_the_documented_conflict(
    raced: tuple[Path, list[Any], dict[int, Any]], kind: str
) -> None:
    _, plan, outcomes = raced
    for number, (race_kind, target) in enumerate(plan):
        if race_kind != kind:
            continue
        by_worker, _ = outcomes[number]
        assert len(by_worker) == WORKERS
        winners = [me for me, outcome in by_worker.items() if _won(outcome)]
        assert len(winners) == 1, (target, by_worker)
        for me, outcome in by_worker.items():
            if me not in winners:
                assert type(outcome) is _CONFLICTS[kind], (target, me, outcome)
                assert outcome.run_id  # the pickled error kept its data


def _winner(by_worker: dict[int, Any]) -> int:
    (me,) = [me for me, outcome in by_worker.items() if _won(outcome)]
    return me


def test_the_store_holds_what_the_winner_wrote(
    raced: tuple[Path, list[Any], dict[int, Any]],
) -> None:
    path, plan, outcomes = raced

    async def check() -> None:
        async with await SQLiteStore.open(path) as store:
            for number, (kind, target) in enumerate(plan):
                if kind == "locked":
                    continue
                me = _winner(outcomes[number][0])
                meta = await store.load_run(target)
                if kind == "start":
                    assert meta.labels == {"writer": str(me)}
                elif kind == "cancel":
                    assert meta.cancellation_reason == f"reason-{me}"
                elif kind == "successor":
                    assert meta.successor_run_id == f"{target}-next-{me}"
                    for other in set(range(WORKERS)) - {me}:
                        with pytest.raises(RunNotFoundError):
                            await store.load_run(f"{target}-next-{other}")
                else:
                    assert meta.status is TERMINALS[me % len(TERMINALS)]
                    assert meta.status is not RunStatus.RUNNING
                    page = await store.list_run_records(target)
                    assert [r.event_key for r in page.records][-1] == f"run_completed-{me}"

    asyncio.run(check())
    assert check_invariants(path) == []


def test_a_lock_is_transient_only_past_the_busy_timeout(
    raced: tuple[Path, list[Any], dict[int, Any]],
) -> None:
    _, plan, outcomes = raced
    number = next(n for n, (kind, _) in enumerate(plan) if kind == "locked")
    by_worker, held = outcomes[number]
    assert held >= 0.9
    for me, (hasty, patient) in by_worker.items():
        # busy_timeout=0.2 against a lock held for a second: TransientError, with its operation.
        assert type(hasty) is TransientError, hasty
        assert hasty.operation == "create_session"
        # busy_timeout=30 against the same lock: it waits, then succeeds.
        assert isinstance(patient, Session), patient
        assert patient.id == f"locked-{me}"
