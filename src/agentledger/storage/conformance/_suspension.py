"""Conformance: suspending a run with its private checkpoint [L6] [X1] [X2] [E1].

The checkpoint, the ``suspended`` status and the ``run_suspended`` record are
one operation; a suspended run takes no new records; exact retries return the
original id and any other difference is a conflict. Repair stores a missing
suspension only while the run is still running and never overrides.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from msgspec.structs import replace

from agentledger.errors import (
    RecordConflictError,
    RecordOwnerMismatchError,
    RunNotActiveError,
    RunNotFoundError,
    RunSuspensionConflictError,
    SuspensionNotFoundError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._world import AdminStore, World
from agentledger.storage.conformance._world import run_log as _log
from agentledger.storage.types import (
    Checkpoint,
    RepairOutcome,
    RunStatus,
    RunSuspension,
    SessionStatus,
)

__all__ = ["SuspensionConformance"]

_DATA = b"\x00\xff\xfe binary \x80 not utf-8 \x00"


def _suspension(
    world: World, run: RecordBuilder, checkpoint_id: str = "cp", data: bytes = _DATA, **kw: Any
) -> RunSuspension:
    return run.suspension(Checkpoint(id=checkpoint_id, data=data), at=world.now(), **kw)


def _with_record(cmd: RunSuspension, **changes: Any) -> RunSuspension:
    return replace(cmd, record=replace(cmd.record, **changes))


async def _end(world: World, run: RecordBuilder, status: RunStatus) -> None:
    reason = payloads.ENGINE_CANCELED if status is RunStatus.CANCELED else ""
    await world.store.record_run_terminal(run.terminal(status, at=world.now(), reason=reason))


class SuspensionConformance(ConformanceBase):
    """Capability: suspension, its checkpoint, retries, conflicts and repair."""

    # ---------------------------------------------------------------- storing

    async def test_suspension_stores_checkpoint_status_and_record(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[L6] checkpoint, ``suspended`` status and ``run_suspended`` land in one operation."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.append_run_record(world.note(run, "n"))
        cmd = _suspension(world, run, "cp-1", pending_count=2, required_tools=("ask", "confirm"))
        result = await world.store.record_run_suspension(cmd)
        assert (result.id, result.inserted, result.session_status) == (
            "3",
            True,
            SessionStatus.ACTIVE,
        )
        meta = await other_store.load_run(run.run.run_id)
        assert meta.status is RunStatus.SUSPENDED
        assert meta.updated_at == cmd.record.timestamp
        assert await other_store.load_run_suspension(run.run.run_id) == cmd.checkpoint
        log = await _log(other_store, run.run.run_id)
        assert log[-1] == replace(cmd.record, id="3")
        assert payloads.RunSuspended.decode(log[-1].payload) == payloads.RunSuspended(
            suspension_id="cp-1", version=1, pending_count=2, required_tools=("ask", "confirm")
        )

    @pytest.mark.parametrize(
        "data",
        [_DATA, bytes(range(256)) * 512, b'{"json": "as bytes",  "kept": 1}'],
        ids=["binary", "128KiB", "json-ish"],
    )
    async def test_suspension_checkpoint_bytes_are_exact(
        self, world: World, other_store: AdminStore, data: bytes
    ) -> None:
        """[L6] ``load_run_suspension`` returns the checkpoint bytes exactly as given."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.record_run_suspension(_suspension(world, run, "cp", data))
        checkpoint = await other_store.load_run_suspension(run.run.run_id)
        assert checkpoint.id == "cp"
        assert checkpoint.data == data

    async def test_suspension_on_ended_session_is_allowed(self, world: World) -> None:
        """[D2] [L6] a run still going after its session ended may still suspend."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.end_session(sid, ended_at=world.now())
        result = await world.store.record_run_suspension(_suspension(world, run))
        assert (result.inserted, result.session_status) == (True, SessionStatus.ENDED)

    async def test_suspension_of_sessionless_run_reports_no_session(self, world: World) -> None:
        """[L6] a one-shot run may suspend; ``session_status`` is None."""
        run = await world.one_shot("r")
        result = await world.store.record_run_suspension(_suspension(world, run))
        assert (result.id, result.inserted, result.session_status) == ("2", True, None)

    # ---------------------------------------------------------------- retries

    async def test_suspension_exact_retry_returns_original_id(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[X1] repeating the suspension changes nothing and returns its id."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = _suspension(world, run)
        first = await world.store.record_run_suspension(cmd)
        async with world.unchanged():
            retry = await world.store.record_run_suspension(cmd)
            again = await other_store.record_run_suspension(cmd)
        assert (retry.id, retry.inserted) == (first.id, False)
        assert (again.id, again.inserted) == (first.id, False)

    async def test_suspension_retry_is_exact_after_a_successor_started(self, world: World) -> None:
        """[X1] [K3] a late retry still matches once a continuation took over the run."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = _suspension(world, run)
        first = await world.store.record_run_suspension(cmd)
        await world.root("next", session=sid, predecessor=run.run.run_id)
        async with world.unchanged():
            retry = await world.store.record_run_suspension(cmd)
        assert (retry.id, retry.inserted) == (first.id, False)

    async def test_suspension_changed_checkpoint_bytes_conflict(self, world: World) -> None:
        """[X3] the same record with other checkpoint bytes is a conflict, never an overwrite."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = _suspension(world, run)
        await world.store.record_run_suspension(cmd)
        changed = replace(cmd, checkpoint=Checkpoint(id="cp", data=_DATA + b"!"))
        async with world.unchanged():
            with pytest.raises(RunSuspensionConflictError) as info:
                await world.store.record_run_suspension(changed)
        err = info.value
        assert (err.run_id, err.field) == (run.run.run_id, "checkpoint")
        assert (err.expected, err.got) == (cmd.checkpoint, changed.checkpoint)
        assert await world.store.load_run_suspension(run.run.run_id) == cmd.checkpoint

    async def test_suspension_changed_checkpoint_id_conflicts(self, world: World) -> None:
        """[X3] another checkpoint id (and its matching record) under the same key conflicts."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = _suspension(world, run, "cp-1")
        await world.store.record_run_suspension(cmd)
        other = run.suspension(Checkpoint(id="cp-2", data=_DATA), at=cmd.record.timestamp)
        async with world.unchanged():
            with pytest.raises(RunSuspensionConflictError) as info:
                await world.store.record_run_suspension(other)
        assert info.value.field == "record.payload"
        assert (info.value.expected, info.value.got) == (cmd.record.payload, other.record.payload)

    async def test_suspension_with_another_key_conflicts(self, world: World) -> None:
        """[X2] the suspension record is the one chosen first; another key is a conflict."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = _suspension(world, run)
        await world.store.record_run_suspension(cmd)
        other = _with_record(cmd, event_key="suspended-again")
        async with world.unchanged():
            with pytest.raises(RunSuspensionConflictError) as info:
                await world.store.record_run_suspension(other)
        assert (info.value.field, info.value.expected, info.value.got) == (
            "record.event_key",
            "run_suspended",
            "suspended-again",
        )

    @pytest.mark.parametrize("field", ["timestamp", "payload", "turn_id"])
    async def test_suspension_changed_record_conflicts(self, world: World, field: str) -> None:
        """[X1] [X3] same key, other time, payload or turn: a conflict."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = _suspension(world, run)
        await world.store.record_run_suspension(cmd)
        change: dict[str, Any] = {
            "timestamp": cmd.record.timestamp + timedelta(milliseconds=1),
            "payload": payloads.RunSuspended(
                suspension_id="cp", version=1, pending_count=5, required_tools=()
            ).encode(),
            "turn_id": "turn-x",
        }
        async with world.unchanged():
            with pytest.raises(RunSuspensionConflictError) as info:
                await world.store.record_run_suspension(_with_record(cmd, **{field: change[field]}))
        assert info.value.field == f"record.{field}"
        assert info.value.got == change[field]

    # ---------------------------------------------------- a suspended run

    async def test_suspended_run_accepts_no_new_records(self, world: World) -> None:
        """[L6] a suspended run takes no ordinary record, terminal or cancellation."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.record_run_suspension(_suspension(world, run))
        rid = run.run.run_id
        note = world.note(run, "late")
        terminal = run.terminal(RunStatus.COMPLETED, at=world.now())
        cancellation = run.cancellation("user", at=world.now())
        async with world.unchanged():
            with pytest.raises(RunNotActiveError) as info:
                await world.store.append_run_record(note)
            assert (info.value.run_id, info.value.got) == (rid, "suspended")
            with pytest.raises(RunNotActiveError) as info:
                await world.store.record_run_terminal(terminal)
            assert (info.value.run_id, info.value.got) == (rid, "suspended")
            with pytest.raises(RunNotActiveError) as info:
                await world.store.record_run_cancellation(cancellation)
            assert (info.value.run_id, info.value.got) == (rid, "suspended")

    async def test_suspension_of_another_checkpoint_is_refused_once_suspended(
        self, world: World
    ) -> None:
        """[X2] [X3] a second, different suspension of a suspended run is a conflict."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.record_run_suspension(_suspension(world, run, "cp-1"))
        second = _suspension(world, run, "cp-2", event_key="second")
        async with world.unchanged():
            with pytest.raises(RunSuspensionConflictError):
                await world.store.record_run_suspension(second)
        assert (await world.store.load_run_suspension(run.run.run_id)).id == "cp-1"

    @pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED])
    async def test_suspension_of_finished_run_is_refused(
        self, world: World, status: RunStatus
    ) -> None:
        """[L6] only a running run can suspend."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await _end(world, run, status)
        async with world.unchanged():
            with pytest.raises(RunNotActiveError) as info:
                await world.store.record_run_suspension(_suspension(world, run))
        assert (info.value.expected, info.value.got) == ("running", status.value)

    async def test_suspension_not_found_without_checkpoint(self, world: World) -> None:
        """[L6] a run that never suspended has no checkpoint: SuspensionNotFoundError."""
        sid = await world.session("s")
        running = await world.root("running", session=sid)
        done = await world.root("done", session=sid)
        await world.finish(done)
        for run in (running, done):
            with pytest.raises(SuspensionNotFoundError) as info:
                await world.store.load_run_suspension(run.run.run_id)
            assert info.value.run_id == run.run.run_id
        ghost = world.id("ghost")
        with pytest.raises(RunNotFoundError) as missing:
            await world.store.load_run_suspension(ghost)
        assert missing.value.run_id == ghost

    # ------------------------------------------------------------- validation

    async def test_suspension_id_must_equal_checkpoint_id(self, world: World) -> None:
        """[L6] [J1] ``run_suspended.suspension_id`` names the checkpoint stored with it."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = _suspension(world, run, "cp-1")
        bad = replace(cmd, checkpoint=Checkpoint(id="cp-2", data=_DATA))
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_suspension(bad)
        err = info.value
        assert (err.field, err.expected, err.got) == (
            "record.payload.suspension_id",
            repr("cp-2"),
            "cp-1",
        )

    @pytest.mark.parametrize(
        ("field", "make"),
        [
            ("checkpoint.id", lambda c: replace(c, checkpoint=Checkpoint(id="", data=_DATA))),
            ("checkpoint.data", lambda c: replace(c, checkpoint=Checkpoint(id="cp", data="x"))),  # type: ignore[arg-type]
            ("checkpoint", lambda c: replace(c, checkpoint=None)),
            ("record.type", lambda c: _with_record(c, type="planner_note")),
            ("record.timestamp", lambda c: _with_record(c, timestamp=None)),
            ("record.id", lambda c: _with_record(c, id="9")),
        ],
    )
    async def test_suspension_malformed_command_is_refused(
        self, world: World, field: str, make: Any
    ) -> None:
        """[L6] a malformed checkpoint or record is a ValidationError and writes nothing."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        bad = make(_suspension(world, run, "cp"))
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_suspension(bad)
        assert info.value.field == field

    async def test_suspension_negative_pending_count_is_refused(self, world: World) -> None:
        """[L6] ``pending_count`` counts what the run waits for; it is never negative."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_suspension(_suspension(world, run, pending_count=-1))
        assert (info.value.field, info.value.got) == ("record.payload.pending_count", -1)

    async def test_suspension_record_must_belong_to_the_run(self, world: World) -> None:
        """[L8] the record names the run's agent and session, and the command's run."""
        sid = await world.session("s")
        other_sid = await world.session("other")
        run = await world.root("r", session=sid)
        other = await world.root("o", session=sid)
        cmd = _suspension(world, run)
        cases = [
            (_with_record(cmd, agent_id="intruder"), run.run.run_id, "agent_id"),
            (_with_record(cmd, session_id=other_sid), run.run.run_id, "session_id"),
            (replace(cmd, run_id=other.run.run_id), other.run.run_id, "run_id"),
        ]
        async with world.unchanged():
            for bad, rid, field in cases:
                with pytest.raises(RecordOwnerMismatchError) as info:
                    await world.store.record_run_suspension(bad)
                assert (info.value.run_id, info.value.field) == (rid, field)

    async def test_suspension_run_id_is_required(self, world: World) -> None:
        """[L6] a RunSuspension without a run id is a ValidationError."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = replace(_suspension(world, run), run_id="")
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_suspension(cmd)
        assert (info.value.field, info.value.got) == ("run_id", "")

    async def test_suspension_of_unknown_run_is_not_found(self, world: World) -> None:
        """[L6] suspending a run that was never started is RunNotFoundError."""
        sid = await world.session("s")
        ghost = world.run("ghost", session=sid)
        async with world.unchanged():
            with pytest.raises(RunNotFoundError) as info:
                await world.store.record_run_suspension(_suspension(world, ghost))
        assert info.value.run_id == ghost.run.run_id

    async def test_suspension_key_taken_by_an_ordinary_record_conflicts(self, world: World) -> None:
        """[X3] the ``run_suspended`` record cannot take another record's key."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.append_run_record(world.note(run, "taken"))
        async with world.unchanged():
            with pytest.raises(RecordConflictError):
                await world.store.record_run_suspension(_suspension(world, run, event_key="taken"))
        assert (await world.store.load_run(run.run.run_id)).status is RunStatus.RUNNING

    # ---------------------------------------------------------------- repair

    async def test_suspension_repair_stores_while_running(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[E1] repair stores the suspension of a run still running in the store."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = _suspension(world, run)
        result = await world.store.repair_run_suspension(cmd)
        assert (result.outcome, result.status) == (RepairOutcome.STORED, RunStatus.SUSPENDED)
        assert result.record == replace(cmd.record, id="2")
        assert await other_store.load_run_suspension(run.run.run_id) == cmd.checkpoint
        meta = await other_store.load_run(run.run.run_id)
        assert (meta.status, meta.updated_at) == (RunStatus.SUSPENDED, cmd.record.timestamp)
        assert (await _log(other_store, run.run.run_id))[-1] == result.record

    @pytest.mark.parametrize("first", ["record", "repair"])
    async def test_suspension_repair_reports_already_stored(self, world: World, first: str) -> None:
        """[E1] [X1] repairing with the exact stored suspension reports already_stored."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = _suspension(world, run)
        if first == "record":
            await world.store.record_run_suspension(cmd)
        else:
            await world.store.repair_run_suspension(cmd)
        async with world.unchanged():
            result = await world.store.repair_run_suspension(cmd)
        assert (result.outcome, result.status) == (
            RepairOutcome.ALREADY_STORED,
            RunStatus.SUSPENDED,
        )
        assert result.record == replace(cmd.record, id="2")
        retry = await world.store.record_run_suspension(cmd)
        assert (retry.id, retry.inserted) == ("2", False)

    @pytest.mark.parametrize("change", ["timestamp", "event_key", "checkpoint"])
    async def test_suspension_repair_never_overrides_another_suspension(
        self, world: World, change: str
    ) -> None:
        """[E1] the workflow's own suspension stands; repair reports different_terminal."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        workflow = _suspension(world, run)
        await world.store.record_run_suspension(workflow)
        repair = {
            "timestamp": _with_record(workflow, timestamp=world.now()),
            "event_key": _with_record(workflow, event_key="repair"),
            "checkpoint": replace(workflow, checkpoint=Checkpoint(id="cp", data=b"other")),
        }[change]
        async with world.unchanged():
            result = await world.store.repair_run_suspension(repair)
        assert (result.outcome, result.status) == (
            RepairOutcome.DIFFERENT_TERMINAL,
            RunStatus.SUSPENDED,
        )
        assert result.record == replace(workflow.record, id="2")
        assert await world.store.load_run_suspension(run.run.run_id) == workflow.checkpoint

    @pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED])
    async def test_suspension_repair_after_terminal_reports_the_terminal(
        self, world: World, status: RunStatus
    ) -> None:
        """[E1] a run that ended keeps its ending; repair returns its ``run_completed``."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        reason = payloads.ENGINE_CANCELED if status is RunStatus.CANCELED else ""
        terminal = run.terminal(status, at=world.now(), reason=reason)
        await world.store.record_run_terminal(terminal)
        async with world.unchanged():
            result = await world.store.repair_run_suspension(_suspension(world, run))
        assert (result.outcome, result.status) == (RepairOutcome.DIFFERENT_TERMINAL, status)
        assert result.record == replace(terminal.record, id="2")
        with pytest.raises(SuspensionNotFoundError):
            await world.store.load_run_suspension(run.run.run_id)

    async def test_suspension_repair_validates_its_command(self, world: World) -> None:
        """[E1] [L6] repair refuses malformed commands exactly like the workflow's write."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = _suspension(world, run, "cp-1")
        bad = replace(cmd, checkpoint=Checkpoint(id="cp-2", data=_DATA))
        ghost = world.run("ghost", session=sid)
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.repair_run_suspension(bad)
            assert info.value.field == "record.payload.suspension_id"
            with pytest.raises(RunNotFoundError):
                await world.store.repair_run_suspension(_suspension(world, ghost))
            with pytest.raises(RecordOwnerMismatchError):
                await world.store.repair_run_suspension(_with_record(cmd, agent_id="intruder"))
