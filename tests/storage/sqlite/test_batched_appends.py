"""Plain appends of one group are written together, and answered as if each ran alone.

The statements are seen through SQLite's trace callback on the write
connection; commits are counted from the write-ahead log.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentledger.errors import RecordConflictError, RunNotActiveError
from agentledger.storage.conformance import World
from agentledger.storage.conformance._world import run_log
from agentledger.storage.sqlite import SQLiteStore, check_invariants
from agentledger.storage.types import AppendResult
from tests.storage.sqlite.test_group_commit import _queued, statements_by_thread, wal_commits


def _kinds(seen: list[tuple[str, int]]) -> list[str]:
    """Each traced statement's first words (an ``executemany`` traces once per row).

    Python's trace reports each trigger a statement fires as that statement again, with
    the same bound values: such repeats are one statement.
    """
    statements = [sql for i, (sql, _) in enumerate(seen) if i == 0 or seen[i - 1][0] != sql]
    return [" ".join(sql.split()[:3]) for sql in statements]


@pytest.mark.parametrize("durability", ["full", "normal"])
async def test_a_lone_append_runs_no_savepoint(db_path: Path, durability: Any) -> None:
    """Its record's INSERT comes first and is undone by SQLite alone if it fails: one
    transaction of the INSERT (the schema's triggers count it), nothing else written."""
    async with await SQLiteStore.open(db_path, durability=durability) as store:
        world = World(store)
        run = await world.root("r", session=await world.session("s"))
        with statements_by_thread(store) as seen:
            result = await store.append_run_record(world.note(run, "k"))
        assert (result.id, result.inserted) == ("2", True)
        kinds = _kinds(seen)
        assert not [k for k in kinds if k.startswith(("SAVEPOINT", "RELEASE"))], kinds
        assert kinds.count("INSERT INTO records") == 1
        assert kinds[-1] == "COMMIT"
    assert check_invariants(db_path) == []


async def test_a_group_of_appends_takes_one_savepoint(
    store: SQLiteStore, world: World, db_path: Path
) -> None:
    """16 appends queued together: one savepoint for the batch, not one per append."""
    sid = await world.session("s")
    runs = [await world.root(f"r{i}", session=sid) for i in range(16)]
    before = wal_commits(db_path)
    with statements_by_thread(store) as seen:
        results = await _queued(
            store, [store.append_run_record(world.note(run, "k")) for run in runs], db_path
        )
    assert [(r.id, r.inserted) for r in results] == [("2", True)] * 16
    assert wal_commits(db_path) - before == 1
    kinds = _kinds(seen)
    assert kinds.count("SAVEPOINT batch") == 1, kinds
    assert kinds.count("INSERT INTO records") == 16
    assert check_invariants(db_path) == []


async def test_a_batch_meeting_a_stored_key_answers_each_as_alone(
    store: SQLiteStore, world: World, db_path: Path
) -> None:
    """An exact retry, a key taken by a different record, two appends of one key in one
    group and a refused append: each gets the answer it would get by itself, the others
    are stored in order, the counters match the rows."""
    sid = await world.session("s")
    a = await world.root("a", session=sid)
    b = await world.root("b", session=sid)
    done = await world.root("done", session=sid)
    await world.finish(done)
    stored = world.note(a, "stored")
    await store.append_run_record(stored)
    twice = world.note(b, "twice")
    before = wal_commits(db_path)

    results = await _queued(
        store,
        [
            store.append_run_record(world.note(a, "a1")),
            store.append_run_record(stored),  # an exact retry: its original id
            store.append_run_record(twice),
            store.append_run_record(twice),  # the same again in the same group: a retry
            store.append_run_record(world.note(a, "stored", body=b'{"other":1}')),
            store.append_run_record(world.note(done, "late")),
            store.append_run_records([world.note(b, "b2"), world.note(b, "b3")]),
            store.append_run_record(world.note(a, "a2")),
        ],
        db_path,
    )

    assert (results[0].id, results[0].inserted) == ("3", True)
    assert (results[1].id, results[1].inserted) == ("2", False)
    assert (results[2].id, results[2].inserted) == ("2", True)
    assert (results[3].id, results[3].inserted) == ("2", False)
    assert type(results[4]) is RecordConflictError
    assert type(results[5]) is RunNotActiveError
    assert [(r.id, r.inserted) for r in results[6]] == [("3", True), ("4", True)]
    assert (results[7].id, results[7].inserted) == ("4", True)
    assert wal_commits(db_path) - before == 1
    log_a = [r.event_key for r in await run_log(store, a.run.run_id)]
    log_b = [r.event_key for r in await run_log(store, b.run.run_id)]
    assert log_a == ["run_started", "stored", "a1", "a2"]
    assert log_b == ["run_started", "twice", "b2", "b3"]
    assert check_invariants(db_path) == []


async def test_concurrent_tasks_appending_store_every_record_once(
    store: SQLiteStore, world: World, db_path: Path
) -> None:
    """16 tasks, each its own run, each retrying every append once at once: every record
    stored once, in order, the retries answered with the first ids."""
    sid = await world.session("s")
    runs = [await world.root(f"r{i}", session=sid) for i in range(16)]

    async def writer(i: int) -> None:
        for k in range(6):
            record = world.note(runs[i], f"k{k}")
            first, again = await asyncio.gather(
                store.append_run_record(record), store.append_run_record(record)
            )
            assert isinstance(first, AppendResult)
            assert isinstance(again, AppendResult)
            assert (first.id, again.id) == (str(k + 2), str(k + 2))
            assert (first.inserted, again.inserted) == (True, False)

    await asyncio.gather(*(writer(i) for i in range(16)))
    for run in runs:
        log = await run_log(store, run.run.run_id)
        assert [r.event_key for r in log] == ["run_started", *(f"k{k}" for k in range(6))]
    assert check_invariants(db_path) == []
