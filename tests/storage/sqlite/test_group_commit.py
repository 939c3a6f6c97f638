"""Group commit [B2]: concurrent operations share a transaction, each under its savepoint.

Commits are counted from the write-ahead log itself: every committed
transaction ends with exactly one WAL frame whose "database size after
commit" field is non-zero, so counting those frames counts commits.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
import struct
import threading
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentledger.errors import RecordConflictError, RunNotActiveError, ValidationError
from agentledger.runtime import Agent, ModelPlanner, QueueSink, Runtime, tool
from agentledger.storage.conformance import World
from agentledger.storage.conformance._world import run_log
from agentledger.storage.encryption import Encryption, Keyring
from agentledger.storage.sqlite import SQLiteStore, check_invariants, group
from agentledger.storage.sqlite.group import CHECKPOINT_EVERY
from agentledger.storage.sqlite.store import _small
from agentledger.storage.types import AppendResult
from agentledger.testing import ScriptedModel, reply, tool_calls
from agentledger.transcript import Message, TextPart
from tests.conditions import until
from tests.storage.sqlite._ticks import loop_ticks


def wal_commits(db_path: Path) -> int:
    """How many commit frames the WAL file holds (frames of the current WAL generation)."""
    wal = Path(f"{db_path}-wal").read_bytes()
    if len(wal) < 32:
        return 0
    page_size = struct.unpack(">I", wal[8:12])[0]
    salts = wal[16:24]
    commits = 0
    offset = 32
    while offset + 24 + page_size <= len(wal):
        header = wal[offset : offset + 24]
        if header[8:16] != salts:
            break  # a frame left over from an earlier generation: the log ends here
        if struct.unpack(">I", header[4:8])[0]:
            commits += 1
        offset += 24 + page_size
    return commits


@contextmanager
def write_lock_held(db_path: Path) -> Iterator[None]:
    """Hold SQLite's write lock from another connection, so the store's writer waits."""
    blocker = sqlite3.connect(db_path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        yield
        blocker.execute("ROLLBACK")  # releases the lock without a commit frame
    finally:
        blocker.close()


def _waiting_for_the_writer(store: SQLiteStore) -> int:
    """How many operations are queued for the store's writer thread and not yet answered."""
    assert store._writer is not None
    return store._writer._outstanding


async def _queued(store: SQLiteStore, calls: list[Awaitable[Any]], db_path: Path) -> list[Any]:
    """Start every call while the write lock is held, then release it: one group."""
    with write_lock_held(db_path):
        tasks = [asyncio.ensure_future(c) for c in calls]
        await until(
            lambda: _waiting_for_the_writer(store) == len(calls) or any(t.done() for t in tasks),
            "every call reaches the writer's queue",
        )
        assert not any(t.done() for t in tasks), "a write finished while the lock was held"
    return list(await asyncio.gather(*tasks, return_exceptions=True))


async def test_waiting_operations_share_one_commit(
    store: SQLiteStore, world: World, db_path: Path
) -> None:
    """[B2] 16 appends to 16 runs queued together are stored by a single commit."""
    sid = await world.session("s")
    runs = [await world.root(f"r{i}", session=sid) for i in range(16)]
    before = wal_commits(db_path)

    results = await _queued(
        store,
        [store.append_run_record(world.note(run, "k")) for run in runs],
        db_path,
    )

    assert all(isinstance(r, AppendResult) and r.inserted and r.id == "2" for r in results)
    assert wal_commits(db_path) - before == 1
    for run in runs:
        assert [r.event_key for r in await run_log(store, run.run.run_id)] == ["run_started", "k"]


async def test_a_refused_operation_in_a_group_leaves_the_others_alone(
    store: SQLiteStore, world: World, db_path: Path
) -> None:
    """[B2] refusals roll back to their own savepoint; the group's other writes commit."""
    sid = await world.session("s")
    a = await world.root("a", session=sid)
    b = await world.root("b", session=sid)
    done = await world.root("done", session=sid)
    await world.finish(done)
    taken = world.note(b, "taken")
    await store.append_run_record(taken)
    before = wal_commits(db_path)

    results = await _queued(
        store,
        [
            store.append_run_records([world.note(a, "a1"), world.note(a, "a2")]),
            # refused after writing its first record: that write must be undone alone
            store.append_run_records(
                [world.note(b, "b1"), world.note(b, "taken", body=b'{"other":1}')]
            ),
            store.append_run_record(world.note(done, "late")),
            store.append_run_record(world.note(a, "a3")),
            store.append_run_record(world.note(b, "b1")),
        ],
        db_path,
    )

    assert [(r.id, r.inserted) for r in results[0]] == [("2", True), ("3", True)]
    assert type(results[1]) is RecordConflictError
    assert type(results[2]) is RunNotActiveError
    assert (results[3].id, results[3].inserted) == ("4", True)
    assert (results[4].id, results[4].inserted) == ("3", True)
    assert wal_commits(db_path) - before == 1
    log_a = [r.event_key for r in await run_log(store, a.run.run_id)]
    log_b = [r.event_key for r in await run_log(store, b.run.run_id)]
    assert log_a == ["run_started", "a1", "a2", "a3"]
    assert log_b == ["run_started", "taken", "b1"]
    assert check_invariants(db_path) == []


async def test_a_write_that_fails_in_sqlite_undoes_only_its_own_rows(
    store: SQLiteStore, world: World, db_path: Path
) -> None:
    """[B2] no savepoint per operation: one statement that fails is undone by SQLite, a
    batch that fails on its third row rolls back its first two, the group still commits."""
    sid = await world.session("s")
    a = await world.root("a", session=sid)
    b = await world.root("b", session=sid)
    c = await world.root("c", session=sid)
    assert store._writer is not None
    await store._writer.submit(
        lambda conn, _, shared: conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1000)
    )
    big = b'{"text": "' + b"x" * 2000 + b'"}'
    before = wal_commits(db_path)

    results = await _queued(
        store,
        [
            store.append_run_record(world.note(a, "a1")),
            store.append_run_record(world.note(b, "too-big", body=big)),
            store.append_run_records(
                [world.note(c, "c1"), world.note(c, "c2"), world.note(c, "c3", body=big)]
            ),
            store.append_run_record(world.note(a, "a2")),
            store.append_run_records([world.note(b, "b1"), world.note(b, "b2")]),
        ],
        db_path,
    )

    assert (results[0].id, results[3].id) == ("2", "3")
    assert type(results[1]) is ValidationError
    assert type(results[2]) is ValidationError
    assert [(r.id, r.inserted) for r in results[4]] == [("2", True), ("3", True)]
    assert wal_commits(db_path) - before == 1
    assert [r.event_key for r in await run_log(store, a.run.run_id)] == ["run_started", "a1", "a2"]
    assert [r.event_key for r in await run_log(store, b.run.run_id)] == ["run_started", "b1", "b2"]
    assert [r.event_key for r in await run_log(store, c.run.run_id)] == ["run_started"]
    assert check_invariants(db_path) == []


async def test_concurrent_runs_commit_fewer_times_than_they_write(
    store: SQLiteStore, world: World, db_path: Path
) -> None:
    """[B2] 16 runs appending concurrently, no lock held: groups form on their own."""
    sid = await world.session("s")
    runs = [await world.root(f"r{i}", session=sid) for i in range(16)]
    before = wal_commits(db_path)

    async def writer(i: int) -> None:
        for k in range(8):
            await store.append_run_record(world.note(runs[i], f"k{k}"))

    await asyncio.gather(*(writer(i) for i in range(16)))

    commits = wal_commits(db_path) - before
    assert commits < 16 * 8 // 2, commits
    for run in runs:
        assert len(await run_log(store, run.run.run_id)) == 9


@pytest.mark.parametrize("durability", ["full", "normal"])
async def test_group_answers_come_after_the_commit(db_path: Path, durability: Any) -> None:
    """[B2] a caller told "inserted" finds its record from a fresh connection at once."""
    async with await SQLiteStore.open(db_path, durability=durability) as store:
        world = World(store)
        sid = await world.session("s")
        runs = [await world.root(f"r{i}", session=sid) for i in range(8)]

        async def append_and_look(i: int) -> int:
            await store.append_run_record(world.note(runs[i], "k"))
            with sqlite3.connect(db_path) as other:
                (count,) = other.execute(
                    "SELECT count(*) FROM records WHERE run_id = ? AND event_key = 'k'",
                    (runs[i].run.run_id,),
                ).fetchone()
            return int(count)

        assert await asyncio.gather(*(append_and_look(i) for i in range(8))) == [1] * 8


async def test_a_write_submitted_as_the_store_closes_is_stored(
    db_path: Path,
) -> None:
    """Submissions wait for the end of the loop's turn; close() queues them first."""
    store = await SQLiteStore.open(db_path)
    world = World(store)
    run = await world.root("r", session=await world.session("s"))

    result, _ = await asyncio.gather(
        store.append_run_record(world.note(run, "last")), store.close()
    )

    assert (result.id, result.inserted) == ("2", True)
    async with await SQLiteStore.open(db_path) as again:
        assert [r.event_key for r in await run_log(again, run.run.run_id)] == [
            "run_started",
            "last",
        ]


@tool
async def ping() -> str:
    """A tool with nothing to do."""
    return "pong"


async def test_an_agent_run_commits_once_per_activity_not_per_record(
    store: SQLiteStore, db_path: Path
) -> None:
    """[B1] a one-tool agent run: each activity's records share one transaction."""
    await store.create_session("agent-session", created_at=datetime(2026, 1, 1, tzinfo=UTC))
    runtime = Runtime(store, stream=QueueSink())
    runtime.register_model("m", ScriptedModel([tool_calls(("p1", "ping", {})), reply("ok")]))
    runtime.register_agent(Agent("chat", ModelPlanner("m", system="Be brief."), tools=[ping]))
    before = wal_commits(db_path)

    out = await runtime.agent_client("chat").run(
        "agent-session", [Message(role="user", parts=(TextPart(text="ping"),))]
    )

    commits = wal_commits(db_path) - before
    records = await run_log(store, out.run_id)
    assert len(records) == 15
    assert commits <= 10, commits  # one per writing activity; 15 before [B1]


async def test_at_normal_a_write_waiting_for_the_lock_leaves_the_loop_free(
    db_path: Path,
) -> None:
    """A write that runs on the caller's thread only tries the lock; waiting is the thread's."""
    async with await SQLiteStore.open(db_path, durability="normal") as store:
        world = World(store)
        run = await world.root("r", session=await world.session("s"))
        await store.append_run_record(world.note(run, "inline"))  # the fast path works
        async with loop_ticks() as ticks:
            with write_lock_held(db_path):
                waiting = asyncio.ensure_future(store.append_run_record(world.note(run, "waits")))
                await until(lambda: ticks.count >= 10 or waiting.done(), "ten turns of the loop")
                assert not waiting.done()  # the loop ran while the write waited
        assert (await waiting).id == "3"


@pytest.mark.parametrize("durability", ["full", "normal"])
async def test_the_writer_checkpoints_the_wal(db_path: Path, durability: Any) -> None:
    """SQLite's own checkpoint is off (commits may run on the caller's thread, which must
    not run one); the writer thread does it instead."""
    async with await SQLiteStore.open(db_path, durability=durability) as store:
        world = World(store)
        run = await world.root("r", session=await world.session("s"))
        for i in range(CHECKPOINT_EVERY + 20):
            await store.append_run_record(world.note(run, f"k{i}"))

        def copied() -> int:
            """Records in the database file alone (immutable: as if the WAL were not there)."""
            main_file = sqlite3.connect(f"file:{db_path}?immutable=1", uri=True)
            try:
                return int(main_file.execute("SELECT count(*) FROM records").fetchone()[0])
            except sqlite3.OperationalError:  # no table yet: nothing copied
                return 0
            finally:
                main_file.close()

        # The thread checkpoints after the answers: wait for it, not for a time.
        await until(lambda: copied() >= CHECKPOINT_EVERY // 2, "the writer's checkpoint")


def test_only_small_appends_may_run_on_the_callers_thread(world: World) -> None:
    """Up to 16 records and 64 KiB; anything larger or malformed goes to the writer thread."""
    run = world.run("r", session="s")
    note = world.note(run, "k")
    assert _small([note])
    assert _small([note] * 16)
    assert not _small([note] * 17)
    assert _small([world.note(run, "k", body=b'"' + b"x" * (64 * 1024 - 2) + b'"')])
    assert not _small([world.note(run, "k", body=b'"' + b"x" * (64 * 1024 - 1) + b'"')])
    assert not _small("not records")
    assert not _small([object()])


@pytest.mark.parametrize("inline", [True, False])
async def test_at_normal_inline_decides_whether_a_small_append_yields(
    db_path: Path, inline: bool
) -> None:
    """``inline=True`` (the default) runs a small append on the caller's thread, without
    yielding; ``inline=False`` sends it to the writer thread, so other tasks run meanwhile."""
    async with await SQLiteStore.open(db_path, durability="normal", inline=inline) as store:
        world = World(store)
        run = await world.root("r", session=await world.session("s"))
        ran: list[str] = []
        other = asyncio.get_running_loop().call_soon(ran.append, "other task")
        await store.append_run_record(world.note(run, "small"))
        assert ran == ([] if inline else ["other task"])
        other.cancel()


async def test_inline_must_be_a_bool(db_path: Path) -> None:
    with pytest.raises(ValidationError) as raised:
        await SQLiteStore.open(db_path, inline="no")  # type: ignore[arg-type]
    assert raised.value.field == "inline"
    assert not await asyncio.to_thread(db_path.exists)


async def test_at_normal_an_encrypted_append_never_reads_the_vault_on_the_loop(
    tmp_path: Path,
) -> None:
    """[A2] a small append whose data key is not in memory leaves the caller's thread:
    the writer thread reads the key, so a vault locked by another process holds up that
    append only, never the event loop; the next append runs inline again."""
    db, keyring, vault = tmp_path / "ledger.db", Keyring.generate("k1"), tmp_path / "keys.vault"
    async with await SQLiteStore.open(db, encryption=Encryption(keyring, vault)) as store:
        world = World(store)
        run = await world.root("r", session=await world.session("s"))
    async with await SQLiteStore.open(
        db, durability="normal", encryption=Encryption(keyring, vault)
    ) as fresh:
        await World(fresh).session("other")  # the writer's connection is open: inline is possible
        blocker = sqlite3.connect(vault, isolation_level=None)
        try:
            async with loop_ticks() as ticks:
                blocker.execute("BEGIN EXCLUSIVE")  # no key can be read meanwhile
                waiting = asyncio.ensure_future(fresh.append_run_record(world.note(run, "first")))
                await until(lambda: ticks.count >= 3 or waiting.done(), "three turns of the loop")
                assert not waiting.done()  # the loop ran while the append waited
                blocker.execute("ROLLBACK")
        finally:
            blocker.close()
        assert (await waiting).id == "2"
        ran: list[str] = []
        other = asyncio.get_running_loop().call_soon(ran.append, "other task")
        assert (await fresh.append_run_record(world.note(run, "second"))).id == "3"
        assert ran == []  # the key is in memory now: inline, without yielding
        other.cancel()


# Caller's-thread groups (any durability) --------------------------------------


@contextmanager
def statements_by_thread(store: SQLiteStore) -> Iterator[list[tuple[str, int]]]:
    """Every statement the store's write connection runs meanwhile, with the thread
    that ran it (SQLite's own trace callback on that connection)."""
    writer = store._writer
    assert writer is not None
    conn = writer._conn
    assert conn is not None
    seen: list[tuple[str, int]] = []
    conn.set_trace_callback(lambda sql: seen.append((sql, threading.get_ident())))
    try:
        yield seen
    finally:
        conn.set_trace_callback(None)


def _threads_of(seen: list[tuple[str, int]], prefix: str) -> set[int]:
    return {thread for sql, thread in seen if sql.startswith(prefix)}


@pytest.fixture
def fast_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Take every disk for fast: whether a group may run on the caller's thread then
    does not depend on how long this machine's fsyncs happen to take."""
    monkeypatch.setattr(group, "HERE_COMMIT_SECONDS", math.inf, raising=False)


@pytest.mark.usefixtures("fast_disk")
async def test_at_full_a_lone_append_commits_on_the_callers_thread(
    store: SQLiteStore, world: World, db_path: Path
) -> None:
    """An idle writer: the append's whole transaction runs on the loop's thread, without
    the hand-off to the writer thread, and its answer still follows its COMMIT."""
    run = await world.root("r", session=await world.session("s"))
    with statements_by_thread(store) as seen:
        result = await store.append_run_record(world.note(run, "k"))
    assert result.inserted
    assert _threads_of(seen, "INSERT") == _threads_of(seen, "COMMIT") == {threading.get_ident()}
    with sqlite3.connect(db_path) as other:  # durable before the answer: another connection
        assert other.execute("SELECT count(*) FROM records WHERE event_key = 'k'").fetchone() == (
            1,
        )


@pytest.mark.usefixtures("fast_disk")
async def test_at_full_appends_of_one_turn_share_one_commit_on_the_callers_thread(
    store: SQLiteStore, world: World, db_path: Path
) -> None:
    """[B2] concurrent appends still meet: 16 tasks' appends, one COMMIT, no hand-off."""
    sid = await world.session("s")
    runs = [await world.root(f"r{i}", session=sid) for i in range(16)]
    before = wal_commits(db_path)
    with statements_by_thread(store) as seen:
        results = await asyncio.gather(
            *(store.append_run_record(world.note(run, "k")) for run in runs)
        )
    assert [r.id for r in results] == ["2"] * 16
    assert wal_commits(db_path) - before == 1
    assert _threads_of(seen, "COMMIT") == {threading.get_ident()}


@pytest.mark.usefixtures("fast_disk")
async def test_the_other_small_writes_of_a_run_commit_on_the_callers_thread(
    store: SQLiteStore, world: World
) -> None:
    """A start and a terminal are bounded too: their groups skip the hand-off as well."""
    sid = await world.session("s")
    with statements_by_thread(store) as seen:
        run = await world.root("r", session=sid)
        await world.finish(run)
    assert _threads_of(seen, "COMMIT") == {threading.get_ident()}


async def test_on_a_slow_disk_groups_go_to_the_writer_thread(
    store: SQLiteStore, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While most COMMITs take longer than HERE_COMMIT_SECONDS the loop does not wait for
    them: the writer thread commits, and the loop runs other tasks meanwhile; but for one
    group in PROBE_EVERY, which commits on the caller's thread to measure again."""
    run = await world.root("r", session=await world.session("s"))
    writer = store._writer
    assert writer is not None
    assert writer.commits_measured > 0  # it measures its commits
    monkeypatch.setattr(group, "HERE_COMMIT_SECONDS", -1.0)
    here = threading.get_ident()
    with statements_by_thread(store) as seen:
        for i in range(group.COMMIT_WINDOW + 1):  # until the slow commits are the most
            await store.append_run_record(world.note(run, f"fill{i}"))
            if [thread for sql, thread in seen if sql == "COMMIT"][-1] != here:
                break
        else:
            raise AssertionError("every commit stayed on the caller's thread")
    with statements_by_thread(store) as seen:
        for i in range(group.PROBE_EVERY - 1):
            await store.append_run_record(world.note(run, f"k{i}"))
    commits = [thread for sql, thread in seen if sql == "COMMIT"]
    assert len(commits) == group.PROBE_EVERY - 1
    assert commits.count(here) == 1
    assert commits[-1] == here


class _Syncs:
    """A stand-in for ``time`` in :mod:`.group`: each COMMIT it times seems to take the
    next of ``durations`` (in turn, over and over)."""

    def __init__(self, durations: list[float]) -> None:
        self._durations = durations
        self._calls = 0
        self._now = 0.0

    def perf_counter(self) -> float:
        self._calls += 1
        if self._calls % 2 == 0:  # the second call of a pair: after the COMMIT
            self._now += self._durations[(self._calls // 2 - 1) % len(self._durations)]
        return self._now


async def test_a_few_slow_syncs_among_fast_ones_keep_groups_on_the_callers_thread(
    store: SQLiteStore, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk whose syncs are fast but for a burst now and then (a file system's journal
    commit: 3 of every 8 taking 20 ms here) is a fast disk: an average of its syncs is
    over the threshold, but lone appends still commit on the caller's thread, without
    the two thread hand-offs that cost more CPU than the sync."""
    run = await world.root("r", session=await world.session("s"))
    fast, slow = group.HERE_COMMIT_SECONDS / 10, group.HERE_COMMIT_SECONDS * 20
    monkeypatch.setattr(group, "time", _Syncs([slow, fast, slow, fast, slow] + [fast] * 3))
    with statements_by_thread(store) as seen:
        for i in range(4 * group.COMMIT_WINDOW):
            await store.append_run_record(world.note(run, f"k{i}"))
    commits = [thread for sql, thread in seen if sql == "COMMIT"]
    assert commits == [threading.get_ident()] * (4 * group.COMMIT_WINDOW)


@pytest.mark.usefixtures("fast_disk")
async def test_at_full_a_write_waiting_for_the_lock_leaves_the_loop_free(
    db_path: Path,
) -> None:
    """A caller's-thread group only tries the lock; waiting for it is the thread's."""
    async with await SQLiteStore.open(db_path) as store:
        world = World(store)
        run = await world.root("r", session=await world.session("s"))
        async with loop_ticks() as ticks:
            with write_lock_held(db_path):
                waiting = asyncio.ensure_future(store.append_run_record(world.note(run, "waits")))
                await until(lambda: ticks.count >= 10 or waiting.done(), "ten turns of the loop")
                assert not waiting.done()  # the loop ran while the write waited
        assert (await waiting).id == "2"


@pytest.mark.usefixtures("fast_disk")
async def test_at_full_an_encrypted_group_needing_a_key_goes_to_the_writer_thread(
    tmp_path: Path,
) -> None:
    """[A2] a caller's-thread group whose data key is not in memory is rolled back,
    unanswered, and runs on the writer thread, which reads the key: a vault locked by
    another process holds up those writes only, never the loop; then the loop again."""
    db, keyring, vault = tmp_path / "ledger.db", Keyring.generate("k1"), tmp_path / "keys.vault"
    async with await SQLiteStore.open(db, encryption=Encryption(keyring, vault)) as store:
        world = World(store)
        runs = [await world.root(f"r{i}", session=await world.session(f"s{i}")) for i in range(2)]
    async with await SQLiteStore.open(db, encryption=Encryption(keyring, vault)) as fresh:
        await World(fresh).session("other")  # the writer's connection is open
        blocker = sqlite3.connect(vault, isolation_level=None)
        try:
            async with loop_ticks() as ticks:
                blocker.execute("BEGIN EXCLUSIVE")  # no key can be read meanwhile
                waiting = asyncio.gather(
                    *(fresh.append_run_record(world.note(run, "first")) for run in runs)
                )
                await until(lambda: ticks.count >= 3 or waiting.done(), "three turns of the loop")
                assert not waiting.done()  # the loop ran while the appends waited
                blocker.execute("ROLLBACK")
        finally:
            blocker.close()
        assert [r.id for r in await waiting] == ["2", "2"]
        with statements_by_thread(fresh) as seen:
            assert (await fresh.append_run_record(world.note(runs[0], "second"))).id == "3"
        assert _threads_of(seen, "COMMIT") == {threading.get_ident()}  # the key is in memory
        for run in runs:
            assert [r.event_key for r in await run_log(fresh, run.run.run_id)] == [
                "run_started",
                *(["first", "second"] if run is runs[0] else ["first"]),
            ]


@pytest.mark.usefixtures("fast_disk")
async def test_at_full_a_lone_append_answers_in_one_turn_of_the_loop(
    store: SQLiteStore, world: World
) -> None:
    """Its group commits at the end of the turn that submitted it, and the caller goes on
    in the next turn: no further turn to wake it from a future (each costs a poll of
    the loop's selector and a callback, tens of microseconds beside a fast sync)."""
    run = await world.root("r", session=await world.session("s"))
    turns = 0
    spinning = True

    async def spin() -> None:
        nonlocal turns
        while spinning:
            await asyncio.sleep(0)
            turns += 1

    spinner = asyncio.ensure_future(spin())
    await asyncio.sleep(0)
    counted = []
    for i in range(3):
        before = turns
        result = await store.append_run_record(world.note(run, f"k{i}"))
        counted.append(turns - before)
        assert result.inserted
    spinning = False
    await spinner
    assert counted == [1, 1, 1]
