"""[S5] Live follow over server-sent events: no gap and no duplicate across disconnects.

A follower that breaks off resumes from the cursor of the last record it
saw; another one keeps iterating while the service is stopped and started
again on the same address, and reconnects by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentledger.errors import AccessDeniedError, RunNotFoundError, ValidationError
from agentledger.service import FollowedRecord, StoreClient
from agentledger.service.follow import Notifier
from agentledger.storage import RecordBuilder, RunStart
from tests.conditions import until
from tests.service.process import ServiceProcess, Tokens, free_port

T0 = datetime(2026, 6, 1, tzinfo=UTC)


async def _append(client: StoreClient, run: RecordBuilder, first: int, last: int) -> None:
    for i in range(first, last):
        at = T0 + timedelta(milliseconds=i)
        note = run.record("note", b'{"i": %d}' % i, event_key=f"n{i}", at=at)
        await client.append_run_record(note)


async def _take(follow: object, count: int, into: list[FollowedRecord]) -> None:
    async for item in follow:  # type: ignore[attr-defined]
        into.append(item)
        if len(into) >= count:
            return


async def test_follow_resumes_without_gap_or_duplicate(tmp_path: Path, tokens: Tokens) -> None:
    """[S5] [L9] records stream as they commit, across page boundaries, a break and a restart."""
    db = str(tmp_path / "follow.db")
    listen = f"127.0.0.1:{free_port()}"
    first: list[FollowedRecord] = []
    through: list[FollowedRecord] = []
    with ServiceProcess(db, tokens.path, listen=listen) as service:
        host = StoreClient(service.url, token=tokens.host)
        reader = StoreClient(service.url, token=tokens.reader)
        await host.create_session("follow-s", created_at=T0)
        run = RecordBuilder(RunStart(run_id="follow-r", agent_id="a", session_id="follow-s",
                                     started_at=T0))  # fmt: skip
        await host.start_root_run(run.root_start())
        # One follower breaks off after 60 records; one follows the session throughout.
        session_follower = asyncio.create_task(
            _take(reader.follow_session_run_records("follow-s"), 161, through)
        )
        await asyncio.gather(
            _take(reader.follow_run_records("follow-r"), 60, first), _append(host, run, 2, 122)
        )
        cursor = first[-1].cursor
        await host.close()
    # The service stopped (its streams ended); the same file is served again.
    with ServiceProcess(db, tokens.path, listen=listen) as service:
        async with StoreClient(service.url, token=tokens.host) as host:
            await _append(host, run, 122, 162)
            rest: list[FollowedRecord] = []
            await _take(reader.follow_run_records("follow-r", after=cursor), 161 - 60, rest)
            await asyncio.wait_for(session_follower, 60)
            log = []
            page_cursor = ""
            while True:
                page = await host.list_run_records("follow-r", cursor=page_cursor, limit=50)
                log.extend(page.records)
                if not (page_cursor := page.next_cursor):
                    break
        await reader.close()
    assert [r.id for r in log] == [str(i) for i in range(1, 162)]
    assert [f.record for f in first + rest] == log
    assert [f.record for f in through] == log


async def test_each_record_reaches_a_follower_as_it_commits(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """[S5] a small log is followed record by record: nothing waits for a buffer to fill."""
    async with StoreClient(sqlite_service.url, token=tokens.host) as client:
        await client.create_session("follow-one-s", created_at=T0)
        run = RecordBuilder(RunStart(run_id="follow-one-r", agent_id="a",
                                     session_id="follow-one-s", started_at=T0))  # fmt: skip
        await client.start_root_run(run.root_start())
        follow = client.follow_run_records("follow-one-r")
        first = await asyncio.wait_for(anext(follow), 10)
        assert first.record.type == "run_started"
        for i in range(2, 5):
            await _append(client, run, i, i + 1)
            followed = await asyncio.wait_for(anext(follow), 10)
            assert followed.record.event_key == f"n{i}"
        await follow.aclose()  # type: ignore[attr-defined]


async def test_follow_refusals_are_typed(sqlite_service: ServiceProcess, tokens: Tokens) -> None:
    """[S5] [S4] an unknown run, a forged cursor or no token: typed errors, no stream."""
    async with StoreClient(sqlite_service.url, token=tokens.host) as host:
        await host.create_session("follow-known", created_at=T0)
    async with StoreClient(sqlite_service.url, token=tokens.reader) as reader:
        with pytest.raises(RunNotFoundError):
            await anext(reader.follow_run_records("follow-nobody"))
        with pytest.raises(ValidationError) as info:
            await anext(reader.follow_session_run_records("follow-known", after="forged.3"))
        assert info.value.field == "cursor"
        with pytest.raises(ValidationError) as info:
            await anext(reader.follow_session_run_records("follow-known", after=".3"))
        assert info.value.field == "after"
    async with StoreClient(sqlite_service.url, token="") as anonymous:
        with pytest.raises(AccessDeniedError) as denied:
            await anext(anonymous.follow_run_records("follow-nobody"))
        assert denied.value.status == 401


async def test_ids_holding_a_slash_are_followed_like_any_other(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """An id with ``/`` (sent as ``%2F``) names its run or session; a missing one is typed."""
    run = RecordBuilder(RunStart(run_id="slash/run", agent_id="a", session_id="slash/session",
                                 started_at=T0))  # fmt: skip
    async with StoreClient(sqlite_service.url, token=tokens.host) as client:
        await client.create_session("slash/session", created_at=T0)
        await client.start_root_run(run.root_start())
        first = await anext(client.follow_run_records("slash/run"))
        assert first.record.run_id == "slash/run"
        first = await anext(client.follow_session_run_records("slash/session"))
        assert first.record.session_id == "slash/session"
        for missing in ("no/such", "no%2Fsuch", "no/records/records"):
            with pytest.raises(RunNotFoundError) as caught:
                await anext(client.follow_run_records(missing))
            assert caught.value.run_id == missing


async def test_a_record_longer_than_any_read_buffer_is_followed_whole(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """An event line of a megabyte (a large payload) arrives whole, then the next record."""
    run = RecordBuilder(RunStart(run_id="follow-big", agent_id="a", session_id="follow-big-s",
                                 started_at=T0))  # fmt: skip
    big = b'{"text": "' + b"x" * 1_000_000 + b'"}'
    async with StoreClient(sqlite_service.url, token=tokens.host) as client:
        await client.create_session("follow-big-s", created_at=T0)
        await client.start_root_run(run.root_start())
        await client.append_run_record(run.record("note", big, event_key="big", at=T0))
        await client.append_run_record(run.record("note", b"{}", event_key="small", at=T0))
        seen: list[FollowedRecord] = []
        await asyncio.wait_for(_take(client.follow_run_records("follow-big"), 3, seen), 60)
    assert [f.record.event_key for f in seen] == ["run_started", "big", "small"]
    assert seen[1].record.payload == big


async def test_an_append_wakes_the_followers_of_its_logs_only() -> None:
    """A follower waits for writes to its own log: an append to another run leaves it asleep,
    one to its run or session wakes it, a write naming no log wakes everyone, and an
    unkeyed waiter (the inspector's change feed) hears every write."""
    notifier = Notifier()

    async def woken(key: str, keys: list[str] | None) -> bool:
        # Counted in turns of the loop, not in time: a woken waiter ends a turn or two after
        # the notice; one left asleep would wait for its timeout (an hour: never, here).
        waiting = asyncio.create_task(notifier.wait(3600.0, key))
        await until(lambda: notifier.waiting, "the waiter is registered")
        notifier.notify(keys)
        for _ in range(20):
            await asyncio.sleep(0)
        if not waiting.done():
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
            return False
        return True

    assert not await woken("run:a", ["run:b", "session:t"])
    assert await woken("run:a", ["run:a", "session:s"])
    assert await woken("session:s", ["run:a", "session:s"])
    assert await woken("run:a", None)
    assert await woken("", ["run:b", "session:t"])
    assert notifier._keyed == {}  # nobody waits: nothing is kept


async def test_a_stopping_service_ends_its_follow_streams_at_once(
    tmp_path: Path, tokens: Tokens
) -> None:
    """SIGTERM wakes every follow stream, so a service with idle followers stops well
    before their next keepalive (15 s), instead of waiting for it."""
    with ServiceProcess(str(tmp_path / "stop.db"), tokens.path) as service:
        async with StoreClient(service.url, token=tokens.host) as client:
            await client.create_session("stop-s", created_at=T0)
            run = RecordBuilder(RunStart(run_id="stop-r", agent_id="a", session_id="stop-s",
                                         started_at=T0))  # fmt: skip
            await client.start_root_run(run.root_start())
            seen: list[FollowedRecord] = []
            followers = [
                asyncio.create_task(_take(client.follow_run_records("stop-r"), 2, seen)),
                asyncio.create_task(_take(client.follow_session_run_records("stop-s"), 2, seen)),
            ]
            while len(seen) < 2:  # noqa: ASYNC110 (a count, no event)
                await asyncio.sleep(0.05)
            loop = asyncio.get_running_loop()
            started = loop.time()
            service.terminate()
            code, _, err = await asyncio.to_thread(service.stop)
            stopped = loop.time() - started
            for task in followers:
                task.cancel()
            await asyncio.gather(*followers, return_exceptions=True)
    assert code == 0, err
    assert stopped < 10, stopped
