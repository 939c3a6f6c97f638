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

The grouping is :class:`agentledger.storage.coalescer.Coalescer`'s, one key per
session, one group out at a time; a group holds at most :data:`MAX_GROUP`
statements and :data:`MAX_GROUP_BYTES` of them. A group that fails gives each
of its callers its own copy of the error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from agentledger.storage.coalescer import Coalescer, Member

__all__ = ["MAX_GROUP", "MAX_GROUP_BYTES", "SessionCommits", "statement_bytes"]

S = TypeVar("S")
A = TypeVar("A")

MAX_GROUP = 64
"""Most appends sharing one transaction: a bound on the latency a group adds."""
MAX_GROUP_BYTES = 8 * 1024 * 1024
"""Most statement bytes in one transaction (a larger statement goes in a group of its own)."""


def statement_bytes(statement: object) -> int:
    """About how many bytes a statement sends: its text and parameters, counted through."""
    if isinstance(statement, str | bytes | bytearray | memoryview):
        return len(statement)
    if isinstance(statement, dict):
        return sum(statement_bytes(k) + statement_bytes(v) for k, v in statement.items())
    if isinstance(statement, list | tuple):
        return sum(statement_bytes(item) for item in statement)
    return 8  # a number, a time, None


class SessionCommits(Generic[S, A]):
    """Sends statements ``S`` with ``send`` (one list per transaction, one answer ``A`` each),
    grouping those to one session that wait for the session's write in flight."""

    def __init__(self, send: Callable[[list[S]], Awaitable[list[A]]]) -> None:
        self._send = send
        self._commits: Coalescer[S, A] = Coalescer(
            self._send_group,
            self._send_alone,
            max_members=MAX_GROUP,
            max_bytes=MAX_GROUP_BYTES,
            size=statement_bytes,
            serial=True,
        )

    async def run(self, session_id: str, statement: S) -> A:
        """``statement``'s answer, after the commit that stored it (or its error)."""
        return await self._commits.submit(statement, session_id)

    async def _send_alone(self, statement: S) -> A:
        return (await self._send([statement]))[0]

    async def _send_group(self, group: list[Member[S, A]]) -> None:
        answers = await self._send([member.item for member in group])
        for member, answer in zip(group, answers, strict=True):
            if not member.answer.done():  # a caller that gave up is not answered
                member.answer.set_result(answer)
