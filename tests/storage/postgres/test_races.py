"""[X5] [K3] races across connections and processes: exactly one writer wins.

The conformance suite races two handles; here every writer has a connection
of its own (its own pool), and then a process of its own, so the only thing
serializing them is PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentledger.errors import (
    AgentledgerError,
    RunCancellationConflictError,
    RunConflictError,
    RunTerminalConflictError,
)
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance import World
from agentledger.storage.conformance._races import race, split
from agentledger.storage.conformance._world import _all_pages
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.types import AppendResult, Record, RunStart, RunStatus, StartResult
from tests.storage.postgres._workers import encode_plays, play

WRITERS = 8
ROOT = str(Path(__file__).resolve().parents[3])  # the repository: ``tests`` is importable


@dataclass
class Scenario:
    """One change that ``len(commands)`` writers race; exactly one may win."""

    name: str
    method: str
    commands: list[Any]
    loser_error: type[AgentledgerError]
    run_id: str  # the run whose state shows the winner


async def build_scenarios(world: World, writers: int) -> list[Scenario]:
    """Set up the four races of [X5]/[K3] in ``world`` and build every writer's command."""
    sid = await world.session("s")
    at = world.now()
    start_id = world.track_run("start")
    starts = [
        RecordBuilder(
            RunStart(
                run_id=start_id,
                agent_id="agent",
                session_id=sid,
                started_at=at,
                labels={"writer": str(i)},
            )
        ).root_start()
        for i in range(writers)
    ]
    cancel = await world.root("cancel", session=sid)
    cancels = [cancel.cancellation(f"reason-{i}", at=world.now()) for i in range(writers)]
    pred = await world.root("pred", session=sid)
    await world.suspend(pred, "cp")
    successors = [
        world.run(f"succ-{i}", session=sid, predecessor=pred.run.run_id).root_start()
        for i in range(writers)
    ]
    term = await world.root("term", session=sid)
    statuses = (RunStatus.COMPLETED, RunStatus.FAILED)
    terminals = [
        term.terminal(statuses[i % 2], at=world.now(), event_key=f"done-{i}")
        for i in range(writers)
    ]
    return [
        Scenario("start", "start_root_run", starts, RunConflictError, start_id),
        Scenario(
            "cancellation",
            "record_run_cancellation",
            cancels,
            RunCancellationConflictError,
            cancel.run.run_id,
        ),
        Scenario("successor", "start_root_run", successors, RunConflictError, pred.run.run_id),
        Scenario(
            "terminal", "record_run_terminal", terminals, RunTerminalConflictError, term.run.run_id
        ),
    ]


@pytest.fixture
async def store(postgres_dsn: str) -> AsyncIterator[PostgresStore]:
    async with await PostgresStore.open(postgres_dsn, min_size=1, max_size=2) as handle:
        yield handle


@pytest.fixture
async def writers(postgres_dsn: str) -> AsyncIterator[list[PostgresStore]]:
    """One single-connection pool per writer."""
    handles = await asyncio.gather(
        *(PostgresStore.open(postgres_dsn, min_size=1, max_size=1) for _ in range(WRITERS))
    )
    yield list(handles)
    await asyncio.gather(*(h.close() for h in handles))


async def _check_winner(store: PostgresStore, scenario: Scenario, winner: int) -> None:
    """The store shows the winning writer's change, and only it."""
    cmd = scenario.commands[winner]
    meta = await store.load_run(scenario.run_id)
    log: list[Record] = await _all_pages(store.list_run_records, scenario.run_id)
    if scenario.name == "start":
        assert meta.labels == {"writer": str(winner)}
        assert [r.payload for r in log] == [cmd.started.payload]
    elif scenario.name == "cancellation":
        assert meta.cancellation_reason == cmd.reason
        assert [r.event_key for r in log] == ["run_started", cmd.record.event_key]
    elif scenario.name == "successor":
        assert meta.successor_run_id == cmd.run.run_id
        for i, other in enumerate(scenario.commands):
            if i != winner:
                with pytest.raises(Exception, match="not found"):
                    await store.load_run(other.run.run_id)
    else:
        assert meta.status is cmd.status
        assert log[-1].event_key == cmd.record.event_key
        assert [r.id for r in log] == [str(i) for i in range(1, len(log) + 1)]


def _winner(outcomes: list[tuple[str, str]], scenario: Scenario) -> int:
    wins = [i for i, (kind, _) in enumerate(outcomes) if kind == "ok"]
    assert len(wins) == 1, (scenario.name, outcomes)
    losers = [name for i, (_, name) in enumerate(outcomes) if i != wins[0]]
    assert losers == [scenario.loser_error.__name__] * (len(outcomes) - 1), (
        scenario.name,
        outcomes,
    )
    return wins[0]


async def test_races_across_connections(store: PostgresStore, writers: list[PostgresStore]) -> None:
    """Start, cancellation, successor and terminal, each raced by 8 connections."""
    world = World(store)
    for scenario in await build_scenarios(world, WRITERS):
        results = await race(
            [play(h, scenario.method, c) for h, c in zip(writers, scenario.commands, strict=True)]
        )
        outcomes = [r for r in results if isinstance(r, tuple)]
        assert len(outcomes) == WRITERS, results
        await _check_winner(store, scenario, _winner(outcomes, scenario))


async def test_identical_starts_across_connections(
    store: PostgresStore, writers: list[PostgresStore]
) -> None:
    """[X1] the same start from 8 connections: one insert, 7 exact retries, same ids."""
    world = World(store)
    sid = await world.session("s")
    cmd = world.run("r", session=sid).root_start()
    results = await race([h.start_root_run(cmd) for h in writers])
    wins, losses = split(results, StartResult)
    assert losses == []
    assert [r.started.inserted for _, r in wins].count(True) == 1
    assert {r.started.id for _, r in wins} == {"1"}


async def test_new_session_created_by_8_connections(
    store: PostgresStore, writers: list[PostgresStore]
) -> None:
    """[D4] creating one new session from 8 connections: all succeed, one row."""
    world = World(store)
    sid = world.track_session("s")
    at = world.now()
    labels = {"race": world.ns}
    results = await race([h.create_session(sid, created_at=at, labels=labels) for h in writers])
    assert all(not isinstance(r, BaseException) for r in results), results
    listed = await store.list_sessions(labels={"race": world.ns})
    assert [s.id for s in listed.sessions] == [sid]


async def test_session_log_is_commit_ordered_under_concurrent_writers(
    store: PostgresStore, writers: list[PostgresStore]
) -> None:
    """[L9] 8 connections append to 8 runs of one session while a reader pages.

    Every page a reader was given must still be exactly that page afterwards
    (positions are handed out in commit order, so none is filled in late), and
    the session log holds each run's records in their run order, gap-free.
    """
    world = World(store)
    sid = await world.session("s")
    runs = [await world.root(f"r{i}", session=sid) for i in range(WRITERS)]
    notes = 15
    done = asyncio.Event()
    seen: dict[int, tuple[Record, ...]] = {}

    async def write(handle: PostgresStore, i: int) -> None:
        for n in range(notes):
            result = await handle.append_run_record(world.note(runs[i], f"n{n}"))
            assert isinstance(result, AppendResult)
            assert result.inserted

    async def read() -> None:
        while not done.is_set():
            cursor, position = "", 0
            while True:
                page = await store.list_session_run_records(sid, cursor=cursor, limit=5)
                seen.setdefault(position, page.records)
                assert seen[position][: len(page.records)] == page.records[: len(seen[position])]
                position += len(page.records)
                if not page.next_cursor:
                    break
                cursor = page.next_cursor
            await asyncio.sleep(0)

    reader = asyncio.ensure_future(read())
    await asyncio.gather(*(write(h, i) for i, h in enumerate(writers)))
    done.set()
    await reader

    log: list[Record] = await _all_pages(store.list_session_run_records, sid)
    assert len(log) == WRITERS * (notes + 1)
    for position, page in seen.items():
        assert tuple(log[position : position + len(page)]) == page
    for run in runs:
        ids = [r.id for r in log if r.run_id == run.run.run_id]
        assert ids == [str(i) for i in range(1, notes + 2)]


async def _spawn(dsn: str, plays: list[tuple[str, Any]]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.storage.postgres._workers",
        dsn,
        encode_plays(plays),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )


async def _line(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout=120)
    assert line, f"worker {proc.pid} exited ({await proc.wait()})"
    return line.decode().strip()


async def test_races_across_processes(postgres_dsn: str, store: PostgresStore) -> None:
    """The same four races, each writer a separate process with its own connection."""
    world = World(store)
    scenarios = await build_scenarios(world, WRITERS)
    procs = await asyncio.gather(
        *(
            _spawn(postgres_dsn, [(s.method, s.commands[i]) for s in scenarios])
            for i in range(WRITERS)
        )
    )
    try:
        for scenario in scenarios:
            assert await asyncio.gather(*(_line(p) for p in procs)) == ["ready"] * WRITERS
            for p in procs:  # the barrier: every writer is connected and waiting
                assert p.stdin is not None
                p.stdin.write(b"go\n")
            await asyncio.gather(*(p.stdin.drain() for p in procs if p.stdin))
            lines = await asyncio.gather(*(_line(p) for p in procs))
            outcomes = [tuple(json.loads(line)) for line in lines]
            await _check_winner(store, scenario, _winner(outcomes, scenario))
    finally:
        for p in procs:
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
            await p.wait()
    assert (await store.load_run(scenarios[3].run_id)).status in (
        RunStatus.COMPLETED,
        RunStatus.FAILED,
    )
