"""[L5]-[L7], [E1]: cancellation, suspension, terminal and their repair."""

from __future__ import annotations

from typing import NoReturn

from agentledger.errors import (
    CorruptRecordError,
    RecordConflictError,
    RunCancellationConflictError,
    RunSuspensionConflictError,
    RunTerminalConflictError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.lifecycle.appends import carry, check_records, retried_records
from agentledger.storage.lifecycle.checks import check_sizes
from agentledger.storage.lifecycle.guards import (
    append_to,
    check_completed_payload,
    owned_run,
    require_fresh_key,
    require_running,
    same_or_conflict,
)
from agentledger.storage.lifecycle.reads import (
    TERMINAL_STATUSES,
    run_session_status,
    stored_record,
)
from agentledger.storage.state import Plan, RunRow, StateReader
from agentledger.storage.types import (
    AppendResult,
    Checkpoint,
    Record,
    RepairOutcome,
    RepairResult,
    RunCancellation,
    RunStatus,
    RunSuspension,
    RunTerminal,
    SessionStatus,
)
from agentledger.storage.validation import (
    DEFAULT_LIMITS,
    SizeLimits,
    check_timestamp,
    decode_payload,
    decode_stored_payload,
    record_difference,
    require_id,
    validate_record,
)


def plan_cancellation(
    reader: StateReader, cmd: RunCancellation, *, limits: SizeLimits = DEFAULT_LIMITS
) -> Plan[AppendResult]:
    """[L5]/[C1] the first cancellation reason and its intent record, together."""
    check_sizes(cmd, limits)
    reason = require_id("reason", cmd.reason)
    if reason in payloads.RESERVED_REASONS:
        raise ValidationError(
            field="reason",
            expected=f"a reason other than the reserved {sorted(payloads.RESERVED_REASONS)}",
            got=reason,
        )
    validate_record(cmd.record)
    payload = decode_payload(cmd.record, payloads.CancellationIntent, "record")
    if payload.reason != reason:
        raise ValidationError(
            field="record.payload.reason", expected=repr(reason), got=payload.reason
        )
    run = owned_run(reader, cmd.run_id, cmd.record)
    status = run_session_status(reader, run)
    if run.cancel_key:
        if run.cancellation_reason != reason:
            raise RunCancellationConflictError(
                run_id=run.run_id,
                field="cancellation_reason",
                expected=run.cancellation_reason,
                got=reason,
            )
        if cmd.record.event_key != run.cancel_key:
            raise RunCancellationConflictError(
                run_id=run.run_id,
                field="record.event_key",
                expected=run.cancel_key,
                got=cmd.record.event_key,
            )
        stored = stored_record(reader, run, run.cancel_key, payloads.CANCELLATION_INTENT)
        decode_stored_payload(stored, payloads.CancellationIntent)
        same_or_conflict(RunCancellationConflictError, run.run_id, "record", stored, cmd.record)
        return Plan(AppendResult(id=stored.id, inserted=False, session_status=status))
    require_running(run)
    require_fresh_key(reader, run, cmd.record)
    row, new = append_to(
        run,
        cmd.record,
        cancellation_reason=reason,
        cancel_key=cmd.record.event_key,
        updated_at=check_timestamp("record.timestamp", cmd.record.timestamp),
    )
    return Plan(
        AppendResult(id=new.id, inserted=True, session_status=status), runs=[row], records=[new]
    )


def _check_suspension(reader: StateReader, cmd: RunSuspension) -> RunRow:
    if not isinstance(cmd.checkpoint, Checkpoint):
        raise ValidationError(field="checkpoint", expected="a Checkpoint", got=cmd.checkpoint)
    require_id("checkpoint.id", cmd.checkpoint.id)
    if not isinstance(cmd.checkpoint.data, bytes):
        raise ValidationError(field="checkpoint.data", expected="bytes", got=cmd.checkpoint.data)
    validate_record(cmd.record)
    payload = decode_payload(cmd.record, payloads.RunSuspended, "record")
    if payload.suspension_id != cmd.checkpoint.id:
        raise ValidationError(
            field="record.payload.suspension_id",
            expected=repr(cmd.checkpoint.id),
            got=payload.suspension_id,
        )
    if payload.pending_count < 0:
        raise ValidationError(
            field="record.payload.pending_count", expected=">= 0", got=payload.pending_count
        )
    _check_carried(cmd)
    return owned_run(reader, cmd.run_id, cmd.record)


def _check_carried(cmd: RunSuspension | RunTerminal) -> list[Record]:
    """The ordinary records a suspension or terminal carries, checked as a batch [B1]."""
    carried = check_records(cmd.records, cmd.run_id)
    for i, record in enumerate(carried):
        if record.event_key == cmd.record.event_key:
            raise RecordConflictError(
                run_id=cmd.record.run_id,
                field=f"records[{i}].event_key",
                expected="a key other than record's",
                got=record.event_key,
            )
    return carried


def _retried(stored: Record, carried: list[Record], status: SessionStatus | None) -> AppendResult:
    """The result of an exact retry of a lifecycle command and the records it carried."""
    return AppendResult(
        id=stored.id,
        inserted=False,
        session_status=status,
        records=tuple(
            AppendResult(id=r.id, inserted=False, session_status=status) for r in carried
        ),
    )


def _no_records(cmd: RunSuspension | RunTerminal) -> None:
    """A repair stores its lifecycle record alone [E1]."""
    if not isinstance(cmd.records, tuple | list) or cmd.records:
        raise ValidationError(
            field="records",
            expected="no records (a repair stores only its lifecycle record)",
            got=cmd.records,
        )


def _suspension_retry(reader: StateReader, run: RunRow, cmd: RunSuspension) -> Record:
    """The stored suspension record if ``cmd`` repeats it exactly, else a conflict."""
    if cmd.record.event_key != run.suspension_key:
        raise RunSuspensionConflictError(
            run_id=run.run_id,
            field="record.event_key",
            expected=run.suspension_key,
            got=cmd.record.event_key,
        )
    stored = stored_record(reader, run, run.suspension_key, payloads.RUN_SUSPENDED)
    decode_stored_payload(stored, payloads.RunSuspended)
    same_or_conflict(RunSuspensionConflictError, run.run_id, "record", stored, cmd.record)
    if run.checkpoint != cmd.checkpoint:
        raise RunSuspensionConflictError(
            run_id=run.run_id, field="checkpoint", expected=run.checkpoint, got=cmd.checkpoint
        )
    return stored


def _suspend(run: RunRow, cmd: RunSuspension) -> tuple[RunRow, Record]:
    return append_to(
        run,
        cmd.record,
        status=RunStatus.SUSPENDED,
        checkpoint=cmd.checkpoint,
        suspension_key=cmd.record.event_key,
        updated_at=check_timestamp("record.timestamp", cmd.record.timestamp),
    )


def plan_suspension(
    reader: StateReader, cmd: RunSuspension, *, limits: SizeLimits = DEFAULT_LIMITS
) -> Plan[AppendResult]:
    """[L6] checkpoint, ``suspended`` status and ``run_suspended`` record, together."""
    check_sizes(cmd, limits)
    run = _check_suspension(reader, cmd)
    carried = list(cmd.records)
    status = run_session_status(reader, run)
    if run.suspension_key:
        stored = _suspension_retry(reader, run, cmd)
        again = retried_records(RunSuspensionConflictError, reader, run, carried)
        return Plan(_retried(stored, again, status))
    require_running(run)
    require_fresh_key(reader, run, cmd.record)
    row, results, written = carry(reader, run, carried, status)
    row, new = _suspend(row, cmd)
    return Plan(
        AppendResult(id=new.id, inserted=True, session_status=status, records=tuple(results)),
        runs=[row],
        records=[*written, new],
    )


def _check_terminal(reader: StateReader, cmd: RunTerminal) -> RunRow:
    if cmd.status not in TERMINAL_STATUSES:
        raise ValidationError(
            field="status", expected="completed, failed or canceled", got=cmd.status
        )
    validate_record(cmd.record)
    payload = decode_payload(cmd.record, payloads.RunCompleted, "record")
    _check_carried(cmd)
    run = owned_run(reader, cmd.run_id, cmd.record)
    reason = run.cancellation_reason or payloads.ENGINE_CANCELED
    check_completed_payload(payload, RunStatus(cmd.status), run.labels, reason, "record")
    return run


def _terminal_retry(reader: StateReader, run: RunRow, cmd: RunTerminal) -> Record | None:
    """The stored terminal record if ``cmd`` repeats it exactly; None if it differs."""
    if run.status != cmd.status or cmd.record.event_key != run.terminal_key:
        return None
    stored = _stored_terminal(reader, run)
    return None if record_difference(stored, cmd.record) else stored


def _stored_terminal(reader: StateReader, run: RunRow) -> Record:
    """The run's ``run_completed``, decoded strictly and checked against the run [J1].

    A stored record that contradicts its run (another status, labels or reason)
    is corruption, not a conflict: an operator should restore it, not retry.
    """
    stored = stored_record(reader, run, run.terminal_key, payloads.RUN_COMPLETED)
    payload = decode_stored_payload(stored, payloads.RunCompleted)
    if run.status not in TERMINAL_STATUSES:
        raise CorruptRecordError(
            run_id=run.run_id,
            record_id=stored.id,
            reason=f"a run_completed record on a run that is {run.status.value}",
        )
    reason = run.cancellation_reason or payloads.ENGINE_CANCELED
    try:
        check_completed_payload(payload, run.status, run.labels, reason, "record")
    except ValidationError as e:
        raise CorruptRecordError(
            run_id=run.run_id,
            record_id=stored.id,
            reason=(
                f"contradicts its run ({run.status.value}): {e.field} should be "
                f"{e.expected}, found {e.got!r}"
            ),
        ) from e
    return stored


def _end(run: RunRow, cmd: RunTerminal) -> tuple[RunRow, Record]:
    return append_to(
        run,
        cmd.record,
        status=RunStatus(cmd.status),
        terminal_key=cmd.record.event_key,
        updated_at=check_timestamp("record.timestamp", cmd.record.timestamp),
    )


def plan_terminal(
    reader: StateReader, cmd: RunTerminal, *, limits: SizeLimits = DEFAULT_LIMITS
) -> Plan[AppendResult]:
    """[L7] the final status and its ``run_completed`` record, together."""
    check_sizes(cmd, limits)
    run = _check_terminal(reader, cmd)
    carried = list(cmd.records)
    status = run_session_status(reader, run)
    if run.terminal_key:
        stored = _terminal_retry(reader, run, cmd)
        if stored is None:
            _raise_terminal_conflict(reader, run, cmd)
        again = retried_records(RunTerminalConflictError, reader, run, carried)
        return Plan(_retried(stored, again, status))
    require_running(run)
    require_fresh_key(reader, run, cmd.record)
    row, results, written = carry(reader, run, carried, status)
    row, new = _end(row, cmd)
    return Plan(
        AppendResult(id=new.id, inserted=True, session_status=status, records=tuple(results)),
        runs=[row],
        records=[*written, new],
    )


def _raise_terminal_conflict(reader: StateReader, run: RunRow, cmd: RunTerminal) -> NoReturn:
    if run.status != cmd.status:
        raise RunTerminalConflictError(
            run_id=run.run_id, field="status", expected=run.status.value, got=str(cmd.status)
        )
    if cmd.record.event_key != run.terminal_key:
        raise RunTerminalConflictError(
            run_id=run.run_id,
            field="record.event_key",
            expected=run.terminal_key,
            got=cmd.record.event_key,
        )
    stored = _stored_terminal(reader, run)
    differs = record_difference(stored, cmd.record) or "payload"
    raise RunTerminalConflictError(
        run_id=run.run_id,
        field=f"record.{differs}",
        expected=getattr(stored, differs),
        got=getattr(cmd.record, differs),
    )


def _standing_record(reader: StateReader, run: RunRow) -> Record:
    """The lifecycle record that ended a run: its terminal or its suspension."""
    if run.terminal_key:
        return _stored_terminal(reader, run)
    if run.suspension_key:
        record = stored_record(reader, run, run.suspension_key, payloads.RUN_SUSPENDED)
        decode_stored_payload(record, payloads.RunSuspended)
        return record
    raise CorruptRecordError(
        run_id=run.run_id,
        record_id="",
        reason=f"run is {run.status.value} but has no terminal or suspension record",
    )


def plan_repair_terminal(
    reader: StateReader, cmd: RunTerminal, *, limits: SizeLimits = DEFAULT_LIMITS
) -> Plan[RepairResult]:
    """[E1] store a missing terminal only while running; never override another ending."""
    check_sizes(cmd, limits)
    _no_records(cmd)
    run = _check_terminal(reader, cmd)
    if run.status is RunStatus.RUNNING:
        require_fresh_key(reader, run, cmd.record)
        row, new = _end(run, cmd)
        return Plan(
            RepairResult(outcome=RepairOutcome.STORED, status=row.status, record=new),
            runs=[row],
            records=[new],
        )
    if run.terminal_key:
        stored = _terminal_retry(reader, run, cmd)
        if stored is not None:
            return Plan(
                RepairResult(outcome=RepairOutcome.ALREADY_STORED, status=run.status, record=stored)
            )
    return Plan(
        RepairResult(
            outcome=RepairOutcome.DIFFERENT_TERMINAL,
            status=run.status,
            record=_standing_record(reader, run),
        )
    )


def plan_repair_suspension(
    reader: StateReader, cmd: RunSuspension, *, limits: SizeLimits = DEFAULT_LIMITS
) -> Plan[RepairResult]:
    """[E1] store a missing suspension only while running; never override another ending."""
    check_sizes(cmd, limits)
    _no_records(cmd)
    run = _check_suspension(reader, cmd)
    if run.status is RunStatus.RUNNING:
        require_fresh_key(reader, run, cmd.record)
        row, new = _suspend(run, cmd)
        return Plan(
            RepairResult(outcome=RepairOutcome.STORED, status=row.status, record=new),
            runs=[row],
            records=[new],
        )
    if run.suspension_key:
        try:
            stored = _suspension_retry(reader, run, cmd)
        except RunSuspensionConflictError:
            pass
        else:
            return Plan(
                RepairResult(outcome=RepairOutcome.ALREADY_STORED, status=run.status, record=stored)
            )
    return Plan(
        RepairResult(
            outcome=RepairOutcome.DIFFERENT_TERMINAL,
            status=run.status,
            record=_standing_record(reader, run),
        )
    )
