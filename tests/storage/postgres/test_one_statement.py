"""[B3] appends in one statement on what the handle remembers, and what makes it stale.

A handle that wrote a run appends to it in one statement, decided on the run
and session as it left them. Whatever another handle changed since (the run's
log, its status, the session's status) must be seen: the statement writes
nothing and the append is decided again under locks.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from agentledger.errors import RecordConflictError, RunNotActiveError
from agentledger.storage.conformance import World
from agentledger.storage.conformance._world import all_pages
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.types import RunStatus, SessionStatus


async def _ids(store: PostgresStore, sid: str) -> list[tuple[str, str, str]]:
    log = await all_pages(store.list_session_run_records, sid)
    return [(r.run_id, r.id, r.event_key) for r in log]


async def test_appends_by_another_handle_are_seen(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    """The remembered run is behind: the next id follows the other handle's records."""
    mine, theirs = pair
    world = World(mine)
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    assert mine._known.get(run.run.run_id) is not None  # the start was remembered

    assert (await theirs.append_run_record(world.note(run, "theirs"))).id == "2"
    again = await mine.append_run_record(world.note(run, "mine"))

    assert (again.id, again.inserted) == ("3", True)
    rid = run.run.run_id
    assert await _ids(mine, sid) == [
        (rid, "1", "run_started"),
        (rid, "2", "theirs"),
        (rid, "3", "mine"),
    ]


async def test_a_key_used_by_another_handle_is_a_retry_or_a_conflict(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    """[X1] the remembered state says the key is free; the stored record decides."""
    mine, theirs = pair
    world = World(mine)
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    note = world.note(run, "k")
    await theirs.append_run_record(note)

    retry = await mine.append_run_record(note)
    assert (retry.id, retry.inserted) == ("2", False)
    with pytest.raises(RecordConflictError):
        await mine.append_run_records([world.note(run, "new"), world.note(run, "k", b"{}")])
    assert [key for _, _, key in await _ids(mine, sid)] == ["run_started", "k"]


async def test_a_run_finished_by_another_handle_refuses(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    """[L8] the remembered run is running; the stored one has ended."""
    mine, theirs = pair
    world = World(mine)
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    await theirs.record_run_terminal(run.terminal(RunStatus.COMPLETED, at=world.now()))

    with pytest.raises(RunNotActiveError):
        await mine.append_run_record(world.note(run, "late"))
    assert [key for _, _, key in await _ids(mine, sid)] == ["run_started", "run_completed"]


async def test_a_session_ended_by_another_handle_is_reported(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    """The result names the session's status as stored, not as remembered."""
    mine, theirs = pair
    world = World(mine)
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    await theirs.end_session(sid, ended_at=world.now() + timedelta(seconds=1))

    result = await mine.append_run_record(world.note(run, "after"))
    assert (result.id, result.session_status) == ("2", SessionStatus.ENDED)


async def test_a_sessionless_run_appends_in_one_statement(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    """A one-shot run has no session to lock or number its records in."""
    mine, theirs = pair
    world = World(mine)
    run = await world.one_shot("o")
    first = await mine.append_run_records([world.note(run, "a"), world.note(run, "b")])
    known = mine._known.get(run.run.run_id)
    assert known is not None
    assert known.run.last_seq == 3  # remembered after the batch
    await theirs.append_run_record(world.note(run, "c"))
    last = await mine.append_run_record(world.note(run, "d"))

    assert [r.id for r in first] == ["2", "3"]
    assert last.id == "5"
    log = await all_pages(theirs.list_run_records, run.run.run_id)
    assert [(r.id, r.event_key) for r in log][1:] == [
        ("2", "a"),
        ("3", "b"),
        ("4", "c"),
        ("5", "d"),
    ]


async def test_concurrent_appends_from_one_handle(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    """[X5] tasks sharing one remembered run on four connections: gap-free, one winner per key."""
    mine, _ = pair
    world = World(mine)
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    other = await world.root("other", session=sid)

    distinct = [mine.append_run_record(world.note(run, f"n{i}")) for i in range(12)]
    others = [mine.append_run_record(world.note(other, f"m{i}")) for i in range(6)]
    same = world.note(run, "same")
    results = await asyncio.gather(
        *distinct, *others, *(mine.append_run_record(same) for _ in range(6))
    )

    mine_ids = sorted(int(r.id) for r in results[:12])
    assert len(set(mine_ids)) == 12
    assert sum(r.inserted for r in results[18:]) == 1
    assert len({r.id for r in results[18:]}) == 1
    log = await _ids(mine, sid)
    assert [int(seq) for rid, seq, _ in log if rid == run.run.run_id] == list(range(1, 15))
    assert [int(seq) for rid, seq, _ in log if rid == other.run.run_id] == list(range(1, 8))
    assert len(log) == 14 + 7  # every session position once, in order (the listing checks gaps)
