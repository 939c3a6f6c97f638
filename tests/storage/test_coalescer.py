"""The one coalescer: the first caller waits one loop turn, later callers join, a detached
task sends the group. Real asyncio, a send function standing in for the other side (the
store client's groups meet the real service in tests/service/test_batch.py, the backend's
the real PostgreSQL server in tests/storage/postgres/test_session_commits.py); nothing
here waits for time, only for loop turns and events."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

import pytest

from agentledger.errors import TransientError
from agentledger.storage.coalescer import ALONE, Coalescer, Member
from agentledger.storage.postgres.session_commits import (
    MAX_GROUP_BYTES,
    SessionCommits,
    statement_bytes,
)
from tests.conditions import HANG_GUARD


class Other:
    """The other side: answers each member with its item upper-cased, records groups and
    lone sends; ``release`` holds a send until set; ``fail`` makes a send raise it."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.alone: list[str] = []
        self.release = asyncio.Event()
        self.release.set()
        self.fail: Exception | None = None

    async def send(self, group: list[Member[str, str]]) -> None:
        self.groups.append([m.item for m in group])
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        for m in group:
            if not m.answer.done():
                m.answer.set_result(m.item.upper())

    async def send_alone(self, item: str) -> str:
        self.alone.append(item)
        await self.release.wait()
        return item.upper()


def _coalescer(other: Other, **options: object) -> Coalescer[str, str]:
    settings: dict[str, object] = {"max_members": 4, "size": len, **options}
    return Coalescer(other.send, other.send_alone, **settings)  # type: ignore[arg-type]


async def _turns(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def test_calls_made_at_once_go_together_and_a_lone_call_goes_alone() -> None:
    other = Other()
    calls = _coalescer(other)
    assert await asyncio.gather(*(calls.submit(c) for c in "abc")) == ["A", "B", "C"]
    assert await calls.submit("d") == "D"
    assert other.groups == [["a", "b", "c"]]
    assert other.alone == ["d"]


async def test_groups_keep_to_their_keys() -> None:
    other = Other()
    calls = _coalescer(other)
    keys: list[Hashable] = ["x", "y", "x", "y"]
    answers = await asyncio.gather(*(calls.submit(c, k) for c, k in zip("abcd", keys, strict=True)))
    assert answers == ["A", "B", "C", "D"]
    assert other.groups == [["a", "c"], ["b", "d"]]


async def test_groups_stop_at_their_member_and_byte_caps() -> None:
    other = Other()
    calls = _coalescer(other, max_bytes=10)
    await asyncio.gather(*(calls.submit(c) for c in "abcdef"))
    assert other.groups == [["a", "b", "c", "d"], ["e", "f"]]
    other.groups.clear()
    await asyncio.gather(*(calls.submit(c) for c in ("xxxxxx", "yyyy", "zz")))
    assert other.groups == [["xxxxxx", "yyyy"]]  # "zz" passes the cap: it went alone
    assert await calls.submit("w" * 11) == "W" * 11  # larger than a group: alone at once
    assert other.alone == ["zz", "w" * 11]


async def test_a_call_made_while_a_group_is_out_starts_the_next_at_once() -> None:
    other = Other()
    other.release.clear()
    calls = _coalescer(other)
    first = asyncio.gather(calls.submit("a"), calls.submit("b"))
    await _turns(3)
    second = asyncio.gather(calls.submit("c"), calls.submit("d"))
    await _turns(3)
    assert other.groups == [["a", "b"], ["c", "d"]]
    other.release.set()
    assert await first + await second == ["A", "B", "C", "D"]


async def test_serial_keys_send_one_group_at_a_time() -> None:
    other = Other()
    other.release.clear()
    calls = _coalescer(other, serial=True)
    first = asyncio.gather(calls.submit("a", "s"), calls.submit("b", "s"))
    await _turns(3)
    later = [asyncio.create_task(calls.submit(c, "s")) for c in "cdefg"]
    await _turns(3)
    assert other.groups == [["a", "b"]]  # the rest wait for the group out
    other.release.set()
    assert await first == ["A", "B"]
    assert await asyncio.gather(*later) == ["C", "D", "E", "F", "G"]
    assert other.groups == [["a", "b"], ["c", "d", "e", "f"]]
    assert other.alone == ["g"]


async def test_a_member_cancelled_before_its_group_leaves_is_left_out() -> None:
    other = Other()
    calls = _coalescer(other)
    tasks = [asyncio.create_task(calls.submit(c)) for c in "abc"]
    await asyncio.sleep(0)
    tasks[1].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert other.groups == [["a", "c"]]
    assert isinstance(done[1], asyncio.CancelledError)


@pytest.mark.parametrize("serial", [False, True])
async def test_the_group_leaves_when_its_first_caller_is_cancelled(serial: bool) -> None:
    other = Other()
    calls = _coalescer(other, serial=serial)
    tasks = [asyncio.create_task(calls.submit(c, "k")) for c in "abc"]
    await asyncio.sleep(0)
    tasks[0].cancel()  # in its loop turn
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[0], asyncio.CancelledError)
    assert done[1:] == ["B", "C"]
    assert other.groups == [["b", "c"]]


@pytest.mark.parametrize("serial", [False, True])
async def test_the_one_left_after_a_cancellation_goes_alone(serial: bool) -> None:
    other = Other()
    calls = _coalescer(other, serial=serial)
    tasks = [asyncio.create_task(calls.submit(c, "k")) for c in "ab"]
    await asyncio.sleep(0)
    tasks[0].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert done[1] == "B"
    assert (other.groups, other.alone) == ([], ["b"])
    assert await calls.submit("c", "k") == "C"  # the key was freed


async def test_a_serial_caller_told_to_go_alone_and_cancelled_frees_its_key() -> None:
    other = Other()
    tasks: list[asyncio.Task[str]] = []

    async def send(group: list[Member[str, str]]) -> None:
        await other.send(group)
        if len(tasks) == 3:  # "c" waits for this group; it gives up just after it is
            asyncio.get_running_loop().call_soon(tasks[2].cancel)  # told to go alone

    calls: Coalescer[str, str] = Coalescer(send, other.send_alone, max_members=4, serial=True)
    other.release.clear()
    tasks += [asyncio.create_task(calls.submit(c, "k")) for c in "ab"]
    await _turns(3)
    assert other.groups == [["a", "b"]]  # out, not answered yet
    tasks.append(asyncio.create_task(calls.submit("c", "k")))
    await _turns(3)
    other.release.set()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert done[:2] == ["A", "B"]
    assert isinstance(done[2], asyncio.CancelledError)
    assert other.alone == []
    freed = calls.submit("d", "k")  # the key was freed (else this waits for ever)
    assert await asyncio.wait_for(freed, HANG_GUARD) == "D"


@pytest.mark.parametrize("serial", [False, True])
async def test_a_failed_send_gives_each_caller_its_own_error(serial: bool) -> None:
    other = Other()
    other.fail = TransientError("the connection dropped", operation="append")
    calls = _coalescer(other, serial=serial)
    errors = await asyncio.gather(*(calls.submit(c, "k") for c in "abc"), return_exceptions=True)
    assert all(isinstance(e, TransientError) for e in errors)
    assert len({id(e) for e in errors}) == 3  # three instances, one per caller
    assert all(e is not other.fail and e.__cause__ is other.fail for e in errors)
    assert [str(e) for e in errors] == [str(other.fail)] * 3


async def test_a_send_that_leaves_members_unsettled_sends_them_alone() -> None:
    async def nothing(group: list[Member[str, str]]) -> None:
        return None

    other = Other()
    calls: Coalescer[str, str] = Coalescer(nothing, other.send_alone, max_members=4)
    assert await asyncio.gather(*(calls.submit(c) for c in "ab")) == ["A", "B"]
    assert other.alone == ["a", "b"]
    assert ALONE is not None


# ----------------------------------------- the backend's session commits use it


async def test_session_commits_give_each_caller_of_a_failed_group_its_own_error() -> None:
    """Before the one coalescer, every caller of a failed group was given one shared
    exception instance (each raise added its traceback to it)."""
    broken = TransientError("the server closed the connection", operation="append")

    async def send(statements: list[str]) -> list[str]:
        await asyncio.sleep(0)
        if len(statements) > 1:
            raise broken
        return statements

    commits: SessionCommits[str, str] = SessionCommits(send)
    errors = await asyncio.gather(*(commits.run("s", c) for c in "abc"), return_exceptions=True)
    assert all(isinstance(e, TransientError) for e in errors)
    assert len({id(e) for e in errors}) == 3
    assert all(e is not broken for e in errors)


async def test_session_commits_keep_a_group_within_its_byte_cap() -> None:
    """Before the one coalescer, a group of a session's appends had no byte cap."""
    sent: list[list[str]] = []

    async def send(statements: list[str]) -> list[str]:
        sent.append(statements)
        await asyncio.sleep(0)
        return statements

    commits: SessionCommits[str, str] = SessionCommits(send)
    big = "x" * (MAX_GROUP_BYTES // 2)
    assert statement_bytes(big) == MAX_GROUP_BYTES // 2
    statements = [big, big, big + "y"]
    assert await asyncio.gather(*(commits.run("s", c) for c in statements)) == statements
    assert [len(g) for g in sent] == [2, 1]


def test_statement_bytes_counts_text_bytes_and_nested_parameters() -> None:
    """A statement's size counts its text, parameter names, text and bytes values, and the
    values inside nested lists (a search entry's bodies); other values count 8 each."""
    params: dict[str, object] = {
        "rid": "run",
        "payload": b"x" * 500,
        "n": 1,
        "ended": None,
        "bodies": ["ab", ["cde"]],
        "ratio": 0.5,
    }
    names = sum(len(name) for name in params)
    assert statement_bytes(("SELECT 1", params)) == 8 + names + 3 + 500 + 8 + 8 + 5 + 8
    assert statement_bytes([("a", {"k": b"zz"}), "tail", 3]) == 1 + 1 + 2 + 4 + 8
