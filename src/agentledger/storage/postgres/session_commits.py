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
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["MAX_GROUP", "SessionCommits"]

S = TypeVar("S")
A = TypeVar("A")

MAX_GROUP = 64
"""Most appends sharing one transaction: a bound on the latency a group adds."""


class SessionCommits(Generic[S, A]):
    """Sends statements ``S`` with ``send`` (one list per transaction, one answer ``A`` each),
    grouping those to one session that wait for the session's write in flight."""

    def __init__(self, send: Callable[[list[S]], Awaitable[list[A]]]) -> None:
        self._send = send
        self._waiting: dict[str, list[tuple[S, asyncio.Future[A]]]] = {}
        """Each session with a write in flight, and the statements waiting for it."""
        self._groups: set[asyncio.Task[None]] = set()

    async def run(self, session_id: str, statement: S) -> A:
        """``statement``'s answer, after the commit that stored it (or its error)."""
        future: asyncio.Future[A] = asyncio.get_running_loop().create_future()
        waiting = self._waiting.get(session_id)
        if waiting is not None:
            waiting.append((statement, future))
            return await future
        waiting = self._waiting[session_id] = [(statement, future)]
        try:
            await asyncio.sleep(0)  # one loop turn: the session's appends made meanwhile join
        except asyncio.CancelledError:
            future.cancel()
            self._next(session_id)
            raise
        if len(waiting) > 1:
            self._next(session_id)  # a group, this append first
            return await future
        self._waiting[session_id] = []
        try:
            return (await self._send([statement]))[0]
        finally:
            self._next(session_id)

    def _next(self, session_id: str) -> None:
        """The session's write ended: send what waited for it, as one group, or free it."""
        waiting = [item for item in self._waiting.pop(session_id) if not item[1].done()]
        if not waiting:
            return
        group, rest = waiting[:MAX_GROUP], waiting[MAX_GROUP:]
        self._waiting[session_id] = rest
        task = asyncio.create_task(self._run_group(session_id, group))
        self._groups.add(task)
        task.add_done_callback(self._groups.discard)

    async def _run_group(self, session_id: str, group: list[tuple[S, asyncio.Future[A]]]) -> None:
        try:
            answers = await self._send([statement for statement, _ in group])
        except asyncio.CancelledError:
            for _, future in group:
                future.cancel()
            raise
        except Exception as error:
            for _, future in group:
                if not future.done():  # a caller that gave up is not answered
                    future.set_exception(error)
        else:
            for (_, future), answer in zip(group, answers, strict=True):
                if not future.done():
                    future.set_result(answer)
        finally:
            self._next(session_id)
