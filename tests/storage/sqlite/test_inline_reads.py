"""Small reads on the caller's thread (:mod:`agentledger.storage.sqlite.inline_reads`).

Whether a read ran on the caller's thread is observable: a read that leaves
the event loop lets a callback scheduled before it run; one that runs inline
returns first.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Awaitable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from agentledger.errors import ValidationError
from agentledger.storage import Checkpoint, Record, RecordBuilder
from agentledger.storage.conformance import World
from agentledger.storage.encryption import Encryption, Keyring
from agentledger.storage.payloads import TRANSCRIPT_APPENDED
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.sqlite.inline_reads import MAX_BYTES, MAX_RECORDS
from agentledger.transcript import Message, TextPart, encode_messages
from tests.conditions import until
from tests.storage.sqlite._ticks import loop_ticks

T = TypeVar("T")

_RECOVERING = """
import fcntl, os, sys
fd = os.open(sys.argv[1] + "-shm", os.O_RDWR)
# SQLite's WAL index locks (at byte 120): write, checkpoint and recovery, as a process
# recovering the WAL holds them; and the index header zeroed, so readers must wait.
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 3, 120)
os.pwrite(fd, bytes(96), 0)
print("held", flush=True)
sys.stdin.readline()
"""


@contextmanager
def wal_being_recovered(db_path: Path) -> Iterator[None]:
    """Another process holds the WAL index's recovery locks, as if it were recovering it:
    a reader that opens a read transaction meanwhile waits in SQLite's busy handler."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _RECOVERING, str(db_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.communicate("\n", timeout=10)


async def _yielded(call: Awaitable[T]) -> tuple[T, bool]:
    """``call``'s result, and whether it let other callbacks run (left the loop)."""
    ran: list[bool] = []
    other = asyncio.get_running_loop().call_soon(ran.append, True)
    try:
        result = await call
    finally:
        other.cancel()
    return result, bool(ran)


def _message(world: World, run: RecordBuilder, n: int) -> Record:
    text = Message(role="user", parts=(TextPart(text=f"message {n}"),))
    return run.record(
        TRANSCRIPT_APPENDED, encode_messages([text]), event_key=f"m{n}", at=world.now()
    )


async def _populated(db_path: Path) -> tuple[str, str]:
    """A session and a running run with a few records and a saved tool result."""
    async with await SQLiteStore.open(db_path) as store:
        world = World(store)
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await store.append_run_records([world.note(run, f"k{i}") for i in range(5)])
        await store.append_run_record(_message(world, run, 0))
        await store.save_tool_result(run.run.run_id, "call", b"saved")
    return sid, run.run.run_id


@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read-only"])
@pytest.mark.parametrize("inline", [True, False])
async def test_inline_decides_whether_small_reads_leave_the_loop(
    db_path: Path, inline: bool, read_only: bool
) -> None:
    """``inline=True`` (the default) answers each bounded read on the caller's thread;
    ``inline=False`` sends every read to the reader threads. The answers are the same."""
    sid, rid = await _populated(db_path)
    opened = (
        SQLiteStore.open_read_only(db_path, inline=inline)
        if read_only
        else SQLiteStore.open(db_path, inline=inline)
    )
    async with await opened as store, await SQLiteStore.open(db_path, inline=False) as threads:
        for name, args in [
            ("load_run", (rid,)),
            ("load_session", (sid,)),
            ("load_session_status", (sid,)),
            ("load_tool_result", (rid, "call")),
            ("list_run_records", (rid,)),
            ("verified_transcript_payloads", (rid,)),
        ]:
            answer, yielded = await _yielded(getattr(store, name)(*args))
            assert yielded is not inline, name
            assert answer == await getattr(threads, name)(*args), name


async def test_reads_that_are_not_small_leave_the_loop(store: SQLiteStore, world: World) -> None:
    """The suspension's checkpoint (up to 64 MiB) and whole-session reads go to the threads."""
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    await world.suspend(run)
    for call in [
        store.load_run_suspension(run.run.run_id),
        store.list_session_run_records(sid),
        store.list_runs_by_session(sid),
        store.list_run_records(run.run.run_id, limit=MAX_RECORDS + 1),
    ]:
        _, yielded = await _yielded(call)
        assert yielded


async def test_replay_reads_a_short_log_inline_and_a_long_one_on_a_thread(
    store: SQLiteStore, world: World
) -> None:
    """[R2] a run's transcript is read on the caller's thread while its log has at most
    MAX_RECORDS records (run_started and MAX_RECORDS - 1 messages here); one more record
    and the whole log is read on a reader thread, nothing left out."""
    run = await world.root("r", session=await world.session("s"))
    rid = run.run.run_id
    await store.append_run_records([_message(world, run, n) for n in range(MAX_RECORDS - 1)])
    payloads, yielded = await _yielded(store.verified_transcript_payloads(rid))
    assert not yielded
    assert len(payloads) == MAX_RECORDS - 1
    await store.append_run_record(_message(world, run, MAX_RECORDS))
    payloads, yielded = await _yielded(store.verified_transcript_payloads(rid))
    assert yielded
    assert len(payloads) == MAX_RECORDS
    messages = await build_messages_from_run_log(store, rid)
    assert messages[-1].parts == (TextPart(text=f"message {MAX_RECORDS}"),)


async def test_large_values_send_a_small_read_to_the_threads(
    store: SQLiteStore, world: World
) -> None:
    """A page whose payloads pass MAX_BYTES, a large checkpoint or tool result: threads."""
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    rid = run.run.run_id
    body = b'"' + b"x" * (MAX_BYTES // 2) + b'"'
    await store.append_run_records([world.note(run, "a", body), world.note(run, "b", body)])
    await store.append_run_record(world.note(run, "small"))
    await store.save_tool_result(rid, "big", b"y" * (MAX_BYTES + 1))

    page, yielded = await _yielded(store.list_run_records(rid))
    assert yielded
    assert [r.event_key for r in page.records] == ["run_started", "a", "b", "small"]
    page, yielded = await _yielded(store.list_run_records(rid, limit=2))  # one large payload
    assert not yielded
    assert [r.event_key for r in page.records] == ["run_started", "a"]
    tail, yielded = await _yielded(store.list_run_records(rid, cursor=page.next_cursor, limit=1))
    assert not yielded
    assert [r.event_key for r in tail.records] == ["b"]
    tail, yielded = await _yielded(store.list_run_records(rid, cursor=page.next_cursor, limit=2))
    assert not yielded
    assert [r.event_key for r in tail.records] == ["b", "small"]
    assert (await _yielded(store.load_tool_result(rid, "big"))) == (b"y" * (MAX_BYTES + 1), True)

    big = Checkpoint(id="cp", data=b"z" * (MAX_BYTES + 1))
    await store.record_run_suspension(run.suspension(big, at=world.now()))
    meta, yielded = await _yielded(store.load_run(rid))
    assert yielded
    assert meta.status == "suspended"
    other = await world.root("other", session=sid)
    await world.suspend(other)  # a small checkpoint
    meta, yielded = await _yielded(store.load_run(other.run.run_id))
    assert not yielded
    assert meta.status == "suspended"


async def test_a_read_that_would_wait_for_a_lock_leaves_the_loop_free(db_path: Path) -> None:
    """While another process recovers the WAL, a reader waits for it: such a read is
    declined on the caller's thread at once, and waits on a reader thread instead."""
    _, rid = await _populated(db_path)
    async with await SQLiteStore.open(db_path) as store:
        assert (await _yielded(store.load_run(rid)))[1] is False  # the inline path works
        async with loop_ticks() as ticks:
            with wal_being_recovered(db_path):
                waiting = asyncio.ensure_future(store.load_run(rid))
                await until(lambda: ticks.count >= 3 or waiting.done(), "three turns of the loop")
                assert not waiting.done()  # the loop ran while the read waited
        assert (await waiting).run_id == rid
        assert (await _yielded(store.load_run(rid)))[1] is False  # inline again


async def test_an_encrypted_read_whose_key_is_not_in_memory_loads_it_on_a_thread(
    tmp_path: Path,
) -> None:
    """[A2] the vault is never read on the caller's thread: a read that needs a data key
    not in memory goes to the threads (which load it), and the next one runs inline."""
    db, keyring, vault = tmp_path / "ledger.db", Keyring.generate("k1"), tmp_path / "keys.vault"
    async with await SQLiteStore.open(db, encryption=Encryption(keyring, vault)) as store:
        world = World(store)
        run = await world.root("r", session=await world.session("s"))
        await store.append_run_record(world.note(run, "k", b'{"secret":1}'))
    rid = run.run.run_id
    async with await SQLiteStore.open(db, encryption=Encryption(keyring, vault)) as fresh:
        page, yielded = await _yielded(fresh.list_run_records(rid))
        assert yielded
        assert page.records[-1].payload == b'{"secret":1}'
        again, yielded = await _yielded(fresh.list_run_records(rid))
        assert not yielded
        assert again == page


async def test_event_loops_in_two_threads_share_one_store(store: SQLiteStore, world: World) -> None:
    """Two loops reading at once never use the caller's-thread connection together:
    the one that finds it taken reads on the threads."""
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    await store.append_run_records([world.note(run, f"k{i}") for i in range(10)])
    rid = run.run.run_id
    expected = (await store.load_run(rid), await store.list_run_records(rid, limit=5))

    async def reads() -> int:
        for _ in range(300):
            assert (await store.load_run(rid), await store.list_run_records(rid, limit=5)) == (
                expected
            )
        return 300

    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the threads take turns inside reads, not between them
    try:
        with ThreadPoolExecutor(1) as pool:
            elsewhere = pool.submit(asyncio.run, reads())  # starts now: ours never yields
            assert await reads() == 300
            assert await asyncio.wrap_future(elsewhere) == 300
    finally:
        sys.setswitchinterval(switching)


async def test_open_read_only_checks_inline(db_path: Path) -> None:
    await _populated(db_path)
    with pytest.raises(ValidationError) as raised:
        await SQLiteStore.open_read_only(db_path, inline=1)  # type: ignore[arg-type]
    assert raised.value.field == "inline"
