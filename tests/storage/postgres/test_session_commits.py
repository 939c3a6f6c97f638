"""Appends to one session meeting in one handle share a commit instead of taking turns.

The session's row is locked until an append commits, so its log positions
follow commit order; parallel runs of one session on one handle (a parent and
its children, or the runs one ``serve`` writes) are grouped into one
transaction per round trip. Each statement of a group still checks what it
checks alone: a stale one writes nothing and only its caller decides again.
"""

from __future__ import annotations

import asyncio

import pytest
from psycopg import AsyncConnection

from agentledger.errors import RecordConflictError
from agentledger.storage import RecordBuilder
from agentledger.storage.conformance import World
from agentledger.storage.conformance._world import all_pages
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.postgres.session_commits import MAX_GROUP, SessionCommits
from tests.conditions import until


async def _transactions(dsn: str, sid: str, keys: list[str]) -> int:
    """How many transactions wrote the records of session ``sid`` with these event keys."""
    async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(DISTINCT xmin::text) FROM agentledger_records "
            "WHERE session_id = %s AND event_key = ANY(%s)",
            (sid, keys),
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


async def _session_log(store: PostgresStore, sid: str) -> list[tuple[str, str, str]]:
    log = await all_pages(store.list_session_run_records, sid)
    return [(r.run_id, r.id, r.event_key) for r in log]


async def test_parallel_runs_of_one_session_share_commits(
    pair: tuple[PostgresStore, PostgresStore], postgres_dsn: str
) -> None:
    """Eight runs appending at once commit together: one transaction per round."""
    store, _ = pair
    world = World(store)
    sid = await world.session("s")
    runs = [await world.root(f"r{i}", session=sid) for i in range(8)]
    rounds = 5

    for n in range(rounds):
        results = await asyncio.gather(
            *(store.append_run_record(world.note(run, f"n{n}")) for run in runs)
        )
        assert [(r.id, r.inserted) for r in results] == [(str(n + 2), True)] * 8

    keys = [f"n{n}" for n in range(rounds)]
    assert await _transactions(postgres_dsn, sid, keys) == rounds  # was one per append
    log = await _session_log(store, sid)
    assert len(log) == 8 * (rounds + 1)
    for run in runs:
        rid = run.run.run_id
        assert [(seq, key) for r, seq, key in log if r == rid] == [
            ("1", "run_started"),
            *((str(n + 2), f"n{n}") for n in range(rounds)),
        ]


async def test_a_stale_append_in_a_group_is_decided_again_alone(
    pair: tuple[PostgresStore, PostgresStore], postgres_dsn: str
) -> None:
    """Another handle appended to one run of the group: that run's statement writes nothing,
    its append is decided again under locks; the others commit in the group."""
    mine, theirs = pair
    world = World(mine)
    sid = await world.session("s")
    first, stale, third = [await world.root(f"r{i}", session=sid) for i in range(3)]
    assert (await theirs.append_run_record(world.note(stale, "theirs"))).id == "2"

    results = await asyncio.gather(
        mine.append_run_record(world.note(first, "a")),
        mine.append_run_record(world.note(stale, "b")),
        mine.append_run_record(world.note(third, "c")),
    )

    assert [(r.id, r.inserted) for r in results] == [("2", True), ("3", True), ("2", True)]
    log = await _session_log(mine, sid)
    assert [(run, seq, key) for run, seq, key in log if key != "run_started"] == [
        (stale.run.run_id, "2", "theirs"),
        (first.run.run_id, "2", "a"),
        (third.run.run_id, "2", "c"),
        (stale.run.run_id, "3", "b"),
    ]
    assert await _transactions(postgres_dsn, sid, ["a", "b", "c"]) == 2  # the group, b again


async def test_a_retry_and_a_conflict_in_a_group_leave_the_others_stored(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    """[X1] [X3] an exact repeat gets its original id, a changed one its conflict; only its
    caller hears it, and the other appends of the group are stored."""
    store, _ = pair
    world = World(store)
    sid = await world.session("s")
    runs = [await world.root(f"r{i}", session=sid) for i in range(4)]
    repeated, changed = world.note(runs[1], "k"), world.note(runs[2], "k")
    await store.append_run_records([repeated])
    await store.append_run_records([changed])

    results = await asyncio.gather(
        store.append_run_record(world.note(runs[0], "x")),
        store.append_run_record(repeated),
        store.append_run_record(world.note(runs[2], "k", b'{"changed":true}')),
        store.append_run_record(world.note(runs[3], "x")),
        return_exceptions=True,
    )

    first, retry, conflict, last = results
    assert not isinstance(first, BaseException)
    assert (first.id, first.inserted) == ("2", True)
    assert not isinstance(retry, BaseException)
    assert (retry.id, retry.inserted) == ("2", False)
    assert isinstance(conflict, RecordConflictError)
    assert not isinstance(last, BaseException)
    assert (last.id, last.inserted) == ("2", True)
    log = await _session_log(store, sid)
    assert [(run, seq, key) for run, seq, key in log if key != "run_started"] == [
        (runs[1].run.run_id, "2", "k"),
        (runs[2].run.run_id, "2", "k"),
        (runs[0].run.run_id, "2", "x"),
        (runs[3].run.run_id, "2", "x"),
    ]


async def test_the_next_append_of_a_grouped_run_is_one_statement_again(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    """The handle remembers each grouped run at the group's version: no read before the next."""
    store, theirs = pair
    world = World(store)
    sid = await world.session("s")
    runs: list[RecordBuilder] = [await world.root(f"r{i}", session=sid) for i in range(3)]
    await asyncio.gather(*(store.append_run_record(world.note(run, "a")) for run in runs))
    known = [store._known.get(run.run.run_id) for run in runs]
    versions = [k.version if k is not None else None for k in known]
    assert None not in versions
    assert versions[0] == versions[1] == versions[2]  # one group

    await theirs.append_run_record(world.note(runs[2], "theirs"))
    after = await asyncio.gather(*(store.append_run_record(world.note(r, "b")) for r in runs))
    assert [r.id for r in after] == ["3", "3", "4"]


# The grouping itself, with a send function standing in for the database ------------


async def test_a_failed_group_answers_every_member_with_its_error() -> None:
    sent: list[list[str]] = []
    release = asyncio.Event()

    async def send(statements: list[str]) -> list[str]:
        sent.append(statements)
        if len(sent) == 1:
            await release.wait()
            return ["first"]
        if len(sent) == 2:
            raise ConnectionError("lost")
        return [f"ok {s}" for s in statements]

    commits: SessionCommits[str, str] = SessionCommits(send)
    leader = asyncio.create_task(commits.run("s", "a"))
    await asyncio.sleep(0)
    grouped = [asyncio.create_task(commits.run("s", s)) for s in ("b", "c")]
    await asyncio.sleep(0)
    release.set()
    assert await leader == "first"
    for task in grouped:
        with pytest.raises(ConnectionError):
            await task
    assert await commits.run("s", "d") == "ok d"  # the session is free again
    assert sent == [["a"], ["b", "c"], ["d"]]


async def test_appends_made_at_once_go_together_and_a_lone_one_alone() -> None:
    """The first append of a moment waits one loop turn for the others of its session;
    an append with nobody beside it is sent alone, and another session never joins."""
    sent: list[list[str]] = []

    async def send(statements: list[str]) -> list[str]:
        sent.append(statements)
        return [f"ok {s}" for s in statements]

    commits: SessionCommits[str, str] = SessionCommits(send)
    answers = await asyncio.gather(
        commits.run("s", "a"), commits.run("s", "b"), commits.run("t", "x"), commits.run("s", "c")
    )
    assert answers == ["ok a", "ok b", "ok x", "ok c"]
    assert sorted(sent) == [["a", "b", "c"], ["x"]]
    assert await commits.run("s", "d") == "ok d"
    assert sent[-1] == ["d"]


async def test_the_first_append_cancelled_in_its_turn_leaves_the_others_sent() -> None:
    sent: list[list[str]] = []

    async def send(statements: list[str]) -> list[str]:
        sent.append(statements)
        return [f"ok {s}" for s in statements]

    commits: SessionCommits[str, str] = SessionCommits(send)
    tasks = [asyncio.create_task(commits.run("s", s)) for s in ("a", "b", "c")]
    await asyncio.sleep(0)  # each has started; the first waits its turn
    tasks[0].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[0], asyncio.CancelledError)
    assert done[1:] == ["ok b", "ok c"]
    assert sent == [["b", "c"]]


async def test_a_caller_that_gave_up_is_left_out_and_groups_are_bounded() -> None:
    sent: list[list[int]] = []
    release = asyncio.Event()

    async def send(statements: list[int]) -> list[int]:
        sent.append(statements)
        if len(sent) == 1:
            await release.wait()
        return [s * 10 for s in statements]

    commits: SessionCommits[int, int] = SessionCommits(send)
    leader = asyncio.create_task(commits.run("s", 0))
    other_session = asyncio.create_task(commits.run("t", -1))
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(commits.run("s", i)) for i in range(1, MAX_GROUP + 3)]
    await asyncio.sleep(0)
    waiting[0].cancel()
    assert await other_session == -10  # another session does not wait
    release.set()

    assert await leader == 0
    answers = await asyncio.gather(*waiting[1:])
    assert answers == [i * 10 for i in range(2, MAX_GROUP + 3)]
    assert sent[0] == [0]
    assert sent[1] == [-1]
    assert sent[2:] == [list(range(2, MAX_GROUP + 2)), [MAX_GROUP + 2]]


async def _lock_waiters(conn: AsyncConnection, seen: list[int], stop: asyncio.Event) -> None:
    """Keep ``seen[0]`` at how many other connections to the database wait for a lock."""
    while not stop.is_set():
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database() AND pid <> pg_backend_pid()"
        )
        row = await cur.fetchone()
        assert row is not None
        seen[0] = int(row[0])


async def test_a_locking_write_and_an_append_of_one_session_take_turns_in_the_handle(
    pair: tuple[PostgresStore, PostgresStore], postgres_dsn: str
) -> None:
    """A child's start (a locking transaction) is out, waiting for the session's row: an
    append to the session from the same handle is not sent until it has committed.
    Two transactions of one session on two connections commit in the database's order
    but are answered in the order the event loop reads their connections, so a caller
    publishing each answer at once could overtake the earlier commit."""
    store, _ = pair
    world = World(store)
    sid = await world.session("s")
    parent = await world.root("p", session=sid)
    commits = store._commits  # the handle's line is what is checked
    async with (
        await AsyncConnection.connect(postgres_dsn) as holder,
        await AsyncConnection.connect(postgres_dsn, autocommit=True) as watcher,
    ):
        await holder.execute("SELECT 1 FROM agentledger_sessions WHERE id = %s FOR UPDATE", (sid,))
        waiting, stop = [0], asyncio.Event()
        watching = asyncio.create_task(_lock_waiters(watcher, waiting, stop))
        start = asyncio.create_task(world.child("c", parent=parent))
        await until(lambda: waiting[0] >= 1, "the child's start waits for the session's row")
        note = asyncio.create_task(store.append_run_record(world.note(parent, "n")))
        await until(
            lambda: commits.in_line(sid) >= 2 or waiting[0] >= 2,
            "the append waits in the handle's line or for the session's row",
        )
        assert waiting[0] == 1, "the append was sent beside the start"
        assert commits.in_line(sid) == 2
        await holder.commit()
        _, started = await start
        assert started.outcome.name == "PROCEED"
        assert (await note).inserted
        stop.set()
        await watching
    log = await _session_log(store, sid)
    assert [key for _, _, key in log][-1] == "n"  # the append committed after the start
    assert commits.in_line(sid) == 0
