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
from psycopg import AsyncConnection

from agentledger.errors import RecordConflictError, RunNotActiveError
from agentledger.storage.conformance import World
from agentledger.storage.conformance._world import all_pages
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.types import RunStatus, SessionStatus
from tests.conditions import HANG_GUARD


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


async def _until_one_waits_for_a_lock(dsn: str) -> None:
    """Return once a backend of the test's database waits for a row lock."""
    async with await AsyncConnection.connect(dsn, autocommit=True) as watch:
        deadline = asyncio.get_running_loop().time() + HANG_GUARD
        while True:
            cur = await watch.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            row = await cur.fetchone()
            if row is not None and row[0]:
                return
            assert asyncio.get_running_loop().time() < deadline, "no backend waits for a lock"
            await asyncio.sleep(0.01)


async def test_a_run_changed_while_the_statement_waits_gives_its_positions_back(
    pair: tuple[PostgresStore, PostgresStore], postgres_dsn: str
) -> None:
    """The statement takes the session's positions first (that locks the session), then
    updates the run if its version still matches. If another writer changes the run while
    the statement waits for the session, the statement must keep no position: it fails
    as a whole and the append is decided again under locks, the session's log whole."""
    mine, _ = pair
    world = World(mine)
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    rid = run.run.run_id
    assert mine._known.get(rid) is not None  # the append goes as one statement
    async with await AsyncConnection.connect(postgres_dsn) as other:  # one transaction
        await other.execute("SELECT 1 FROM agentledger_sessions WHERE id = %s FOR UPDATE", (sid,))
        append = asyncio.create_task(mine.append_run_record(world.note(run, "mine")))
        await _until_one_waits_for_a_lock(postgres_dsn)
        # the run's version changes under the waiting statement (its snapshot is older)
        await other.execute(
            "UPDATE agentledger_runs SET last_seq = last_seq WHERE run_id = %s", (rid,)
        )
        await other.commit()
        result = await append
    assert (result.id, result.inserted) == ("2", True)
    assert await _ids(mine, sid) == [(rid, "1", "run_started"), (rid, "2", "mine")]
    async with await AsyncConnection.connect(postgres_dsn) as conn:
        cur = await conn.execute(
            "SELECT s.last_seq, array_agg(x.session_seq ORDER BY x.session_seq) "
            "FROM agentledger_sessions s JOIN agentledger_records x ON x.session_id = s.id "
            "WHERE s.id = %s GROUP BY s.last_seq",
            (sid,),
        )
        assert await cur.fetchone() == (2, [1, 2])  # no position taken without its record
    usage = await mine.load_session_usage(sid)
    assert usage.records == 2
