"""Conformance: session administration [D1] [D2] [D4].

Hosts create sessions before submitting work, end them when no new work may
start, and read them back; workers only read a session's status.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any, cast

import pytest

from agentledger.errors import (
    RunNotActiveError,
    SessionEndedError,
    SessionNotFoundError,
    ValidationError,
)
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._world import AdminStore, World, all_sessions
from agentledger.storage.types import (
    AppendResult,
    RunMeta,
    RunStatus,
    Session,
    SessionStatus,
    StartOutcome,
)

__all__ = ["SessionConformance"]


async def _mine(store: AdminStore, world: World, *statuses: SessionStatus) -> list[str]:
    """Ids of this world's sessions that ``list_sessions`` returns (all pages), in its order."""
    known = set(world.session_ids)
    return [s.id for s in await all_sessions(store, statuses) if s.id in known]


async def _run_ids(store: AdminStore, session_id: str, *statuses: RunStatus) -> list[str]:
    return [meta.run_id for meta in await store.list_runs_by_session(session_id, statuses)]


class SessionConformance(ConformanceBase):
    """Capability: creating, ending, loading and listing sessions and their runs."""

    # ---------------------------------------------------------------- create

    async def test_create_session_returns_active_session(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[D1] [D4] a new session is active, has no end, and reads back the same everywhere."""
        sid = world.track_session("s")
        created_at = world.now()
        session = await world.store.create_session(sid, created_at=created_at)
        expected = Session(id=sid, status=SessionStatus.ACTIVE, created_at=created_at, labels={})
        assert session == expected
        assert session.ended_at is None
        assert await world.store.load_session(sid) == expected
        assert await other_store.load_session(sid) == expected
        assert await other_store.load_session_status(sid) is SessionStatus.ACTIVE

    async def test_create_session_is_idempotent_while_active(self, world: World) -> None:
        """[D4] creating an active session again returns it unchanged."""
        sid = world.track_session("s")
        created_at = world.now()
        first = await world.store.create_session(sid, created_at=created_at)
        async with world.unchanged():
            again = await world.store.create_session(sid, created_at=created_at)
        assert again == first

    async def test_create_session_again_keeps_first_created_at(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[D4] a repeated create never overwrites the stored creation time."""
        sid = world.track_session("s")
        first_at = world.now()
        await world.store.create_session(sid, created_at=first_at)
        async with world.unchanged():
            again = await other_store.create_session(sid, created_at=world.now())
        assert again == Session(id=sid, status=SessionStatus.ACTIVE, created_at=first_at)

    async def test_create_ended_session_is_refused(self, world: World) -> None:
        """[D4] an ended session cannot be created again: SessionEndedError."""
        sid = await world.session("s")
        await world.store.end_session(sid, ended_at=world.now())
        async with world.unchanged():
            with pytest.raises(SessionEndedError) as e:
                await world.store.create_session(sid, created_at=world.now())
        assert e.value.session_id == sid

    async def test_create_session_validates_its_input(self, world: World) -> None:
        """[D4] an empty id or a malformed creation time is a ValidationError; nothing created."""
        sid = world.track_session("s")
        cases: list[tuple[str, datetime, str]] = [
            ("", world.now(), "session_id"),
            (sid, datetime(2026, 1, 1, 12, 0), "created_at"),  # naive
            (sid, datetime(2026, 1, 1, 12, 0, 0, 1500, tzinfo=UTC), "created_at"),  # µs
            (sid, datetime(2026, 1, 1, 12, 0, tzinfo=timezone(timedelta(hours=2))), "created_at"),
        ]
        for session_id, created_at, field in cases:
            async with world.unchanged():
                with pytest.raises(ValidationError) as e:
                    await world.store.create_session(session_id, created_at=created_at)
            assert e.value.field == field
        async with world.unchanged():
            with pytest.raises(SessionNotFoundError):
                await world.store.load_session(sid)

    async def test_create_session_keeps_the_instant_in_utc(self, world: World) -> None:
        """[D4] the stored creation time is the same instant, timezone-aware UTC, to the ms."""
        sid = world.track_session("s")
        created_at = datetime(2026, 3, 4, 5, 6, 7, 890000, tzinfo=UTC)
        await world.store.create_session(sid, created_at=created_at)
        loaded = await world.store.load_session(sid)
        assert loaded.created_at == created_at
        assert loaded.created_at.utcoffset() == timedelta(0)
        assert loaded.created_at.microsecond == 890000

    # ------------------------------------------------------------------- end

    async def test_end_session_marks_it_ended(self, world: World, other_store: AdminStore) -> None:
        """[D2] ending a session records when and makes its status ``ended``."""
        sid = world.track_session("s")
        created_at, ended_at = world.now(), world.now()
        await world.store.create_session(sid, created_at=created_at)
        ended = await world.store.end_session(sid, ended_at=ended_at)
        expected = Session(
            id=sid, status=SessionStatus.ENDED, created_at=created_at, ended_at=ended_at
        )
        assert ended == expected
        assert await other_store.load_session(sid) == expected
        assert await other_store.load_session_status(sid) is SessionStatus.ENDED

    async def test_end_session_is_idempotent(self, world: World) -> None:
        """[D2] ending an ended session returns it unchanged, keeping the first end time."""
        sid = await world.session("s")
        first = await world.store.end_session(sid, ended_at=world.now())
        async with world.unchanged():
            again = await world.store.end_session(sid, ended_at=world.now())
        assert again == first
        assert again.status is SessionStatus.ENDED

    async def test_end_unknown_session_is_not_found(self, world: World) -> None:
        """[D2] ending a session that was never created is SessionNotFoundError."""
        sid = world.track_session("missing")
        async with world.unchanged():
            with pytest.raises(SessionNotFoundError) as e:
                await world.store.end_session(sid, ended_at=world.now())
        assert (e.value.session_id, e.value.kind, e.value.id) == (sid, "session", sid)

    async def test_end_session_validates_its_input(self, world: World) -> None:
        """[D2] a malformed end time is a ValidationError and the session stays active."""
        sid = await world.session("s")
        for bad in (
            datetime(2026, 1, 1, 12, 0),
            datetime(2026, 1, 1, 12, 0, 0, 999, tzinfo=UTC),
        ):
            async with world.unchanged():
                with pytest.raises(ValidationError) as e:
                    await world.store.end_session(sid, ended_at=bad)
            assert e.value.field == "ended_at"
        assert await world.store.load_session_status(sid) is SessionStatus.ACTIVE

    async def test_end_session_lets_running_runs_finish(self, world: World) -> None:
        """[D2] after the end, a running run may still write its records and its terminal."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.end_session(sid, ended_at=world.now())
        assert (await world.store.load_run(run.run.run_id)).status is RunStatus.RUNNING
        appended = await world.store.append_run_record(world.note(run, "late-note"))
        assert appended == AppendResult(id="2", inserted=True, session_status=SessionStatus.ENDED)
        done = await world.store.record_run_terminal(
            run.terminal(RunStatus.COMPLETED, at=world.now())
        )
        assert done == AppendResult(id="3", inserted=True, session_status=SessionStatus.ENDED)
        page = await world.store.list_run_records(run.run.run_id)
        assert [r.type for r in page.records] == ["run_started", "planner_note", "run_completed"]
        assert (await world.store.load_run(run.run.run_id)).status is RunStatus.COMPLETED

    async def test_end_session_stops_new_work(self, world: World) -> None:
        """[D2] [C2] once ended, a new start is stopped before any planner work."""
        sid = await world.session("s")
        await world.store.end_session(sid, ended_at=world.now())
        run = world.run("r", session=sid)
        result = await world.store.start_root_run(run.root_start())
        assert result.outcome is StartOutcome.STOP
        assert result.run_status is RunStatus.CANCELED

    async def test_ended_session_refuses_records_of_stopped_runs(self, world: World) -> None:
        """[D2] a run that has finished accepts no record, ended session or not."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.finish(run)
        await world.store.end_session(sid, ended_at=world.now())
        async with world.unchanged():
            with pytest.raises(RunNotActiveError) as e:
                await world.store.append_run_record(world.note(run, "too-late"))
        assert (e.value.run_id, e.value.expected, e.value.got) == (
            run.run.run_id,
            "running",
            "completed",
        )

    # ------------------------------------------------------------------ loads

    async def test_load_unknown_session_is_not_found(self, world: World) -> None:
        """[D1] reading a session nobody created is SessionNotFoundError, for host and worker."""
        sid = world.track_session("missing")
        async with world.unchanged():
            with pytest.raises(SessionNotFoundError) as e:
                await world.store.load_session(sid)
        assert e.value.session_id == sid
        async with world.unchanged():
            with pytest.raises(SessionNotFoundError) as e:
                await world.store.load_session_status(sid)
        assert e.value.session_id == sid
        async with world.unchanged():
            with pytest.raises(SessionNotFoundError) as e:
                await world.store.list_runs_by_session(sid)
        assert e.value.session_id == sid
        async with world.unchanged():
            with pytest.raises(SessionNotFoundError) as e:
                await world.store.list_session_run_records(sid)
        assert e.value.session_id == sid

    async def test_start_needs_a_created_session(self, world: World) -> None:
        """[D1] the host creates the session before work is submitted; otherwise not found."""
        sid = world.track_session("never-created")
        run = world.run("r", session=sid)
        async with world.unchanged():
            with pytest.raises(SessionNotFoundError) as e:
                await world.store.start_root_run(run.root_start())
        assert e.value.session_id == sid

    async def test_load_session_status_follows_the_session(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[D1] [D2] the worker-facing status is active, then ended, as the host changes it."""
        sid = await world.session("s")
        assert await world.store.load_session_status(sid) is SessionStatus.ACTIVE
        await other_store.end_session(sid, ended_at=world.now())
        assert await world.store.load_session_status(sid) is SessionStatus.ENDED

    # ------------------------------------------------------------ list sessions

    async def test_list_sessions_newest_first(self, world: World, other_store: AdminStore) -> None:
        """[D1] [D6] list_sessions returns every session newest first, ended ones included."""
        a = await world.session("a")
        b = await world.session("b")
        c = await world.session("c")
        await world.store.end_session(b, ended_at=world.now())
        assert await _mine(world.store, world) == [c, b, a]
        assert await _mine(other_store, world) == [c, b, a]
        listed = {s.id: s for s in await all_sessions(world.store)}
        assert listed[b] == await world.store.load_session(b)
        assert listed[a].status is SessionStatus.ACTIVE

    async def test_list_sessions_filters_by_status(self, world: World) -> None:
        """[D1] [D2] [D6] a status filter keeps only sessions with those statuses."""
        a = await world.session("a")
        b = await world.session("b")
        c = await world.session("c")
        await world.store.end_session(a, ended_at=world.now())
        await world.store.end_session(c, ended_at=world.now())
        assert await _mine(world.store, world, SessionStatus.ACTIVE) == [b]
        assert await _mine(world.store, world, SessionStatus.ENDED) == [c, a]
        assert await _mine(world.store, world, SessionStatus.ACTIVE, SessionStatus.ENDED) == [
            c,
            b,
            a,
        ]

    # ---------------------------------------------------------------- list runs

    async def test_list_runs_by_session_in_start_order(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[D1] a session's runs come back in start order, as the metas load_run returns."""
        sid = await world.session("s")
        first = await world.root("first", session=sid)
        child, _ = await world.child("child", parent=first)
        second = await world.root("second", session=sid)
        ids = [first.run.run_id, child.run.run_id, second.run.run_id]
        listed = await other_store.list_runs_by_session(sid)
        assert [m.run_id for m in listed] == ids
        assert listed == [await world.store.load_run(rid) for rid in ids]
        assert listed[1].parent_run_id == first.run.run_id

    async def test_list_runs_by_session_filters_by_status(self, world: World) -> None:
        """[D1] a status filter keeps only runs with those statuses, still in start order."""
        sid = await world.session("s")
        running = await world.root("running", session=sid)
        suspended = await world.root("suspended", session=sid)
        await world.suspend(suspended)
        completed = await world.root("completed", session=sid)
        await world.finish(completed, RunStatus.COMPLETED)
        failed = await world.root("failed", session=sid)
        await world.finish(failed, RunStatus.FAILED)
        canceled = await world.root("canceled", session=sid)
        await world.finish(canceled, RunStatus.CANCELED)
        r, s, c, f, x = (b.run.run_id for b in (running, suspended, completed, failed, canceled))
        store = world.store
        assert await _run_ids(store, sid) == [r, s, c, f, x]
        assert await _run_ids(store, sid, RunStatus.RUNNING) == [r]
        assert await _run_ids(store, sid, RunStatus.SUSPENDED) == [s]
        assert await _run_ids(store, sid, RunStatus.COMPLETED) == [c]
        assert await _run_ids(store, sid, RunStatus.FAILED) == [f]
        assert await _run_ids(store, sid, RunStatus.CANCELED) == [x]
        assert await _run_ids(store, sid, RunStatus.CANCELED, RunStatus.RUNNING) == [r, x]

    async def test_list_runs_by_session_excludes_other_runs(self, world: World) -> None:
        """[D1] only the session's own runs are listed: not other sessions', not one-shots."""
        sid = await world.session("s")
        other = await world.session("other")
        mine = await world.root("mine", session=sid)
        await world.root("theirs", session=other)
        await world.one_shot("loose")
        assert await _run_ids(world.store, sid) == [mine.run.run_id]
        empty = await world.session("empty")
        assert await world.store.list_runs_by_session(empty) == []

    async def test_list_runs_by_session_after_the_end(self, world: World) -> None:
        """[D2] ending a session keeps its runs listed with their current status."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.end_session(sid, ended_at=world.now())
        late = world.run("late", session=sid)
        await world.store.start_root_run(late.root_start())
        listed: list[RunMeta] = await world.store.list_runs_by_session(sid)
        assert [(m.run_id, m.status, m.start_outcome) for m in listed] == [
            (run.run.run_id, RunStatus.RUNNING, StartOutcome.PROCEED),
            (late.run.run_id, RunStatus.CANCELED, StartOutcome.STOP),
        ]

    async def test_list_filters_refuse_unknown_statuses(self, world: World) -> None:
        """[D1] a status filter naming no known status is a ValidationError, not an empty list.

        ``purged`` in particular is a tombstone, not a session status.
        """
        sid = await world.session("s")
        await world.root("r", session=sid)
        for bad in (["paused"], [RunStatus.RUNNING, "pending"]):
            async with world.unchanged():
                with pytest.raises(ValidationError) as e:
                    await world.store.list_runs_by_session(sid, statuses=cast(Any, bad))
            assert (e.value.field, e.value.got) == ("statuses", bad[-1])
        async with world.unchanged():
            with pytest.raises(ValidationError) as e:
                await world.store.list_sessions(statuses=cast(Any, ["purged"]))
        assert (e.value.field, e.value.got) == ("statuses", "purged")
