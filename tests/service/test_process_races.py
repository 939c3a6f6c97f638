"""[S2] [X5] Races between client processes through one service: exactly one winner.

Four spawned processes, each with its own StoreClient, are released together
by a barrier for every race, in front of SQLite and of PostgreSQL. The losers
get the documented conflict class, with its fields, across the wire.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections import defaultdict
from typing import Any

import pytest

from agentledger.errors import (
    RunCancellationConflictError,
    RunConflictError,
    RunTerminalConflictError,
)
from agentledger.service import StoreClient
from agentledger.storage import AppendResult, RecordBuilder, StartResult
from tests.service._race_worker import TERMINALS, at, race_worker, run_start
from tests.service.process import ServiceProcess, Tokens

WORKERS = 4
KINDS = ("start", "cancel", "terminal")
CONFLICTS: dict[str, type[Exception]] = {
    "start": RunConflictError,
    "cancel": RunCancellationConflictError,
    "terminal": RunTerminalConflictError,
}


async def _prepare(url: str, token: str, plan: list[tuple[str, str]]) -> None:
    async with StoreClient(url, token=token) as store:
        for kind, target in plan:
            await store.create_session(f"{target}-session", created_at=at(0))
            if kind != "start":
                await store.start_root_run(RecordBuilder(run_start(target, f"{target}-session"))
                                           .root_start())  # fmt: skip


def _won(outcome: Any) -> bool:
    if isinstance(outcome, StartResult):
        return outcome.started.inserted
    return isinstance(outcome, AppendResult) and outcome.inserted


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_client_processes_race_and_exactly_one_wins(
    backend: str, request: pytest.FixtureRequest, tokens: Tokens
) -> None:
    service: ServiceProcess = request.getfixturevalue(f"{backend}_service")
    plan = [(kind, f"prace-{backend}-{kind}-{r}") for r in range(2) for kind in KINDS]
    asyncio.run(_prepare(service.url, tokens.host, plan))
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WORKERS, timeout=120)
    results = ctx.Queue()
    args = (service.url, tokens.worker)
    workers = [
        ctx.Process(target=race_worker, args=(*args, me, barrier, plan, results))
        for me in range(WORKERS)
    ]
    for worker in workers:
        worker.start()
    outcomes: dict[int, dict[int, Any]] = defaultdict(dict)
    try:
        for _ in range(WORKERS * len(plan)):
            number, me, outcome = results.get(timeout=120)
            outcomes[number][me] = outcome
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
    assert [w.exitcode for w in workers] == [0] * WORKERS

    async def stored() -> list[Any]:
        async with StoreClient(service.url, token=tokens.reader) as reader:
            return [await reader.load_run(target) for _, target in plan]

    metas = asyncio.run(stored())
    for number, (kind, target) in enumerate(plan):
        by_worker = outcomes[number]
        winners = [me for me, outcome in by_worker.items() if _won(outcome)]
        assert len(winners) == 1, (target, by_worker)
        (me,) = winners
        for other, outcome in by_worker.items():
            if other != me:
                assert type(outcome) is CONFLICTS[kind], (target, other, outcome)
                assert outcome.run_id == target
        meta = metas[number]
        if kind == "start":
            assert meta.labels == {"writer": str(me)}
        elif kind == "cancel":
            assert meta.cancellation_reason == f"reason-{me}"
        else:
            assert meta.status is TERMINALS[me % len(TERMINALS)]
