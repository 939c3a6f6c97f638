"""Calls made at the same moment, sent together: one coalescer for every micro-batch.

The first caller of a moment waits one turn of the event loop; calls made
meanwhile join it; a detached task sends them as one group, so no member's
cancellation stops a group once it has left. A call with nobody beside it is
sent alone, by its own caller. Each member hears its own answer, or its own
error: a group whose send fails gives each member a fresh copy of the error
(an exception instance raised in several tasks would collect their
tracebacks), chained to the one the send raised.

A group holds at most ``max_members`` calls and ``max_bytes`` of them (a call
larger than that goes alone). Calls are grouped by ``key``; with ``serial``,
a key's groups go one at a time (the calls made while one is out form the
next, sent when it ends: what appends to one locked session row need),
otherwise a call made once a group has left starts the next at once.

Used by the store client (:mod:`agentledger.service.call_batches`) and the
PostgreSQL backend (:mod:`agentledger.storage.postgres.session_commits`).
"""

from __future__ import annotations

import asyncio
import copy
import enum
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["ALONE", "Coalescer", "Member"]

T = TypeVar("T")
R = TypeVar("R")


class _Alone(enum.Enum):
    ALONE = "alone"


ALONE = _Alone.ALONE
"""A member's answer telling its caller to send its call alone after all."""


class Member(Generic[T, R]):
    """One call of a group: the ``item`` to send, its size, and its answer to come.

    A group's send settles ``answer`` with the call's result, its error, or
    :data:`ALONE` (the call is to be sent alone by its caller).
    """

    __slots__ = ("answer", "item", "size")

    def __init__(self, item: T, size: int, answer: asyncio.Future[R | _Alone]) -> None:
        self.item = item
        self.size = size
        self.answer = answer


SendGroup = Callable[[list[Member[T, R]]], Awaitable[None]]
"""Sends a group and settles each member's ``answer`` (left unsettled: see :class:`Coalescer`)."""


class _Forming(Generic[T, R]):
    """The members of one key waiting to be sent, and their bytes."""

    __slots__ = ("bytes", "members")

    def __init__(self, first: Member[T, R]) -> None:
        self.members = [first]
        self.bytes = first.size


def fresh(error: BaseException) -> BaseException:
    """A copy of ``error`` for one caller, chained to it."""
    try:
        copied = copy.copy(error)
    except Exception:  # an exception that cannot be copied: each caller hears why
        copied = RuntimeError(f"a grouped call failed: {error!r}")
    copied.__cause__ = error
    copied.__traceback__ = None
    return copied


class Coalescer(Generic[T, R]):
    """Groups the calls made at the same moment; ``send`` sends each group of two or more,
    ``alone`` a call sent alone (in its caller's task).

    A member a group's send leaves unsettled goes alone (with ``serial``, where its key
    is taken by the next group, it fails instead: a serial send must answer every member).
    """

    def __init__(
        self,
        send: SendGroup[T, R],
        alone: Callable[[T], Awaitable[R]],
        *,
        max_members: int,
        max_bytes: int | None = None,
        size: Callable[[T], int] | None = None,
        serial: bool = False,
    ) -> None:
        self._send = send
        self._alone = alone
        self._max_members = max_members
        self._max_bytes = max_bytes
        self._size = size
        self._serial = serial
        self._forming: dict[Hashable, _Forming[T, R]] = {}
        """Each key's members waiting to leave (with ``serial``: each key with a send out)."""
        self._sending: set[asyncio.Task[None]] = set()

    async def submit(self, item: T, key: Hashable = None) -> R:
        """``item``'s answer: sent in a group of the calls made at the same moment (to
        ``key``), or alone."""
        size = self._size(item) if self._size is not None else 0
        if not self._serial and self._max_bytes is not None and size > self._max_bytes:
            return await self._alone(item)
        member: Member[T, R] = Member(item, size, asyncio.get_running_loop().create_future())
        forming = self._forming.get(key)
        if forming is not None and (self._serial or self._fits(forming, member)):
            forming.members.append(member)
            forming.bytes += size
            return await self._outcome(member, key)
        forming = self._forming[key] = _Forming(member)
        try:
            await asyncio.sleep(0)  # one loop turn: the calls made meanwhile join
        except asyncio.CancelledError:
            member.answer.cancel()
            self._next(key, forming)
            raise
        if self._serial:
            group = self._take(forming)
        else:
            if self._forming.get(key) is forming:
                del self._forming[key]  # it leaves: later calls form the next group
            group = [m for m in forming.members if not m.answer.done()]
        if group == [member]:
            return await self._send_alone(member, key)
        self._start(group, key)
        return await self._outcome(member, key)

    def _fits(self, forming: _Forming[T, R], member: Member[T, R]) -> bool:
        if len(forming.members) >= self._max_members:
            return False
        return self._max_bytes is None or forming.bytes + member.size <= self._max_bytes

    def _take(self, forming: _Forming[T, R]) -> list[Member[T, R]]:
        """The next group of a serial key's waiting members (those still waiting), within
        the caps and never empty unless none waits; the rest stay."""
        waiting = [m for m in forming.members if not m.answer.done()]
        count, size = 0, 0
        for m in waiting:
            if count and (
                count >= self._max_members
                or (self._max_bytes is not None and size + m.size > self._max_bytes)
            ):
                break
            count, size = count + 1, size + m.size
        forming.members = waiting[count:]
        forming.bytes = sum(m.size for m in forming.members)
        return waiting[:count]

    def _next(self, key: Hashable, forming: _Forming[T, R]) -> None:
        """What is left to send after a leader was cancelled in its turn, or (serial)
        after the key's send ended: the next group leaves, or the key is free."""
        if self._serial:
            group = self._take(forming)
            if not group and self._forming.get(key) is forming:
                del self._forming[key]
        else:
            if self._forming.get(key) is forming:
                del self._forming[key]
            group = [m for m in forming.members if not m.answer.done()]
        self._start(group, key)

    def _start(self, group: list[Member[T, R]], key: Hashable) -> None:
        """Send ``group`` in its own task, so no member's cancellation stops it; a group
        of one is told to go alone (its caller sends it)."""
        if len(group) == 1:
            group[0].answer.set_result(ALONE)
        elif group:
            task = asyncio.get_running_loop().create_task(self._send_group(group, key))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send_group(self, group: list[Member[T, R]], key: Hashable) -> None:
        try:
            await self._send(group)
        except asyncio.CancelledError:
            for m in group:
                m.answer.cancel()
            raise
        except Exception as error:
            for m in group:
                if not m.answer.done():  # a caller that gave up is not answered
                    m.answer.set_exception(fresh(error))
        finally:
            for m in group:
                if m.answer.done():
                    continue
                if self._serial:
                    m.answer.set_exception(RuntimeError("a grouped call was left unanswered"))
                else:
                    m.answer.set_result(ALONE)
            if self._serial:
                self._release(key)

    async def _outcome(self, member: Member[T, R], key: Hashable) -> R:
        """The member's answer once its group is answered; sent alone if so told."""
        try:
            answer = await member.answer
        except asyncio.CancelledError:
            told = member.answer.done() and not member.answer.cancelled()
            if told and member.answer.exception() is None and member.answer.result() is ALONE:
                self._release(key)  # it was to send alone, holding the key: free it
            raise
        if answer is ALONE:
            return await self._send_alone(member, key)
        return answer

    async def _send_alone(self, member: Member[T, R], key: Hashable) -> R:
        try:
            return await self._alone(member.item)
        finally:
            self._release(key)

    def _release(self, key: Hashable) -> None:
        """A serial key's send ended: the next group leaves, or the key is free."""
        if not self._serial:
            return
        forming = self._forming.get(key)
        if forming is not None:
            self._next(key, forming)
