"""Live follow: a run's or a session's records as server-sent events, as they commit [S5].

Each event is one record; its ``id`` is a follow cursor naming the position
just after that record, so a client that reconnects with it (``?after=`` or
``Last-Event-ID``) gets exactly the records it has not seen: no gap, no
duplicate. A follow cursor is a page cursor the store issued, optionally
followed by ``.N``: skip the first N records of that page (the store issues
no cursor for the end of a log, so the tail is reached from the last page).

A follower reads the log's pages itself until it reaches the end, then joins
the log's *feed*: one reader per followed log that reads each new tail once,
encodes each record once and hands the same bytes to every follower of that
log. A follower that cannot keep up (its client reads slower than the log
grows) is cut loose once :data:`BACKLOG` events wait for it: it drops them,
reads the pages from its own position again at its client's pace, and rejoins
the feed at the end. So a slow follower neither stalls the others nor holds
more than a bounded backlog.

The backlogs of every stream together are bounded too: past the service's
:class:`BacklogBudget` the stream holding the largest backlog (the slowest) is
cut loose the same way, and the cut counted by its reason (``backlog_budget``;
``stream_backlog`` for one stream past its own limit).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from agentledger.errors import ValidationError
from agentledger.service.json_times import encode_json
from agentledger.storage.types import Page, Record

__all__ = [
    "BACKLOG",
    "BACKLOG_BUDGET",
    "FOLLOW_PAGE",
    "KEEPALIVE",
    "BacklogBudget",
    "Notifier",
    "follow",
    "parse_after",
]

FOLLOW_PAGE = 100
"""Records read from the store per page while following."""

HEARTBEAT = 1.0
"""Seconds between polls of a followed log for writes through other replicas (a stream
without a key waits 0.5-1.5 times it). Writes through this service wake the log's feed at
once; polls only find the others'."""

POLL_RATE = 200
"""Most polls of followed logs a service makes per second: with more than this many logs
followed, each is polled less often than every :data:`HEARTBEAT` (1,000 logs: every 5 s),
so the polls' cost stays bounded however many logs are followed. Polls read one at a
time, and a log read within its period (a write through this service woke its feed) is
not polled, so on a busy service they take less, never a burst of the store's reads
ahead of those a write woke."""

_POLL_TICK = 0.05
"""Seconds between the poller's rounds, each polling its share of the feeds."""

KEEPALIVE = 15.0
"""Seconds of silence after which a follow stream sends a comment line, so proxies keep
it open and a client that went away is noticed."""

BACKLOG = 1000
"""Events that may wait for one follower before it is cut loose to read on its own."""

BACKLOG_BYTES = 16 * 1024 * 1024
"""Bytes that may wait for one follower before it is cut loose likewise."""

BACKLOG_BUDGET = 256 * 1024 * 1024
"""Bytes that may wait for all the followers of one service together, by default."""

_JOIN_ATTEMPTS = 3
"""Times a follower tries to meet its log's feed at the same position before it reads on
its own until its next try (the log kept growing between the two reads of each attempt)."""

ListPage = Callable[..., Awaitable[Page]]
Position = tuple[str, int]  # (page cursor, records of that page already sent)


class BacklogBudget:
    """The bytes waiting for every follower of one service, bounded: past ``limit`` the
    follower holding the most is cut loose (its backlog dropped; it reads on alone).

    ``on_cut`` is told each cut's reason: ``backlog_budget`` (this budget) or
    ``stream_backlog`` (one stream past :data:`BACKLOG` events or :data:`BACKLOG_BYTES`).
    """

    def __init__(
        self, limit: int = BACKLOG_BUDGET, on_cut: Callable[[str], None] | None = None
    ) -> None:
        self.limit = limit
        self.held = 0
        """Bytes queued for followers now."""
        self.on_cut = on_cut
        self._holding: set[_Follower] = set()  # followers with a backlog

    def add(self, follower: _Follower, size: int) -> None:
        """Count ``size`` more bytes queued for ``follower``; cut the slowest while past."""
        self.held += size
        self._holding.add(follower)
        while self.held > self.limit and self._holding:
            slowest = max(self._holding, key=lambda f: f.queued_bytes)
            slowest.cut_loose("backlog_budget")

    def release(self, follower: _Follower) -> None:
        """``follower``'s backlog was sent or dropped."""
        if follower.queued_bytes:
            self.held -= follower.queued_bytes
            self._holding.discard(follower)

    def cut(self, reason: str) -> None:
        if self.on_cut is not None:
            self.on_cut(reason)


class _Follower:
    """One stream's mailbox at its log's feed: encoded events waiting to be sent."""

    __slots__ = ("budget", "cut", "error", "events", "queued_bytes", "ready")

    def __init__(self, budget: BacklogBudget) -> None:
        self.budget = budget
        self.events: deque[tuple[bytes, Position]] = deque()
        self.queued_bytes = 0
        self.ready = asyncio.Event()
        self.cut = ""
        """Why the feed dropped this follower's backlog ("": it did not): it must read on
        from its own position."""
        self.error: Exception | None = None

    def push(self, events: list[tuple[bytes, Position]], size: int) -> bool:
        """Queue ``events``; False (and cut loose, backlog dropped) past the backlog limits,
        this stream's or the service's, or once cut loose."""
        if self.cut:
            return False
        if len(self.events) + len(events) > BACKLOG or self.queued_bytes + size > BACKLOG_BYTES:
            self.cut_loose("stream_backlog")
            return False
        self.events.extend(events)
        self.queued_bytes += size
        self.ready.set()
        self.budget.add(self, size)  # may cut this one, or a slower one
        return not self.cut

    def cut_loose(self, reason: str) -> None:
        """Drop the backlog: the stream reads on from its last event sent."""
        self.drop()
        self.cut = reason
        self.ready.set()
        self.budget.cut(reason)

    def drop(self) -> None:
        """Forget every queued event."""
        self.budget.release(self)
        self.events.clear()
        self.queued_bytes = 0

    def take(self) -> tuple[bytes, Position]:
        """Every queued event as one chunk, and the position after the last of them."""
        events = self.events
        chunk = events[0][0] if len(events) == 1 else b"".join(e for e, _ in events)
        position = events[-1][1]
        self.drop()
        return chunk, position


class _Feed:
    """The one reader of a followed log: reads each new tail once, fans it out encoded.

    Reads of the tail and joins are serialized by ``lock``, so a follower joins at
    exactly the feed's position: it gets what it lacks from its own reads and
    everything later from the feed.
    """

    def __init__(self, notifier: Notifier, key: str, list_page: ListPage, scope_id: str) -> None:
        self.notifier = notifier
        self.key = key
        self.list_page = list_page
        self.scope_id = scope_id
        self.position: Position | None = None
        self.last: Record | None = None
        """The record just before ``position`` (None: not known)."""
        self.followers: set[_Follower] = set()
        self.lock = asyncio.Lock()
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.dropped = False
        """Nobody followed it, or its log could not be read: the notifier forgot it."""
        self.read_at = -math.inf
        """When (the event loop's clock) the feed last read its log's tail."""

    async def join(
        self, follower: _Follower, position: Position, last: Record | None
    ) -> tuple[Position, Record | None] | None:
        """Attach ``follower``, at ``position`` (the end of the log it read, just after
        ``last``), to the feed.

        The two meet where they stand at the same place in the log: the same cursor, or
        the same last record (records are only appended, so two reads that end with the
        same record end at the same place, whatever their cursors). Else the feed reads
        to the end, then the follower (its events queued), and they compare again.
        Returns None once attached, else where the follower's reads got to (the log
        kept growing under every attempt): it reads on alone and tries again later.
        """
        async with self.lock:
            for _ in range(_JOIN_ATTEMPTS):
                if self.dropped:  # ended while this follower waited for it: join the next
                    break
                if self.position is None:
                    self.position, self.last = position, last
                if position == self.position or (last is not None and last == self.last):
                    self.followers.add(follower)
                    if self.task is None:
                        self.task = asyncio.create_task(self._run())
                    return None
                await self._advance()
                position, reached = await _read_to_end(
                    self.list_page, self.scope_id, position, follower.push
                )
                last = reached or last
                if follower.cut:
                    break
            return position, last

    def leave(self, follower: _Follower) -> None:
        """Detach ``follower`` (what it had queued is dropped); a feed nobody follows ends."""
        follower.drop()
        self.followers.discard(follower)
        if not self.followers:
            self.notifier.drop(self)
            self.wake.set()

    async def _run(self) -> None:
        try:
            while self.followers:
                await self.wake.wait()  # a write, or the poller
                self.wake.clear()
                if not self.followers:
                    break
                async with self.lock:
                    await self._advance()
        except Exception as e:  # the log cannot be read: each stream ends with the error
            self.notifier.drop(self)
            for follower in self.followers:
                follower.error = e
                follower.ready.set()
            self.followers.clear()

    async def poll(self) -> None:
        """Read the log's tail now (for writes through other replicas), unless the feed has
        ended or has not started; a failed read wakes the feed, which ends its streams."""
        if self.dropped or self.position is None or self.task is None:
            return
        try:
            async with self.lock:
                if not self.dropped:
                    await self._advance()
        except Exception:
            self.wake.set()  # the feed reads again, and ends each stream with the error

    async def _advance(self) -> None:
        """Read from the feed's position to the end; every attached follower gets it all."""
        assert self.position is not None
        self.read_at = asyncio.get_running_loop().time()

        def fan_out(events: list[tuple[bytes, Position]], size: int) -> bool:
            for follower in list(self.followers):
                if not follower.push(events, size):
                    self.followers.discard(follower)  # cut loose: it reads on alone
            return True

        self.position, last = await _read_to_end(
            self.list_page, self.scope_id, self.position, fan_out
        )
        self.last = last or self.last


class Notifier:
    """Wakes followers when a write through this service has committed.

    A follower waits on its log's key (``run:<id>`` or ``session:<id>``) and is
    woken by the writes that name it, or by any write whose logs are not named;
    an unkeyed waiter (the inspector's change feed) is woken by every write. So an
    append wakes the feed of its run and of its session, not every follower.
    Writes through another replica are found by polling each followed log every
    :data:`HEARTBEAT`, at most :data:`POLL_RATE` logs a second.
    """

    def __init__(self, budget: BacklogBudget | None = None) -> None:
        self.budget = BacklogBudget() if budget is None else budget
        """What every follower's backlog together may hold."""
        self._any = asyncio.Event()
        self._unkeyed = 0  # waiters on _any
        self._keyed: dict[str, tuple[asyncio.Event, int]] = {}  # key -> (event, waiters)
        self._feeds: dict[str, dict[ListPage, _Feed]] = {}  # key -> reader -> feed
        self._poller: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> bool:
        """Whether anyone waits to be woken: if not, :meth:`notify` would do nothing."""
        return bool(self._unkeyed or self._keyed or self._feeds)

    def notify(self, keys: Iterable[str] | None = None) -> None:
        """Wake the followers of ``keys`` (of every log when None) and every unkeyed waiter."""
        if self._unkeyed:  # else nobody waits on it: keep it (a new Event costs per write)
            event, self._any = self._any, asyncio.Event()
            event.set()
        if keys is None:
            keyed, self._keyed = self._keyed, {}
            for woken, _ in keyed.values():
                woken.set()
            for every in self._feeds.values():
                for feed in every.values():
                    feed.wake.set()
            return
        for key in keys:
            found = self._keyed.pop(key, None)
            if found is not None:
                found[0].set()
            feeds = self._feeds.get(key)
            if feeds is not None:
                for feed in feeds.values():
                    feed.wake.set()

    def stop(self) -> None:
        """Wake every follower and waiter, so each stream sees the service stopping."""
        self.notify()
        for feeds in self._feeds.values():
            for feed in feeds.values():
                for follower in feed.followers:
                    follower.ready.set()

    async def wait(self, seconds: float, key: str = "") -> None:
        """Wait for the next write (of ``key``'s log, if given), or ``seconds``."""
        if not key:
            event = self._any
            self._unkeyed += 1
        else:
            event, waiters = self._keyed.get(key, (asyncio.Event(), 0))
            self._keyed[key] = (event, waiters + 1)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await event.wait()
        finally:
            if not key:
                self._unkeyed -= 1
            elif (entry := self._keyed.get(key)) is not None and entry[0] is event:
                if entry[1] > 1:
                    self._keyed[key] = (event, entry[1] - 1)
                else:
                    del self._keyed[key]  # nobody follows it now

    def feed(self, key: str, list_page: ListPage, scope_id: str) -> _Feed:
        """The feed of the log ``key`` names read through ``list_page`` (made if none)."""
        feeds = self._feeds.setdefault(key, {})
        found = feeds.get(list_page)
        if found is None:
            found = feeds[list_page] = _Feed(self, key, list_page, scope_id)
            if self._poller is None or self._poller.done():
                self._poller = asyncio.create_task(self._poll())
        return found

    async def _poll(self) -> None:
        """Poll every feed once per :data:`HEARTBEAT` (or more slowly, past
        :data:`POLL_RATE` feeds), a share of them each tick, while any feed lives.

        The polls read one after the other, never together, and a tick's share is followed
        by a pause at least as long as its reads took: polls take at most half of the
        loop's turns, and fewer as the store slows. A feed read within its period (a
        write through this service woke it) is not polled: it is fresh."""
        clock = asyncio.get_running_loop().time
        while self._feeds:
            feeds = [feed for every in self._feeds.values() for feed in every.values()]
            period = max(HEARTBEAT, len(feeds) / POLL_RATE)
            share = max(1, math.ceil(len(feeds) * _POLL_TICK / period))
            for i in range(0, len(feeds), share):
                started = clock()
                await asyncio.sleep(period * share / len(feeds))
                began = clock()
                for feed in feeds[i : i + share]:
                    if began - feed.read_at >= period:
                        await feed.poll()
                took = clock() - began
                if took > began - started:  # polls at most half the time: pause as long
                    await asyncio.sleep(took - (began - started))

    def drop(self, feed: _Feed) -> None:
        """Forget ``feed`` (nobody follows it, or its log cannot be read)."""
        feeds = self._feeds.get(feed.key)
        feed.dropped = True
        if feeds is not None and feeds.get(feed.list_page) is feed:
            del feeds[feed.list_page]
            if not feeds:
                del self._feeds[feed.key]

    def feeds(self) -> int:
        """How many logs have a feed now."""
        return sum(len(feeds) for feeds in self._feeds.values())


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


def _event(record: Record, position: str) -> bytes:
    return b"id: %s\nevent: record\ndata: %s\n\n" % (position.encode(), encode_json(record))


def _events(page: Page, cursor: str, skip: int) -> tuple[list[tuple[bytes, Position]], int]:
    """The encoded events of ``page`` past its first ``skip`` records, and their bytes."""
    records, events, size = page.records, [], 0
    for i in range(skip, len(records)):
        if i + 1 == len(records) and page.next_cursor:
            at: Position = (page.next_cursor, 0)
        else:
            at = (cursor, i + 1)
        event = _event(records[i], _format(*at))
        events.append((event, at))
        size += len(event)
    return events, size


async def _read_to_end(
    list_page: ListPage,
    scope_id: str,
    position: Position,
    deliver: Callable[[list[tuple[bytes, Position]], int], bool],
) -> tuple[Position, Record | None]:
    """Read from ``position`` to the log's end, handing each page's events to ``deliver``
    (False: stop); the position reached and the record just before it (None: no page
    held one)."""
    cursor, skip = position
    last: Record | None = None
    while True:
        page = await list_page(scope_id, cursor=cursor, limit=FOLLOW_PAGE)
        events, size = _events(page, cursor, skip)
        if events and not deliver(events, size):
            return events[-1][1], None
        last = page.records[-1] if page.records else last
        if not page.next_cursor:
            return (cursor, len(page.records)), last
        cursor, skip = page.next_cursor, 0


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

    ``key`` names the log to the notifier (``run:<id>`` or ``session:<id>``): the
    stream shares that log's feed, woken only by writes to it (or writes that
    name no log). Without a key the stream reads alone, woken by every write.

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
        last: Record | None = None  # the last record sent (None: not known)
        while not stopping():
            events, _ = _events(page, cursor, skip)
            if events:
                yield b"".join(e for e, _ in events)
            last = page.records[-1] if page.records else last
            if page.next_cursor:  # more pages: read on
                cursor, skip = page.next_cursor, 0
                page = await list_page(scope_id, cursor=cursor, limit=FOLLOW_PAGE)
                continue
            position: Position = (cursor, len(page.records))
            wait = True
            if key:  # at the end: the log's feed sends the rest, unless this stream lags
                feed = notifier.feed(key, list_page, scope_id)
                follower = _Follower(notifier.budget)
                missed = await feed.join(follower, position, last)
                try:
                    while True:
                        if follower.events:  # those the join read, then the feed's
                            chunk, position = follower.take()
                            yield chunk
                            continue
                        if follower.error is not None:
                            raise follower.error
                        if missed is not None or follower.cut or stopping():
                            break
                        follower.ready.clear()
                        try:
                            async with asyncio.timeout(KEEPALIVE):
                                await follower.ready.wait()
                        except TimeoutError:
                            yield b": keepalive\n\n"
                finally:
                    feed.leave(follower)
                if follower.cut:  # fell behind: read on from the last event sent, now
                    last, wait = None, False
                elif missed is not None:  # the log kept growing: read alone, rejoin later
                    position, last = missed
                    wait = not feed.dropped  # (or the feed ended meanwhile: join the next)
            if wait and not stopping():
                await notifier.wait(HEARTBEAT * random.uniform(0.5, 1.5), key)
            if stopping():
                return
            cursor, skip = position
            page = await list_page(scope_id, cursor=cursor, limit=FOLLOW_PAGE)

    return stream(page, cursor, skip)
