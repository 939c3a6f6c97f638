"""Conformance: ending a run with its ``run_completed`` record [L7] [X1] [X2] [X3] [E1].

The final status and the record proving it are one operation; the record
must agree with the status, the run's labels and its cancellation story. A
second, different ending is a conflict; repair stores an ending only while
the run still runs and otherwise reports the workflow's own record.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import pytest
from msgspec.structs import replace

from agentledger.errors import (
    RecordConflictError,
    RecordOwnerMismatchError,
    RunNotActiveError,
    RunNotFoundError,
    RunTerminalConflictError,
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
    RunTerminal,
    SessionStatus,
)

__all__ = ["TerminalConformance"]

LABELS = {"site": "one", "tier": "gold"}
_WIRE = {
    RunStatus.COMPLETED: ("success", "completed"),
    RunStatus.FAILED: ("failed", "failed"),
    RunStatus.CANCELED: ("canceled", "canceled"),
}


def _body(run_status: RunStatus, /, **fields: Any) -> dict[str, Any]:
    """A well-formed ``run_completed`` body for ``run_status`` with the run's labels."""
    wire, phase = _WIRE[run_status]
    body: dict[str, Any] = {"status": wire, "phase": phase, "labels": dict(LABELS)}
    if run_status is RunStatus.CANCELED:
        body["cancellation"] = {"reason": payloads.ENGINE_CANCELED}
    body.update(fields)
    return {k: v for k, v in body.items() if v is not None}


def _terminal(
    world: World, run: RecordBuilder, status: Any, body: dict[str, Any], key: str = "run_completed"
) -> RunTerminal:
    record = run.record(
        payloads.RUN_COMPLETED, msgspec.json.encode(body), event_key=key, at=world.now()
    )
    return RunTerminal(run_id=run.run.run_id, status=status, record=record)


def _end(world: World, run: RecordBuilder, status: RunStatus, **kw: Any) -> RunTerminal:
    reason = payloads.ENGINE_CANCELED if status is RunStatus.CANCELED else ""
    return run.terminal(status, at=world.now(), reason=reason, **kw)


async def _start(world: World, name: str = "r") -> RecordBuilder:
    """A running root run with labels, in a session of its own."""
    sid = await world.session(f"{name}-session")
    return await world.root(name, session=sid, labels=dict(LABELS))


def _with_record(cmd: RunTerminal, **changes: Any) -> RunTerminal:
    return replace(cmd, record=replace(cmd.record, **changes))


class TerminalConformance(ConformanceBase):
    """Capability: terminal status and record, conflicts and repair."""

    # ---------------------------------------------------------------- storing

    @pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED])
    async def test_terminal_stores_status_and_record_together(
        self, world: World, other_store: AdminStore, status: RunStatus
    ) -> None:
        """[L7] the final status and its ``run_completed`` land in one operation."""
        run = await _start(world)
        await world.store.append_run_record(world.note(run, "n"))
        cmd = _end(world, run, status)
        result = await world.store.record_run_terminal(cmd)
        assert (result.id, result.inserted, result.session_status) == (
            "3",
            True,
            SessionStatus.ACTIVE,
        )
        meta = await other_store.load_run(run.run.run_id)
        assert meta.status is status
        assert meta.updated_at == cmd.record.timestamp
        assert meta.started_at == run.run.started_at
        log = await _log(other_store, run.run.run_id)
        assert [r.event_key for r in log] == ["run_started", "n", "run_completed"]
        assert log[-1] == replace(cmd.record, id="3")

    async def test_terminal_failure_details_are_kept(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[L7] [J1] a failed run's ``failure`` survives byte for byte, details included."""
        run = await _start(world)
        failure = payloads.Failure(
            message="tool exploded: caf\u00e9 \U0001f642",
            kind="tool_error",
            code="E42",
            retryable=True,
            details={"attempts": 3, "big": 12345678901234567890, "nested": {"ok": False}},
        )
        cmd = _end(world, run, RunStatus.FAILED, failure=failure)
        await world.store.record_run_terminal(cmd)
        stored = (await _log(other_store, run.run.run_id))[-1]
        assert stored.payload == cmd.record.payload
        decoded = payloads.RunCompleted.decode(stored.payload)
        assert decoded.failure == failure
        assert decoded.labels == LABELS

    async def test_terminal_on_ended_session_is_allowed(self, world: World) -> None:
        """[D2] [L7] a run still going after its session ended may write its final record."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.end_session(sid, ended_at=world.now())
        result = await world.store.record_run_terminal(_end(world, run, RunStatus.COMPLETED))
        assert (result.inserted, result.session_status) == (True, SessionStatus.ENDED)
        assert (await world.store.load_run(run.run.run_id)).status is RunStatus.COMPLETED

    async def test_terminal_of_sessionless_run_reports_no_session(self, world: World) -> None:
        """[L7] a one-shot run's terminal reports ``session_status`` None."""
        run = await world.one_shot("r")
        result = await world.store.record_run_terminal(_end(world, run, RunStatus.FAILED))
        assert (result.id, result.inserted, result.session_status) == ("2", True, None)

    async def test_terminal_run_takes_no_new_records(self, world: World) -> None:
        """[L7] an ended run refuses ordinary records, requests and suspension."""
        run = await _start(world)
        await world.store.record_run_terminal(_end(world, run, RunStatus.COMPLETED))
        rid = run.run.run_id
        note = world.note(run, "late")
        cancellation = run.cancellation("user", at=world.now())
        suspension = run.suspension(Checkpoint(id="cp", data=b"x"), at=world.now())
        async with world.unchanged():
            with pytest.raises(RunNotActiveError) as info:
                await world.store.append_run_record(note)
            assert (info.value.run_id, info.value.got) == (rid, "completed")
            with pytest.raises(RunNotActiveError) as info:
                await world.store.record_run_cancellation(cancellation)
            assert info.value.got == "completed"
            with pytest.raises(RunNotActiveError) as info:
                await world.store.record_run_suspension(suspension)
            assert info.value.got == "completed"

    # ------------------------------------------------------------- agreement

    @pytest.mark.parametrize(
        ("status", "wire"),
        [
            (RunStatus.COMPLETED, "failed"),
            (RunStatus.COMPLETED, "canceled"),
            (RunStatus.FAILED, "success"),
            (RunStatus.CANCELED, "success"),
        ],
    )
    async def test_terminal_payload_status_must_match(
        self, world: World, status: RunStatus, wire: str
    ) -> None:
        """[L7] [J1] the payload's ``status`` agrees with the command's status."""
        run = await _start(world)
        cmd = _terminal(world, run, status, _body(status, status=wire))
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_terminal(cmd)
        assert (info.value.field, info.value.got) == ("record.payload.status", wire)

    @pytest.mark.parametrize(
        ("status", "phase"),
        [(RunStatus.COMPLETED, "failed"), (RunStatus.FAILED, "canceled")],
    )
    async def test_terminal_payload_phase_must_match(
        self, world: World, status: RunStatus, phase: str
    ) -> None:
        """[L7] [J1] the payload's ``phase`` agrees with the command's status."""
        run = await _start(world)
        cmd = _terminal(world, run, status, _body(status, phase=phase))
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_terminal(cmd)
        assert (info.value.field, info.value.got) == ("record.payload.phase", phase)

    @pytest.mark.parametrize(
        "labels",
        [None, {}, {"site": "two", "tier": "gold"}, {**LABELS, "extra": "x"}, {"site": "one"}],
        ids=["omitted", "empty", "changed", "extra", "missing"],
    )
    async def test_terminal_labels_must_equal_the_runs(
        self, world: World, labels: dict[str, str] | None
    ) -> None:
        """[L7] the payload's labels are exactly the run's labels."""
        run = await _start(world)
        body = _body(RunStatus.COMPLETED)
        body.pop("labels")
        if labels is not None:
            body["labels"] = labels
        cmd = _terminal(world, run, RunStatus.COMPLETED, body)
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_terminal(cmd)
        assert (info.value.field, info.value.got) == ("record.payload.labels", labels or {})

    @pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.CANCELED])
    async def test_terminal_failure_only_when_failed(self, world: World, status: RunStatus) -> None:
        """[L7] only a failed run's record carries a ``failure``."""
        run = await _start(world)
        cmd = _terminal(world, run, status, _body(status, failure={"message": "boom"}))
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_terminal(cmd)
        assert info.value.field == "record.payload.failure"

    @pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.FAILED])
    async def test_terminal_cancellation_only_when_canceled(
        self, world: World, status: RunStatus
    ) -> None:
        """[L7] [C3] only a canceled run's record carries a ``cancellation``."""
        run = await _start(world)
        note = {"reason": payloads.ENGINE_CANCELED}
        cmd = _terminal(world, run, status, _body(status, cancellation=note))
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_terminal(cmd)
        assert info.value.field == "record.payload.cancellation"

    async def test_terminal_failed_without_failure_is_accepted(self, world: World) -> None:
        """[L7] ``failure`` is optional even for a failed run."""
        run = await _start(world)
        result = await world.store.record_run_terminal(
            _terminal(world, run, RunStatus.FAILED, _body(RunStatus.FAILED))
        )
        assert result.inserted

    @pytest.mark.parametrize("status", [RunStatus.RUNNING, RunStatus.SUSPENDED, "done", None])
    async def test_terminal_status_must_be_a_final_one(self, world: World, status: Any) -> None:
        """[L7] RunTerminal takes completed, failed or canceled; anything else is refused."""
        run = await _start(world)
        cmd = _terminal(world, run, status, _body(RunStatus.COMPLETED))
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_terminal(cmd)
        assert (info.value.field, info.value.got) == ("status", status)

    async def test_terminal_record_must_be_run_completed(self, world: World) -> None:
        """[L7] the terminal's record has type ``run_completed``."""
        run = await _start(world)
        cmd = _with_record(_end(world, run, RunStatus.COMPLETED), type="planner_note")
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_terminal(cmd)
        assert (info.value.field, info.value.expected) == ("record.type", payloads.RUN_COMPLETED)

    async def test_terminal_record_must_belong_to_the_run(self, world: World) -> None:
        """[L8] the record names the run's agent and session, and the command's run."""
        run = await _start(world)
        other = await _start(world, "o")
        cmd = _end(world, run, RunStatus.COMPLETED)
        cases = [
            (_with_record(cmd, agent_id="intruder"), run.run.run_id, "agent_id"),
            (_with_record(cmd, session_id=other.run.session_id), run.run.run_id, "session_id"),
            (replace(cmd, run_id=other.run.run_id), other.run.run_id, "run_id"),
        ]
        async with world.unchanged():
            for bad, rid, field in cases:
                with pytest.raises(RecordOwnerMismatchError) as info:
                    await world.store.record_run_terminal(bad)
                assert (info.value.run_id, info.value.field) == (rid, field)

    async def test_terminal_run_id_is_required(self, world: World) -> None:
        """[L7] a RunTerminal without a run id is a ValidationError."""
        run = await _start(world)
        cmd = replace(_end(world, run, RunStatus.COMPLETED), run_id="")
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_terminal(cmd)
        assert (info.value.field, info.value.got) == ("run_id", "")

    async def test_terminal_of_unknown_run_is_not_found(self, world: World) -> None:
        """[L7] ending a run that was never started is RunNotFoundError."""
        sid = await world.session("s")
        ghost = world.run("ghost", session=sid)
        async with world.unchanged():
            with pytest.raises(RunNotFoundError) as info:
                await world.store.record_run_terminal(_end(world, ghost, RunStatus.COMPLETED))
        assert info.value.run_id == ghost.run.run_id

    async def test_terminal_on_suspended_run_is_refused(self, world: World) -> None:
        """[L7] [L6] a suspended run is not running: no terminal on top of it."""
        run = await _start(world)
        await world.suspend(run)
        async with world.unchanged():
            with pytest.raises(RunNotActiveError) as info:
                await world.store.record_run_terminal(_end(world, run, RunStatus.COMPLETED))
        assert (info.value.expected, info.value.got) == ("running", "suspended")

    async def test_terminal_key_taken_by_an_ordinary_record_conflicts(self, world: World) -> None:
        """[X3] ``run_completed`` cannot take a key another record already holds."""
        run = await _start(world)
        await world.store.append_run_record(world.note(run, "taken"))
        async with world.unchanged():
            with pytest.raises(RecordConflictError):
                await world.store.record_run_terminal(
                    _end(world, run, RunStatus.COMPLETED, event_key="taken")
                )

    # ------------------------------------------------------ retries/conflicts

    async def test_terminal_exact_retry_returns_original_id(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[X1] repeating the terminal changes nothing (not even updated_at) and returns its id."""
        run = await _start(world)
        cmd = _end(world, run, RunStatus.FAILED)
        first = await world.store.record_run_terminal(cmd)
        async with world.unchanged():
            retry = await world.store.record_run_terminal(cmd)
            again = await other_store.record_run_terminal(cmd)
        assert (retry.id, retry.inserted) == (first.id, False)
        assert (again.id, again.inserted) == (first.id, False)

    @pytest.mark.parametrize(
        ("first", "second"),
        [
            (RunStatus.COMPLETED, RunStatus.FAILED),
            (RunStatus.FAILED, RunStatus.CANCELED),
            (RunStatus.CANCELED, RunStatus.COMPLETED),
        ],
    )
    async def test_terminal_different_status_conflicts(
        self, world: World, first: RunStatus, second: RunStatus
    ) -> None:
        """[X3] a second ending with another status is a conflict; the first stands."""
        run = await _start(world)
        await world.store.record_run_terminal(_end(world, run, first))
        async with world.unchanged():
            with pytest.raises(RunTerminalConflictError) as info:
                await world.store.record_run_terminal(_end(world, run, second))
        err = info.value
        assert (err.run_id, err.field) == (run.run.run_id, "status")
        assert (err.expected, err.got) == (first.value, second.value)

    async def test_terminal_same_status_another_key_conflicts(self, world: World) -> None:
        """[X2] the terminal record is the one chosen first; same status, other key conflicts."""
        run = await _start(world)
        cmd = _end(world, run, RunStatus.COMPLETED)
        await world.store.record_run_terminal(cmd)
        other = _with_record(cmd, event_key="completed-again")
        async with world.unchanged():
            with pytest.raises(RunTerminalConflictError) as info:
                await world.store.record_run_terminal(other)
        assert (info.value.field, info.value.expected, info.value.got) == (
            "record.event_key",
            "run_completed",
            "completed-again",
        )

    @pytest.mark.parametrize("field", ["timestamp", "payload", "turn_id"])
    async def test_terminal_changed_record_conflicts(self, world: World, field: str) -> None:
        """[X1] [X3] same status and key, but another time, payload or turn: a conflict."""
        run = await _start(world)
        cmd = _end(world, run, RunStatus.FAILED)
        await world.store.record_run_terminal(cmd)
        change: dict[str, Any] = {
            "timestamp": cmd.record.timestamp + timedelta(milliseconds=1),
            "payload": msgspec.json.encode(
                _body(RunStatus.FAILED, failure={"message": "late detail"})
            ),
            "turn_id": "turn-x",
        }
        async with world.unchanged():
            with pytest.raises(RunTerminalConflictError) as info:
                await world.store.record_run_terminal(_with_record(cmd, **{field: change[field]}))
        assert info.value.field == f"record.{field}"
        assert (info.value.expected, info.value.got) == (getattr(cmd.record, field), change[field])

    # ---------------------------------------------------------------- repair

    @pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED])
    async def test_terminal_repair_stores_while_running(
        self, world: World, other_store: AdminStore, status: RunStatus
    ) -> None:
        """[E1] repair stores the ending of a run the store still shows running."""
        run = await _start(world)
        cmd = _end(world, run, status)
        result = await world.store.repair_run_terminal(cmd)
        assert (result.outcome, result.status) == (RepairOutcome.STORED, status)
        assert result.record == replace(cmd.record, id="2")
        meta = await other_store.load_run(run.run.run_id)
        assert (meta.status, meta.updated_at) == (status, cmd.record.timestamp)
        assert (await _log(other_store, run.run.run_id))[-1] == result.record

    @pytest.mark.parametrize("first", ["record", "repair"])
    async def test_terminal_repair_reports_already_stored(self, world: World, first: str) -> None:
        """[E1] [X1] repairing with the exact stored ending reports already_stored."""
        run = await _start(world)
        cmd = _end(world, run, RunStatus.COMPLETED)
        if first == "record":
            await world.store.record_run_terminal(cmd)
        else:
            await world.store.repair_run_terminal(cmd)
        async with world.unchanged():
            result = await world.store.repair_run_terminal(cmd)
        assert (result.outcome, result.status) == (
            RepairOutcome.ALREADY_STORED,
            RunStatus.COMPLETED,
        )
        assert result.record == replace(cmd.record, id="2")
        retry = await world.store.record_run_terminal(cmd)
        assert (retry.id, retry.inserted) == ("2", False)

    @pytest.mark.parametrize("change", ["timestamp", "event_key", "status"])
    async def test_terminal_repair_never_overrides_the_workflow(
        self, world: World, change: str
    ) -> None:
        """[E1] the workflow's own ending stands; repair returns it as different_terminal."""
        run = await _start(world)
        workflow = _end(world, run, RunStatus.COMPLETED)
        await world.store.record_run_terminal(workflow)
        repair = {
            "timestamp": _with_record(workflow, timestamp=world.now()),
            "event_key": _with_record(workflow, event_key="engine-completion"),
            "status": _end(world, run, RunStatus.FAILED),
        }[change]
        async with world.unchanged():
            result = await world.store.repair_run_terminal(repair)
        assert (result.outcome, result.status) == (
            RepairOutcome.DIFFERENT_TERMINAL,
            RunStatus.COMPLETED,
        )
        assert result.record == replace(workflow.record, id="2")

    async def test_terminal_repair_of_suspended_run_reports_the_suspension(
        self, world: World
    ) -> None:
        """[E1] a suspended run keeps its suspension; repair returns its ``run_suspended``."""
        run = await _start(world)
        suspension = run.suspension(Checkpoint(id="cp", data=b"\x01"), at=world.now())
        await world.store.record_run_suspension(suspension)
        async with world.unchanged():
            result = await world.store.repair_run_terminal(_end(world, run, RunStatus.FAILED))
        assert (result.outcome, result.status) == (
            RepairOutcome.DIFFERENT_TERMINAL,
            RunStatus.SUSPENDED,
        )
        assert result.record == replace(suspension.record, id="2")

    async def test_terminal_repair_validates_its_command(self, world: World) -> None:
        """[E1] [L7] repair refuses malformed endings exactly like the workflow's write."""
        run = await _start(world)
        wrong_labels = _terminal(
            world, run, RunStatus.COMPLETED, _body(RunStatus.COMPLETED, labels={})
        )
        sid = await world.session("s")
        ghost = world.run("ghost", session=sid)
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.repair_run_terminal(wrong_labels)
            assert info.value.field == "record.payload.labels"
            with pytest.raises(ValidationError) as info:
                await world.store.repair_run_terminal(
                    _terminal(world, run, RunStatus.RUNNING, _body(RunStatus.COMPLETED))
                )
            assert info.value.field == "status"
            with pytest.raises(RunNotFoundError):
                await world.store.repair_run_terminal(_end(world, ghost, RunStatus.COMPLETED))
