"""Live follow: a run's or a session's records as server-sent events, as they commit [S5].

Each event is one record; its ``id`` is a follow cursor naming the position
just after that record, so a client that reconnects with it (``?after=`` or
``Last-Event-ID``) gets exactly the records it has not seen: no gap, no
duplicate. A follow cursor is a page cursor the store issued, optionally
followed by ``.N``: skip the first N records of that page (the store issues
no cursor for the end of a log, so the tail is reached from the last page).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

import msgspec

from agentledger.errors import ValidationError
from agentledger.storage.types import Page, Record

__all__ = ["FOLLOW_PAGE", "Notifier", "follow", "parse_after"]

FOLLOW_PAGE = 100
"""Records read from the store per page while following."""

HEARTBEAT = 1.0
"""Seconds between polls of the store when nothing was written through this service (on
average: each follower's wait is drawn from 0.5-1.5 times it, so a thousand followers do
not all read the store in the same instant)."""

ListPage = Callable[..., Awaitable[Page]]


class Notifier:
    """Wakes followers when a write through this service has committed.

    A follower waits on its log's key (``run:<id>`` or ``session:<id>``) and is
    woken by the writes that name it, or by any write whose logs are not named;
    an unkeyed waiter (the inspector's change feed) is woken by every write. So an
    append wakes the followers of its run and its session, not every follower.
    Writes through another replica are found by polling every :data:`HEARTBEAT`.
    """

    def __init__(self) -> None:
        self._any = asyncio.Event()
        self._keyed: dict[str, tuple[asyncio.Event, int]] = {}  # key -> (event, waiters)

    def notify(self, keys: Iterable[str] | None = None) -> None:
        """Wake the followers of ``keys`` (of every log when None) and every unkeyed waiter."""
        event, self._any = self._any, asyncio.Event()
        event.set()
        if keys is None:
            keyed, self._keyed = self._keyed, {}
            for woken, _ in keyed.values():
                woken.set()
            return
        for key in keys:
            found = self._keyed.pop(key, None)
            if found is not None:
                found[0].set()

    async def wait(self, seconds: float, key: str = "") -> None:
        """Wait for the next write (of ``key``'s log, if given), or ``seconds``."""
        if not key:
            event = self._any
        else:
            event, waiters = self._keyed.get(key, (asyncio.Event(), 0))
            self._keyed[key] = (event, waiters + 1)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await event.wait()
        finally:
            if key and (entry := self._keyed.get(key)) is not None and entry[0] is event:
                if entry[1] > 1:
                    self._keyed[key] = (event, entry[1] - 1)
                else:
                    del self._keyed[key]  # nobody follows it now


def parse_after(after: str) -> tuple[str, int]:
    """A follow cursor as (page cursor, records to skip on that page).

    Raises:
        ValidationError: the skip count is not a number.
    """
    cursor, dot, skip = after.rpartition(".")
    if not dot:
        return after, 0
    if not skip.isdigit() or len(skip) > 9:
        raise ValidationError(field="after", expected="a follow cursor", got=after)
    return cursor, int(skip)


def _format(cursor: str, skip: int) -> str:
    return f"{cursor}.{skip}" if skip else cursor


_ENCODER = msgspec.json.Encoder()


def _event(record: Record, position: str) -> bytes:
    return b"id: %s\nevent: record\ndata: %s\n\n" % (position.encode(), _ENCODER.encode(record))


async def follow(
    list_page: ListPage,
    scope_id: str,
    after: str,
    *,
    notifier: Notifier,
    stopping: Callable[[], bool],
    key: str = "",
) -> AsyncIterator[bytes]:
    """The SSE stream of a log from ``after``; the first page is read before it starts.

    ``key`` names the log to the notifier (``run:<id>`` or ``session:<id>``), so only
    writes to it (or writes that name no log) wake this follower.

    Reading the first page up front makes an unknown run or a bad cursor an
    ordinary error answer instead of a broken stream.
    """
    cursor, skip = parse_after(after)
    page = await list_page(scope_id, cursor=cursor, limit=FOLLOW_PAGE)
    if skip > len(page.records):
        raise ValidationError(
            field="after", expected="a follow cursor this service issued", got=after
        )

    async def stream(page: Page, cursor: str, skip: int) -> AsyncIterator[bytes]:
        yield b": following\n\n"
        while not stopping():
            records = page.records
            for i in range(skip, len(records)):
                last = i + 1 == len(records)
                position = page.next_cursor if last and page.next_cursor else _format(cursor, i + 1)
                yield _event(records[i], position)
            if page.next_cursor:
                cursor, skip = page.next_cursor, 0
            else:
                skip = len(records)
                await notifier.wait(HEARTBEAT * random.uniform(0.5, 1.5), key)
                if stopping():
                    return
                yield b": heartbeat\n\n"
            page = await list_page(scope_id, cursor=cursor, limit=FOLLOW_PAGE)

    return stream(page, cursor, skip)
