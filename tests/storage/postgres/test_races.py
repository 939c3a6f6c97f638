"""[X5] [K3] races across connections: exactly one writer wins.

The conformance suite races two handles, and writers in separate processes
(``test_races_across_processes``); here every writer has a connection of its
own (its own pool), so the only thing serializing them is PostgreSQL.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from agentledger.storage.conformance import World
from agentledger.storage.conformance._process_worker import play
from agentledger.storage.conformance._processes import build_scenarios, check_winner, winner
from agentledger.storage.conformance._races import race, split
from agentledger.storage.conformance._world import all_pages
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.types import AppendResult, Record, StartResult

WRITERS = 8


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


async def test_races_across_connections(store: PostgresStore, writers: list[PostgresStore]) -> None:
    """Identical and conflicting starts, cancellation, successor and terminal, 8 connections each.

    The same races across processes are in the conformance suite.
    """
    world = World(store)
    for scenario in await build_scenarios(world, WRITERS):
        results = await race(
            [play(h, scenario.method, c) for h, c in zip(writers, scenario.commands, strict=True)]
        )
        outcomes = [r for r in results if isinstance(r, tuple)]
        assert len(outcomes) == WRITERS, results
        await check_winner(store, scenario, winner(scenario, outcomes))


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

    log: list[Record] = await all_pages(store.list_session_run_records, sid)
    assert len(log) == WRITERS * (notes + 1)
    for position, page in seen.items():
        assert tuple(log[position : position + len(page)]) == page
    for run in runs:
        ids = [r.id for r in log if r.run_id == run.run.run_id]
        assert ids == [str(i) for i in range(1, notes + 2)]
