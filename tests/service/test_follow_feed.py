"""[S5] The follow feed: one reader per followed log, every follower gets every record.

These run the service's follow streams in process over a real MemoryStore and the
service's own Notifier (the SSE bytes each stream would send, parsed back), so the
interleavings are the test's to choose; tests/service/test_follow.py follows through
a real service process.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from agentledger.errors import SessionPurgedError
from agentledger.service.follow import BACKLOG, BacklogBudget, Notifier, follow
from agentledger.storage import MemoryStore, Page, Record, RecordBuilder, RunStart, RunStatus
from tests.conditions import until

T0 = datetime(2026, 6, 1, tzinfo=UTC)
_RECORD = msgspec.json.Decoder(Record)


class _Counted:
    """A store's list method, counting its calls (the reads the followers cost)."""

    def __init__(self, read: Callable[..., Any]) -> None:
        self.read = read
        self.calls = 0

    async def __call__(self, *args: Any, **kwargs: Any) -> Page:
        self.calls += 1
        page: Page = await self.read(*args, **kwargs)
        return page


def _parse(chunk: bytes) -> list[tuple[str, Record]]:
    """(id, record) of each record event in an SSE chunk."""
    found = []
    for event in chunk.split(b"\n\n"):
        fields = dict(line.split(b": ", 1) for line in event.split(b"\n") if b": " in line)
        if fields.get(b"event") == b"record":
            found.append((fields[b"id"].decode(), _RECORD.decode(fields[b"data"])))
    return found


class _World:
    def __init__(self) -> None:
        self.store = MemoryStore()
        self.notifier = Notifier()
        self.stopped = False
        self.run = RecordBuilder(
            RunStart(run_id="fed", agent_id="a", session_id="fed-s", started_at=T0)
        )
        self.reads = _Counted(self.store.list_run_records)
        self.session_reads = _Counted(self.store.list_session_run_records)
        self.written = 0

    async def start(self) -> None:
        await self.store.create_session("fed-s", created_at=T0)
        await self.store.start_root_run(self.run.root_start())

    async def append(self, count: int, *, size: int = 0, pause: int = 1) -> None:
        """Append ``count`` notes, waking the followers after each as the service does."""
        for _ in range(count):
            i = self.written
            self.written += 1
            payload = b'{"i": %d, "pad": "%s"}' % (i, b"x" * size)
            at = T0 + timedelta(milliseconds=i)
            await self.store.append_run_record(self.run.record("note", payload, event_key=f"n{i}",
                                                               at=at))  # fmt: skip
            self.notifier.notify(["run:fed", "session:fed-s"])
            for _ in range(pause):
                await asyncio.sleep(0)

    async def follow(self, after: str = "", *, session: bool = False) -> AsyncIterator[bytes]:
        reads = self.session_reads if session else self.reads
        key = "session:fed-s" if session else "run:fed"
        scope = "fed-s" if session else "fed"
        return await follow(
            reads, scope, after, notifier=self.notifier, stopping=lambda: self.stopped, key=key
        )

    async def log(self) -> list[Record]:
        page = await self.store.list_run_records("fed", limit=1000)
        records = list(page.records)
        while page.next_cursor:
            page = await self.store.list_run_records("fed", cursor=page.next_cursor, limit=1000)
            records.extend(page.records)
        return records


def _attached(world: _World) -> int:
    """How many followers are attached to a feed now (each waits for the feed's next read)."""
    return sum(len(f.followers) for every in world.notifier._feeds.values() for f in every.values())


async def _take(stream: AsyncIterator[bytes], count: int, into: list[tuple[str, Record]]) -> None:
    async for chunk in stream:
        into.extend(_parse(chunk))
        if len(into) >= count:
            return


async def test_many_followers_of_one_log_each_get_every_record_in_order() -> None:
    """Forty followers of a run and ten of its session each get all 350 records (past
    several pages), in order, once; the run's tail is read once per write, not once per
    follower per write."""
    world = _World()
    await world.start()
    runs = [await world.follow() for _ in range(40)]
    sessions = [await world.follow(session=True) for _ in range(10)]
    seen: list[list[tuple[str, Record]]] = [[] for _ in range(50)]
    takers = [
        asyncio.create_task(_take(s, 351, into))
        for s, into in zip([*runs, *sessions], seen, strict=True)
    ]
    await until(lambda: _attached(world) == 50, "every follower attached")
    assert world.notifier.feeds() == 2  # one feed per log, however many follow it
    before = world.reads.calls
    await world.append(350)
    await asyncio.wait_for(asyncio.gather(*takers), 30)
    log = await world.log()
    assert len(log) == 351
    for into in seen:
        assert [record for _, record in into] == log
    assert world.reads.calls - before <= 2 * 350  # shared: 40 followers cost 14,000 alone
    world.stopped = True
    world.notifier.stop()


async def test_a_follower_joining_mid_stream_gets_no_gap() -> None:
    """Followers that start while the log grows, from the start or from a cursor another
    follower was handed, each get exactly the records after their cursor."""
    world = _World()
    await world.start()
    first: list[tuple[str, Record]] = []
    leader = asyncio.create_task(_take(await world.follow(), 10_000, first))
    writer = asyncio.create_task(world.append(600, pause=3))
    joined: list[tuple[int, list[tuple[str, Record]], asyncio.Task[None]]] = []
    while not writer.done():
        await asyncio.sleep(0.002)
        if first and len(joined) < 12:
            session = len(joined) % 4 == 3  # a session's follower: from the start (the
            # leader's cursors are the run's, which a session's log refuses)
            skip = len(first) if len(joined) % 3 and not session else 0  # some from the start
            after = first[skip - 1][0] if skip else ""
            into: list[tuple[str, Record]] = []
            stream = await world.follow(after, session=session)
            joined.append((skip, into, asyncio.create_task(_take(stream, 601 - skip, into))))
    await writer
    await asyncio.wait_for(asyncio.gather(*(task for _, _, task in joined)), 30)
    log = await world.log()
    assert len(joined) == 12
    for skip, into, _ in joined:
        assert [record for _, record in into] == log[skip:]
    world.stopped = True
    world.notifier.stop()
    await asyncio.wait_for(leader, 60)


async def test_a_slow_follower_is_cut_loose_and_still_gets_every_record() -> None:
    """A follower whose client reads nothing does not stall the others nor queue more
    than the backlog limit; once it reads, it gets every record in order, no gap."""
    world = _World()
    await world.start()
    slow = await world.follow()
    assert _parse(await anext(slow)) == []  # ": following"
    assert len(_parse(await anext(slow))) == 1  # run_started, read on its own
    first = asyncio.ensure_future(anext(slow))  # at the end: it joins the feed
    await until(lambda: _attached(world) == 1, "the follower attached")
    await world.append(1)
    assert len(_parse(await asyncio.wait_for(first, 5))) == 1  # from the feed; then it stops
    fast: list[tuple[str, Record]] = []
    keeping_up = asyncio.create_task(_take(await world.follow(), 2 * BACKLOG + 52, fast))
    await until(lambda: _attached(world) == 2, "the second follower attached")
    queued = lag = 0
    for _ in range(2 * BACKLOG + 50):
        await world.append(1, pause=5)
        feeds = world.notifier._feeds.get("run:fed", {}).values()
        queued = max([queued, *(len(f.events) for feed in feeds for f in feed.followers)])
        lag = max(lag, world.written + 1 - len(fast))
    await asyncio.wait_for(keeping_up, 30)
    assert queued <= BACKLOG
    assert lag <= 50  # the fast one kept up throughout
    assert len(fast) == 2 * BACKLOG + 52
    rest: list[tuple[str, Record]] = []
    await asyncio.wait_for(_take(slow, 2 * BACKLOG + 50, rest), 30)
    log = await world.log()
    assert [record for _, record in rest] == log[2:]
    world.stopped = True
    world.notifier.stop()


async def test_unread_streams_past_the_service_budget_are_cut_slowest_first() -> None:
    """Three streams whose clients read nothing, each well within its own backlog limit,
    together pass the service's backlog budget: the one holding the most is cut loose each
    time (counted as ``backlog_budget``), what waits never passes the budget, a follower
    keeping up is never cut, and each cut stream still gets every record once it reads."""
    world = _World()
    cuts: list[str] = []
    budget = BacklogBudget(40_000, on_cut=cuts.append)
    world.notifier = Notifier(budget)
    await world.start()
    slow = []
    for _ in range(3):  # each joins the feed, then its client stops reading
        stream = await world.follow()
        await anext(stream)  # ": following"
        assert len(_parse(await anext(stream))) == 1  # run_started, read on its own
        slow.append((stream, asyncio.ensure_future(anext(stream))))
    await until(lambda: _attached(world) == 3, "the slow followers attached")
    await world.append(1)
    for _, first in slow:
        assert len(_parse(await asyncio.wait_for(first, 5))) == 1  # from the feed
    fast: list[tuple[str, Record]] = []
    keeping_up = asyncio.create_task(_take(await world.follow(), 2 + 150, fast))
    await until(lambda: _attached(world) == 4, "the fast follower attached")
    held = 0
    for _ in range(150):  # ~1 KiB events: ~150 KiB per stream, far below its own limit
        await world.append(1, size=900, pause=5)
        held = max(held, budget.held)
    await asyncio.wait_for(keeping_up, 30)
    assert len(fast) == 152
    assert held <= 40_000
    assert cuts == ["backlog_budget"] * 3  # each slow stream in turn
    log = await world.log()
    for stream, _ in slow:
        rest: list[tuple[str, Record]] = []
        await asyncio.wait_for(_take(stream, 150, rest), 30)
        assert [record for _, record in rest] == log[2:]
    world.stopped = True
    world.notifier.stop()
    await until(lambda: budget.held == 0, "every backlog released")


class _Overlap:
    """A store's list method that yields while it reads, noting the most reads at once."""

    def __init__(self, read: Callable[..., Any]) -> None:
        self.read = read
        self.now = self.most = 0

    async def __call__(self, *args: Any, **kwargs: Any) -> Page:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(0)  # as a database's round trip would
            page: Page = await self.read(*args, **kwargs)
            await asyncio.sleep(0)
            return page
        finally:
            self.now -= 1


async def test_polls_find_writes_made_elsewhere_one_read_at_a_time() -> None:
    """Records appended to 100 followed runs with nobody notified (as through another
    replica) reach every follower by the poller's reads, which never run together: a
    write's own read waits behind at most one poll."""
    world = _World()
    await world.start()
    reads = _Overlap(world.store.list_run_records)
    runs = [RecordBuilder(RunStart(run_id=f"p{i}", agent_id="a", session_id="fed-s",
                                   started_at=T0)) for i in range(100)]  # fmt: skip
    for run in runs:
        await world.store.start_root_run(run.root_start())
    seen: list[list[tuple[str, Record]]] = [[] for _ in runs]
    takers = []
    for run, into in zip(runs, seen, strict=True):
        run_id = run.run.run_id
        stream = await follow(reads, run_id, "", notifier=world.notifier,
                              stopping=lambda: world.stopped, key=f"run:{run_id}")  # fmt: skip
        takers.append(asyncio.create_task(_take(stream, 2, into)))
    await until(lambda: _attached(world) == 100, "every follower attached")
    reads.most = 0
    for run in runs:  # written elsewhere: the notifier hears nothing of it
        await world.store.append_run_record(run.record("note", b"{}", event_key="x", at=T0))
    await asyncio.wait_for(asyncio.gather(*takers), 30)
    assert [[r.event_key for _, r in into][1] for into in seen] == ["x"] * 100
    assert reads.most == 1
    world.stopped = True
    world.notifier.stop()


async def test_feeds_end_with_their_followers() -> None:
    """A stream closed by its client leaves its feed; a feed nobody follows is dropped."""
    world = _World()
    await world.start()
    streams = [await world.follow() for _ in range(3)]
    for stream in streams:
        await anext(stream)
        await anext(stream)
    pending = [asyncio.ensure_future(anext(stream)) for stream in streams]
    await until(lambda: _attached(world) == 3, "the three followers attached")
    assert world.notifier.feeds() == 1
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for stream in streams:
        await stream.aclose()  # type: ignore[attr-defined]
    assert world.notifier.feeds() == 0


async def test_a_log_the_feed_cannot_read_ends_its_streams_with_the_error() -> None:
    """A log purged while followed (no write through this service woke the feed before):
    each follower's stream ends with the store's error."""
    world = _World()
    await world.start()
    streams = [await world.follow() for _ in range(2)]
    for stream in streams:
        await anext(stream)
        await anext(stream)
    await world.store.record_run_terminal(world.run.terminal(RunStatus.COMPLETED, at=T0))
    await world.store.end_session("fed-s", ended_at=T0)
    await world.store.purge_session("fed-s")
    world.notifier.notify()  # as the service does after any write but an append
    for stream in streams:
        with pytest.raises(SessionPurgedError):
            await asyncio.wait_for(anext(stream), 60)
    assert world.notifier.feeds() == 0


async def test_a_follower_joining_a_feed_that_ends_meanwhile_joins_the_next() -> None:
    """The last follower of a log leaves while another is about to join its feed: the
    newcomer joins a new feed and still gets the next record (not a feed nobody reads)."""
    world = _World()
    await world.start()
    leaving = await world.follow()
    await anext(leaving)
    await anext(leaving)
    pending = asyncio.ensure_future(anext(leaving))  # attached to the feed, waiting
    await until(lambda: _attached(world) == 1, "the follower attached")
    (feed,) = world.notifier._feeds["run:fed"].values()
    async with feed.lock:  # the feed is busy: the newcomer waits to join it
        joining = await world.follow()
        await anext(joining)
        assert len(_parse(await anext(joining))) == 1  # run_started, read on its own
        seen: list[tuple[str, Record]] = []
        newcomer = asyncio.create_task(_take(joining, 1, seen))
        await until(lambda: bool(feed.lock._waiters), "the newcomer waits for the feed")
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        await leaving.aclose()  # type: ignore[attr-defined]
        assert feed.dropped
    await until(lambda: _attached(world) == 1, "the newcomer attached to a new feed")
    await world.append(1)
    await asyncio.wait_for(newcomer, 60)
    assert [record.event_key for _, record in seen] == ["n0"]
    world.stopped = True
    world.notifier.stop()
