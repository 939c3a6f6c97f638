"""Conformance: root run starts [L1] [O1] [C2] [X1] [X2] [X3] [X4] [J1].

A root start saves the run and its ``run_started`` together; in an ended
session it also saves the canceled ``run_completed`` and reports ``stop``. A
retry returns the original decision and record ids, changes nothing, and any
difference from the first start is a conflict.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from agentledger.errors import (
    RecordOwnerMismatchError,
    RunConflictError,
    RunNotActiveError,
    RunNotFoundError,
    RunTerminalConflictError,
    SuspensionNotFoundError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._world import AdminStore, World
from agentledger.storage.conformance._world import changed as _with
from agentledger.storage.conformance._world import rebuilt as _rebuilt
from agentledger.storage.conformance._world import short_run_log as _log
from agentledger.storage.types import (
    AppendResult,
    Checkpoint,
    Record,
    RootRunStart,
    RunMeta,
    RunStart,
    RunStatus,
    SessionStatus,
    StartOutcome,
    StartResult,
)

__all__ = ["StartConformance"]

_MS = timedelta(milliseconds=1)


def _started_payload(run: RunStart, **changes: Any) -> bytes:
    fields: dict[str, Any] = {
        "parent_run_id": run.parent_run_id,
        "predecessor_run_id": run.predecessor_run_id,
        "labels": dict(run.labels),
    }
    fields.update(changes)
    return payloads.RunStarted(**fields).encode()


# A bad ``started`` candidate: how to spoil it, the error and the field it names.
_BAD_STARTED: dict[str, tuple[Callable[[Record, RunStart], Record], type[Exception], str]] = {
    "type": (lambda r, _: _with(r, type=payloads.RUN_COMPLETED), ValidationError, "started.type"),
    "run_id": (lambda r, _: _with(r, run_id="someone-else"), RecordOwnerMismatchError, "run_id"),
    "agent_id": (lambda r, _: _with(r, agent_id="imposter"), RecordOwnerMismatchError, "agent_id"),
    "session_id": (
        lambda r, _: _with(r, session_id="elsewhere"),
        RecordOwnerMismatchError,
        "session_id",
    ),
    "timestamp": (
        lambda r, _: _with(r, timestamp=r.timestamp + _MS),
        ValidationError,
        "started.timestamp",
    ),
    "labels": (
        lambda r, run: _with(r, payload=_started_payload(run, labels={"team": "other"})),
        ValidationError,
        "started.payload.labels",
    ),
    "parent": (
        lambda r, run: _with(r, payload=_started_payload(run, parent_run_id="a-parent")),
        ValidationError,
        "started.payload.parent_run_id",
    ),
    "predecessor": (
        lambda r, run: _with(r, payload=_started_payload(run, predecessor_run_id="a-pred")),
        ValidationError,
        "started.payload.predecessor_run_id",
    ),
    "unknown_field": (
        lambda r, _: _with(r, payload=b'{"labels":{"team":"a"},"extra":1}'),
        ValidationError,
        "started.payload",
    ),
    "missing_labels": (
        lambda r, _: _with(r, payload=b"{}"),
        ValidationError,
        "started.payload.labels",
    ),
    "second_value": (
        lambda r, _: _with(r, payload=b'{"labels":{"team":"a"}} {}'),
        ValidationError,
        "started.payload",
    ),
    "not_an_object": (lambda r, _: _with(r, payload=b"[]"), ValidationError, "started.payload"),
    "invalid_utf8": (
        lambda r, _: _with(r, payload=b'{"labels":{"team":"\xff"}}'),
        ValidationError,
        "started.payload",
    ),
    "empty_payload": (lambda r, _: _with(r, payload=b""), ValidationError, "started.payload"),
    "preset_id": (lambda r, _: _with(r, id="7"), ValidationError, "started.id"),
    "empty_key": (lambda r, _: _with(r, event_key=""), ValidationError, "started.event_key"),
}

# A bad ``canceled`` candidate, checked even when the session is active [C2].
_BAD_CANCELED: dict[str, tuple[Callable[[Record, RootRunStart], Record], type[Exception], str]] = {
    "type": (lambda r, _: _with(r, type=payloads.RUN_STARTED), ValidationError, "canceled.type"),
    "run_id": (lambda r, _: _with(r, run_id="someone-else"), RecordOwnerMismatchError, "run_id"),
    "agent_id": (lambda r, _: _with(r, agent_id="imposter"), RecordOwnerMismatchError, "agent_id"),
    "timestamp": (
        lambda r, _: _with(r, timestamp=r.timestamp + _MS),
        ValidationError,
        "canceled.timestamp",
    ),
    "same_key_as_started": (
        lambda r, cmd: _with(r, event_key=cmd.started.event_key),
        ValidationError,
        "canceled.event_key",
    ),
    "reason": (
        lambda r, cmd: RecordBuilder(cmd.run).completed(
            RunStatus.CANCELED, at=cmd.run.started_at, reason="user_requested"
        ),
        ValidationError,
        "canceled.payload.cancellation.reason",
    ),
    "engine_reason": (
        lambda r, cmd: RecordBuilder(cmd.run).completed(RunStatus.CANCELED, at=cmd.run.started_at),
        ValidationError,
        "canceled.payload.cancellation.reason",
    ),
    "status": (
        lambda r, cmd: RecordBuilder(cmd.run).completed(RunStatus.COMPLETED, at=cmd.run.started_at),
        ValidationError,
        "canceled.payload.status",
    ),
    "labels": (
        lambda r, cmd: RecordBuilder(
            msgspec.structs.replace(cmd.run, labels={"team": "other"})
        ).completed(RunStatus.CANCELED, at=cmd.run.started_at, reason=payloads.SESSION_ENDED),
        ValidationError,
        "canceled.payload.labels",
    ),
    "garbage": (lambda r, _: _with(r, payload=b"{not json"), ValidationError, "canceled.payload"),
    "failure": (
        lambda r, cmd: RecordBuilder(cmd.run).completed(
            RunStatus.CANCELED,
            at=cmd.run.started_at,
            reason=payloads.SESSION_ENDED,
            failure=payloads.Failure(message="boom"),
        ),
        ValidationError,
        "canceled.payload.failure",
    ),
}


def _changed(run: RecordBuilder, change: str) -> tuple[RootRunStart, str, object, object]:
    """A retry of ``run``'s start that differs in ``change``, the field and both values."""
    cmd = run.root_start()
    started = cmd.started
    later = run.run.started_at + timedelta(seconds=1)
    pred = run.run.run_id + "-pred"
    respelled = b'{ "labels": { "team": "a" } }'
    assert payloads.RunStarted.decode(respelled) == payloads.RunStarted.decode(started.payload)
    cases: dict[str, tuple[RootRunStart, str, object, object]] = {
        "agent_id": (
            _rebuilt(run, agent_id="other-agent").root_start(),
            "run.agent_id",
            "agent",
            "other-agent",
        ),
        "started_at": (
            _rebuilt(run, started_at=later).root_start(),
            "run.started_at",
            run.run.started_at,
            later,
        ),
        "labels": (
            _rebuilt(run, labels={"team": "b"}).root_start(),
            "run.labels",
            {"team": "a"},
            {"team": "b"},
        ),
        "predecessor_run_id": (
            _rebuilt(run, predecessor_run_id=pred).root_start(),
            "run.predecessor_run_id",
            "",
            pred,
        ),
        "started.event_key": (
            msgspec.structs.replace(cmd, started=_with(started, event_key="another-start")),
            "started.event_key",
            "run_started",
            "another-start",
        ),
        "started.turn_id": (
            msgspec.structs.replace(cmd, started=_with(started, turn_id="turn-2")),
            "started.turn_id",
            "turn-1",
            "turn-2",
        ),
        "started.payload": (
            msgspec.structs.replace(cmd, started=_with(started, payload=respelled)),
            "started.payload",
            started.payload,
            respelled,
        ),
    }
    return cases[change]


class StartConformance(ConformanceBase):
    """Capability: starting root runs, [C2] stops, exact retries and conflicts."""

    # ------------------------------------------------------------- first start

    async def test_root_start_saves_run_and_run_started(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[L1] [O1] a root start in an active session: run ``running`` plus one ``run_started``."""
        sid = await world.session("s")
        run = world.run("r", session=sid, labels={"team": "a"}, turn_id="turn-1")
        rid = run.run.run_id
        cmd = run.root_start()
        result = await world.store.start_root_run(cmd)
        assert result == StartResult(
            outcome=StartOutcome.PROCEED,
            run_status=RunStatus.RUNNING,
            started=AppendResult(id="1", inserted=True, session_status=SessionStatus.ACTIVE),
            canceled=None,
            parent_record=None,
        )
        assert await other_store.load_run(rid) == RunMeta(
            run_id=rid,
            agent_id="agent",
            session_id=sid,
            parent_run_id="",
            status=RunStatus.RUNNING,
            start_outcome=StartOutcome.PROCEED,
            started_at=run.run.started_at,
            updated_at=run.run.started_at,
            labels={"team": "a"},
            cancellation_reason="",
            successor_run_id="",
            last_record_id="1",
        )
        assert await _log(other_store, rid) == [_with(cmd.started, id="1")]

    async def test_root_run_started_agrees_with_the_command(self, world: World) -> None:
        """[J1] [L1] the stored ``run_started`` has the run's start time, labels and no parent."""
        sid = await world.session("s")
        run = await world.root("r", session=sid, labels={"team": "a", "tier": "gold"})
        (record,) = await _log(world.store, run.run.run_id)
        assert (record.id, record.type, record.event_key) == ("1", "run_started", "run_started")
        assert record.timestamp == run.run.started_at
        assert record.timestamp.utcoffset() == timedelta(0)
        assert (record.run_id, record.agent_id, record.session_id) == (
            run.run.run_id,
            "agent",
            sid,
        )
        payload = payloads.RunStarted.decode(record.payload)
        assert payload == payloads.RunStarted(labels={"team": "a", "tier": "gold"})

    async def test_root_starts_share_the_session_log(self, world: World) -> None:
        """[L1] each run numbers its own records from "1"; the session log interleaves them."""
        sid = await world.session("s")
        a = await world.root("a", session=sid)
        b = await world.root("b", session=sid)
        assert (await world.store.append_run_record(world.note(a, "n"))).id == "2"
        assert (await world.store.append_run_record(world.note(b, "n"))).id == "2"
        page = await world.store.list_session_run_records(sid)
        assert [(r.run_id, r.id, r.type) for r in page.records] == [
            (a.run.run_id, "1", "run_started"),
            (b.run.run_id, "1", "run_started"),
            (a.run.run_id, "2", "planner_note"),
            (b.run.run_id, "2", "planner_note"),
        ]

    async def test_root_start_validates_the_run_identity(self, world: World) -> None:
        """[L1] a malformed run identity is a ValidationError and creates nothing."""
        sid = await world.session("s")
        rid = world.track_run("r")
        base = RunStart(run_id=rid, agent_id="agent", session_id=sid, started_at=world.now())
        cases: list[tuple[RunStart, str]] = [
            (msgspec.structs.replace(base, run_id=""), "run.run_id"),
            (msgspec.structs.replace(base, agent_id=""), "run.agent_id"),
            (msgspec.structs.replace(base, session_id=""), "run.session_id"),
            (msgspec.structs.replace(base, parent_run_id=world.id("p")), "run.parent_run_id"),
            (msgspec.structs.replace(base, predecessor_run_id=rid), "run.predecessor_run_id"),
            (msgspec.structs.replace(base, started_at=datetime(2026, 1, 1)), "run.started_at"),
            (
                msgspec.structs.replace(
                    base, started_at=datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=UTC)
                ),
                "run.started_at",
            ),
            (msgspec.structs.replace(base, labels={"n": 1}), "run.labels"),
        ]
        for bad, field in cases:
            async with world.unchanged():
                with pytest.raises(ValidationError) as e:
                    await world.store.start_root_run(RecordBuilder(bad).root_start())
            assert e.value.field == field, bad

    @pytest.mark.parametrize("case", sorted(_BAD_STARTED))
    async def test_root_start_validates_the_started_record(self, world: World, case: str) -> None:
        """[J1] [L1] a ``run_started`` that does not fit the run is refused; nothing is written."""
        spoil, error, field = _BAD_STARTED[case]
        sid = await world.session("s")
        run = world.run("r", session=sid, labels={"team": "a"})
        cmd = run.root_start()
        bad = msgspec.structs.replace(cmd, started=spoil(cmd.started, run.run))
        async with world.unchanged():
            with pytest.raises(error) as e:
                await world.store.start_root_run(bad)
        assert getattr(e.value, "field", None) == field
        if isinstance(e.value, RecordOwnerMismatchError):
            assert e.value.expected == getattr(run.run, field)

    @pytest.mark.parametrize("case", sorted(_BAD_CANCELED))
    async def test_root_start_validates_the_canceled_candidate(
        self, world: World, case: str
    ) -> None:
        """[C2] [J1] the unused ``canceled`` candidate is validated even in an active session."""
        spoil, error, field = _BAD_CANCELED[case]
        sid = await world.session("s")
        run = world.run("r", session=sid, labels={"team": "a"})
        cmd = run.root_start()
        bad = msgspec.structs.replace(cmd, canceled=spoil(cmd.canceled, cmd))
        async with world.unchanged():
            with pytest.raises(error) as e:
                await world.store.start_root_run(bad)
        assert getattr(e.value, "field", None) == field

    async def test_root_started_record_is_validated_when_the_session_ended(
        self, world: World
    ) -> None:
        """[C2] [J1] a start that would stop still validates its ``run_started`` candidate."""
        sid = await world.session("s")
        await world.store.end_session(sid, ended_at=world.now())
        run = world.run("r", session=sid)
        cmd = run.root_start()
        late = _with(cmd.started, timestamp=cmd.started.timestamp + _MS)
        async with world.unchanged():
            with pytest.raises(ValidationError) as e:
                await world.store.start_root_run(msgspec.structs.replace(cmd, started=late))
        assert e.value.field == "started.timestamp"

    # ---------------------------------------------------------- ended session

    async def test_root_start_in_ended_session_stops(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[C2] [O1] an ended session: ``run_started`` then canceled ``run_completed``, ``stop``."""
        sid = await world.session("s")
        await world.store.end_session(sid, ended_at=world.now())
        run = world.run("r", session=sid, labels={"team": "a"})
        rid = run.run.run_id
        cmd = run.root_start()
        result = await world.store.start_root_run(cmd)
        assert result == StartResult(
            outcome=StartOutcome.STOP,
            run_status=RunStatus.CANCELED,
            started=AppendResult(id="1", inserted=True, session_status=SessionStatus.ENDED),
            canceled=AppendResult(id="2", inserted=True, session_status=SessionStatus.ENDED),
            parent_record=None,
        )
        meta = await other_store.load_run(rid)
        assert (meta.status, meta.start_outcome, meta.cancellation_reason) == (
            RunStatus.CANCELED,
            StartOutcome.STOP,
            "session_ended",
        )
        assert meta.updated_at == run.run.started_at
        records = await _log(other_store, rid)
        assert records == [_with(cmd.started, id="1"), _with(cmd.canceled, id="2")]
        assert [r.type for r in records] == ["run_started", "run_completed"]
        completed = payloads.RunCompleted.decode(records[1].payload)
        assert completed == payloads.RunCompleted(
            status="canceled",
            phase="canceled",
            cancellation=payloads.CancellationNote(reason="session_ended"),
            labels={"team": "a"},
        )
        async with world.unchanged():
            with pytest.raises(SuspensionNotFoundError):
                await other_store.load_run_suspension(rid)

    async def test_root_stopped_run_takes_no_more_work(self, world: World) -> None:
        """[C2] a stopped run accepts no record, cancellation, suspension or other terminal."""
        sid = await world.session("s")
        await world.store.end_session(sid, ended_at=world.now())
        run = world.run("r", session=sid)
        rid = run.run.run_id
        await world.store.start_root_run(run.root_start())
        refusals: list[Callable[[], Awaitable[object]]] = [
            lambda: world.store.append_run_record(world.note(run, "note")),
            lambda: world.store.record_run_cancellation(run.cancellation("user", at=world.now())),
            lambda: world.store.record_run_suspension(
                run.suspension(Checkpoint(id="cp", data=b"x"), at=world.now())
            ),
        ]
        for call in refusals:
            async with world.unchanged():
                with pytest.raises(RunNotActiveError) as e:
                    await call()
            assert (e.value.run_id, e.value.expected, e.value.got) == (rid, "running", "canceled")
        async with world.unchanged():
            with pytest.raises(RunTerminalConflictError) as t:
                await world.store.record_run_terminal(
                    run.terminal(RunStatus.COMPLETED, at=world.now())
                )
        assert (t.value.run_id, t.value.field, t.value.expected, t.value.got) == (
            rid,
            "status",
            "canceled",
            "completed",
        )

    async def test_root_stopped_start_retry_returns_the_stop(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[C2] [X1] [X4] a retried stopped start returns ``stop``, ids "1" and "2", unchanged."""
        sid = await world.session("s")
        await world.store.end_session(sid, ended_at=world.now())
        run = world.run("r", session=sid)
        cmd = run.root_start()
        await world.store.start_root_run(cmd)
        async with world.unchanged():
            retry = await other_store.start_root_run(cmd)
        assert retry == StartResult(
            outcome=StartOutcome.STOP,
            run_status=RunStatus.CANCELED,
            started=AppendResult(id="1", inserted=False, session_status=SessionStatus.ENDED),
            canceled=AppendResult(id="2", inserted=False, session_status=SessionStatus.ENDED),
        )

    @pytest.mark.parametrize(
        ("change", "field"),
        [("event_key", "canceled.event_key"), ("turn_id", "canceled.turn_id")],
    )
    async def test_root_stopped_start_retry_with_another_stop_record_conflicts(
        self, world: World, change: str, field: str
    ) -> None:
        """[C2] [X2] the stop record chosen first is remembered; another one is a conflict."""
        sid = await world.session("s")
        await world.store.end_session(sid, ended_at=world.now())
        run = world.run("r", session=sid)
        cmd = run.root_start()
        await world.store.start_root_run(cmd)
        value = {"event_key": "another-stop", "turn_id": "turn-9"}[change]
        changed = msgspec.structs.replace(cmd, canceled=_with(cmd.canceled, **{change: value}))
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_root_run(changed)
        assert (e.value.run_id, e.value.field, e.value.got) == (run.run.run_id, field, value)
        assert e.value.expected == getattr(cmd.canceled, change)

    # ---------------------------------------------------------------- retries

    async def test_root_exact_retry_while_running(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[X1] [X4] an exact retry returns the original id with ``inserted=False``."""
        sid = await world.session("s")
        run = world.run("r", session=sid)
        cmd = run.root_start()
        await world.store.start_root_run(cmd)
        for store in (world.store, other_store):
            async with world.unchanged():
                retry = await store.start_root_run(cmd)
            assert retry == StartResult(
                outcome=StartOutcome.PROCEED,
                run_status=RunStatus.RUNNING,
                started=AppendResult(id="1", inserted=False, session_status=SessionStatus.ACTIVE),
            )

    @pytest.mark.parametrize(
        "status",
        [RunStatus.SUSPENDED, RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED],
    )
    async def test_root_retry_after_the_run_stopped_returns_the_original_start(
        self, world: World, status: RunStatus
    ) -> None:
        """[X4] after the run stopped, a retry says ``proceed``, the current status and id "1"."""
        sid = await world.session("s")
        run = world.run("r", session=sid)
        rid = run.run.run_id
        cmd = run.root_start()
        await world.store.start_root_run(cmd)
        await world.store.append_run_record(world.note(run, "work"))
        if status is RunStatus.SUSPENDED:
            await world.suspend(run)
        elif status is RunStatus.CANCELED:
            await world.store.record_run_cancellation(run.cancellation("user", at=world.now()))
            await world.store.record_run_terminal(
                run.terminal(RunStatus.CANCELED, at=world.now(), reason="user")
            )
        else:
            await world.finish(run, status)
        before = await world.store.load_run(rid)
        assert before.updated_at > run.run.started_at
        async with world.unchanged():
            retry = await world.store.start_root_run(cmd)
        assert retry == StartResult(
            outcome=StartOutcome.PROCEED,
            run_status=status,
            started=AppendResult(id="1", inserted=False, session_status=SessionStatus.ACTIVE),
        )
        after = await world.store.load_run(rid)
        assert after == before
        assert after.updated_at == before.updated_at

    async def test_root_retry_after_the_session_ended_keeps_proceed(self, world: World) -> None:
        """[X4] [O1] a start accepted while active stays ``proceed``; no stop record is added."""
        sid = await world.session("s")
        run = world.run("r", session=sid)
        cmd = run.root_start()
        await world.store.start_root_run(cmd)
        await world.store.end_session(sid, ended_at=world.now())
        async with world.unchanged():
            retry = await world.store.start_root_run(cmd)
        assert retry == StartResult(
            outcome=StartOutcome.PROCEED,
            run_status=RunStatus.RUNNING,
            started=AppendResult(id="1", inserted=False, session_status=SessionStatus.ENDED),
        )
        assert [r.type for r in await _log(world.store, run.run.run_id)] == ["run_started"]

    @pytest.mark.parametrize(
        "change",
        [
            "agent_id",
            "started_at",
            "labels",
            "predecessor_run_id",
            "started.event_key",
            "started.turn_id",
            "started.payload",
        ],
    )
    async def test_root_changed_retry_is_a_conflict(
        self, world: World, other_store: AdminStore, change: str
    ) -> None:
        """[X2] [X3] a retry differing in any value the first start fixed is RunConflictError."""
        sid = await world.session("s")
        run = world.run("r", session=sid, labels={"team": "a"}, turn_id="turn-1")
        await world.store.start_root_run(run.root_start())
        changed, field, expected, got = _changed(run, change)
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await other_store.start_root_run(changed)
        assert (e.value.run_id, e.value.field, e.value.expected, e.value.got) == (
            run.run.run_id,
            field,
            expected,
            got,
        )

    async def test_root_changed_retry_after_completion_is_a_conflict(self, world: World) -> None:
        """[X3] [X4] a closed run's start cannot be replayed with other labels."""
        sid = await world.session("s")
        run = world.run("r", session=sid, labels={"team": "a"})
        await world.store.start_root_run(run.root_start())
        await world.finish(run)
        changed = _rebuilt(run, labels={"team": "b"}).root_start()
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_root_run(changed)
        assert e.value.field == "run.labels"

    async def test_root_run_id_taken_in_another_session_is_a_conflict(self, world: World) -> None:
        """[X3] a run id belongs to the session that started it first."""
        first = await world.session("first")
        second = await world.session("second")
        run = await world.root("r", session=first)
        moved = _rebuilt(run, session_id=second).root_start()
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_root_run(moved)
        assert (e.value.run_id, e.value.field, e.value.expected, e.value.got) == (
            run.run.run_id,
            "run.session_id",
            first,
            second,
        )
        assert await world.store.list_runs_by_session(second) == []

    async def test_root_run_id_of_a_one_shot_run_is_a_conflict(self, world: World) -> None:
        """[X3] a sessionless run's id cannot be started again as a session run."""
        sid = await world.session("s")
        loose = await world.one_shot("r")
        moved = _rebuilt(loose, session_id=sid).root_start()
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_root_run(moved)
        assert (e.value.field, e.value.expected, e.value.got) == ("run.session_id", "", sid)

    async def test_root_child_run_id_cannot_become_a_root(self, world: World) -> None:
        """[X3] a run started as a child cannot be started again as a root run."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        child, _ = await world.child("child", parent=parent)
        as_root = _rebuilt(child, parent_run_id="").root_start()
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_root_run(as_root)
        assert (e.value.run_id, e.value.field, e.value.expected, e.value.got) == (
            child.run.run_id,
            "run.parent_run_id",
            parent.run.run_id,
            "",
        )

    async def test_root_rejected_start_leaves_no_run(self, world: World) -> None:
        """[L1] a refused first start leaves no run and no record behind."""
        sid = await world.session("s")
        run = world.run("r", session=sid)
        cmd = run.root_start()
        bad = msgspec.structs.replace(cmd, started=_with(cmd.started, type="planner_note"))
        async with world.unchanged():
            with pytest.raises(ValidationError):
                await world.store.start_root_run(bad)
        async with world.unchanged():
            with pytest.raises(RunNotFoundError) as e:
                await world.store.load_run(run.run.run_id)
        assert e.value.run_id == run.run.run_id
        assert await world.store.list_runs_by_session(sid) == []
        assert (await world.store.list_session_run_records(sid)).records == ()
        # The proper command still starts the run from scratch.
        assert (await world.store.start_root_run(cmd)).started.inserted
