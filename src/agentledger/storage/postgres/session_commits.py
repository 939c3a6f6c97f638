"""Appends to one session that meet in one handle commit together.

An append to a run of a session locks the session's row until it commits, so
that its records take the next positions in the session's log in commit
order. Two appends to one session therefore wait for each other's commit,
fsync included, and parallel runs of one session (a parent and its children)
would take turns. Within one handle (one process's store, or one ``serve``)
they need not: the first append to a session waits one turn of the event loop,
and the appends to that session made meanwhile go with it, as do those arriving
while a write of the session is in flight, once it ends: together, as the
statements of one transaction, in one round trip, answered after its one
COMMIT. An append with nobody beside it is sent alone, as one statement. Each
statement still checks everything it checks alone; one that finds the state
changed writes nothing, and only its caller decides again. Nobody hears an
answer before the commit that stores it.

One handle also has at most one transaction of a session out at a time: a
locking write of the session (:meth:`SessionCommits.alone`) and the session's
groups take turns in one first-come line. Two transactions of one session on two
connections would commit in the database's order but be answered in whatever
order the event loop reads their connections, so a caller that publishes what it
wrote "as soon as the store answered" could overtake an earlier commit; with one
out at a time, each answer reaches its caller before the next transaction of the
session is even sent, and answers come in commit order.

The grouping is :class:`agentledger.storage.coalescer.Coalescer`'s, one key per
session, one group out at a time; a group holds at most :data:`MAX_GROUP`
statements and :data:`MAX_GROUP_BYTES` of them. A group that fails gives each
of its callers its own copy of the error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from agentledger.storage.coalescer import Coalescer, Member

__all__ = ["MAX_GROUP", "MAX_GROUP_BYTES", "SessionCommits", "statement_bytes"]

S = TypeVar("S")
A = TypeVar("A")
T = TypeVar("T")

MAX_GROUP = 64
"""Most appends sharing one transaction: a bound on the latency a group adds."""
MAX_GROUP_BYTES = 8 * 1024 * 1024
"""Most statement bytes in one transaction (a larger statement goes in a group of its own)."""


_SIZED = (str, bytes, bytearray, memoryview)


def statement_bytes(statement: object) -> int:
    """About how many bytes a statement sends: its text and parameters, counted through.

    Counted on every append, so without recursion: a text or bytes counts its length,
    anything else that is not a container 8 (a number, a time, None).
    """
    total = 0
    todo = [statement]
    while todo:
        item = todo.pop()
        if isinstance(item, _SIZED):
            total += len(item)
        elif isinstance(item, dict):
            for value in (*item, *item.values()):  # a statement's names and parameters
                kind = type(value)
                if kind is str or kind is bytes:
                    total += len(value)
                elif value is None or kind is int:
                    total += 8
                else:
                    todo.append(value)
        elif isinstance(item, list | tuple):
            todo.extend(item)
        else:
            total += 8  # a number, a time, None
    return total


class SessionCommits(Generic[S, A]):
    """Sends statements ``S`` with ``send`` (one list per transaction, one answer ``A`` each),
    grouping those to one session that wait for the session's write in flight; runs a
    session's other transactions (:meth:`alone`) in the same line."""

    def __init__(self, send: Callable[[list[S]], Awaitable[list[A]]]) -> None:
        self._send = send
        self._commits: Coalescer[tuple[str, S], A] = Coalescer(
            self._send_group,
            self._send_alone,
            max_members=MAX_GROUP,
            max_bytes=MAX_GROUP_BYTES,
            size=lambda item: statement_bytes(item[1]),
            serial=True,
        )
        self._lines: dict[str, tuple[asyncio.Lock, int]] = {}
        """Each session with a transaction out or waiting: its line and how many are in it."""

    async def run(self, session_id: str, statement: S) -> A:
        """``statement``'s answer, after the commit that stored it (or its error)."""
        return await self._commits.submit((session_id, statement), session_id)

    async def alone(self, session_id: str, transaction: Callable[[], Awaitable[T]]) -> T:
        """``transaction()``'s result, run when no other transaction of the session from
        this handle is out, and before any that comes after it is sent."""
        line, users = self._lines.get(session_id) or (asyncio.Lock(), 0)
        self._lines[session_id] = (line, users + 1)
        try:
            async with line:
                return await transaction()
        finally:
            line, users = self._lines[session_id]
            if users == 1:
                del self._lines[session_id]
            else:
                self._lines[session_id] = (line, users - 1)

    def in_line(self, session_id: str) -> int:
        """How many transactions of the session this handle has out or waiting in its line."""
        entry = self._lines.get(session_id)
        return 0 if entry is None else entry[1]

    async def _send_alone(self, item: tuple[str, S]) -> A:
        session_id, statement = item
        return (await self.alone(session_id, lambda: self._send([statement])))[0]

    async def _send_group(self, group: list[Member[tuple[str, S], A]]) -> None:
        async def send() -> None:  # answered in the line, before the next goes out
            answers = await self._send([member.item[1] for member in group])
            for member, answer in zip(group, answers, strict=True):
                if not member.answer.done():  # a caller that gave up is not answered
                    member.answer.set_result(answer)

        await self.alone(group[0].item[0], send)
