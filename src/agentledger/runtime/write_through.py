"""Store writes that run to their end even if the activity awaiting them is canceled.

An activity interrupted mid-write must not leave records the loop does not know
about (:func:`finish`) nor skip publishing what the store holds (:func:`before`):
the write goes on a task of its own and the activity waits for it either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Generic, TypeVar, cast

__all__ = ["before", "finish"]

T = TypeVar("T")


class _Apart(Generic[T]):
    """A store write on a task of its own, which sets ``ended`` as the write ends.

    Awaiting ``ended`` wakes the activity in the loop turn after the write's last
    (``asyncio.shield`` takes one more), and a cancellation of the activity cancels
    ``ended``, not the write.
    """

    __slots__ = ("_error", "_result", "ended", "task")

    def __init__(self, write: Awaitable[T]) -> None:
        loop = asyncio.get_running_loop()
        self.ended: asyncio.Future[None] = loop.create_future()
        self._result: T | None = None
        self._error: BaseException | None = None
        self.task = loop.create_task(self._run(write))

    async def _run(self, write: Awaitable[T]) -> None:
        try:
            self._result = await write
        except (Exception, asyncio.CancelledError) as e:  # the activity raises it
            self._error = e
        if not self.ended.done():
            self.ended.set_result(None)

    def outcome(self) -> T:
        """The write's result, or its error raised."""
        if self._error is not None:
            raise self._error
        return cast(T, self._result)


async def before(write: Awaitable[T]) -> T:
    """Await a store write to its end even if the activity is canceled meanwhile, then
    let the cancellation through: the work meant to follow it is not done.

    The write's records and their events are out either way, so nothing the
    store holds is left unpublished by an interrupted turn.
    """
    apart = _Apart(write)
    try:
        await apart.ended
    except asyncio.CancelledError:
        await asyncio.wait([apart.task])  # its error, if any, gives way to the cancellation
        raise
    return apart.outcome()


async def finish(write: Awaitable[T]) -> T:
    """Await a store write to its end even if the activity is canceled meanwhile.

    The work it records is done: the activity then completes with its result
    (the loop learns what was recorded) instead of leaving records the loop
    does not know about.
    """
    apart = _Apart(write)
    try:
        await apart.ended
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None:
            current.uncancel()
        await apart.task
    return apart.outcome()
