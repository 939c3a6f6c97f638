"""Guards several plans share: ownership, a running run, a fresh event key, retry comparison."""

from __future__ import annotations

import msgspec

from agentledger.errors import (
    RecordConflictError,
    RecordOwnerMismatchError,
    RunCancellationConflictError,
    RunConflictError,
    RunNotActiveError,
    RunSuspensionConflictError,
    RunTerminalConflictError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.lifecycle.reads import TERMINAL_STATUSES, raise_if_damaged, require_run
from agentledger.storage.state import RunRow, StateReader
from agentledger.storage.types import (
    Record,
    RunStatus,
)
from agentledger.storage.validation import (
    check_stored_record,
    normalize_record,
    record_difference,
    require_id,
)


def check_owner(record: Record, run_id: str, agent_id: str, session_id: str) -> None:
    if record.run_id == run_id and record.agent_id == agent_id and record.session_id == session_id:
        return
    for field, expected, got in (
        ("run_id", run_id, record.run_id),
        ("agent_id", agent_id, record.agent_id),
        ("session_id", session_id, record.session_id),
    ):
        if expected != got:
            raise RecordOwnerMismatchError(run_id=run_id, field=field, expected=expected, got=got)


def same_or_conflict(
    error: type[RunConflictError]
    | type[RunCancellationConflictError]
    | type[RunSuspensionConflictError]
    | type[RunTerminalConflictError]
    | type[RecordConflictError],
    run_id: str,
    what: str,
    stored: Record,
    given: Record,
) -> None:
    differs = record_difference(stored, given)
    if differs:
        check_stored_record(stored)  # damage is corruption; only a sound record conflicts
        raise error(
            run_id=run_id,
            field=f"{what}.{differs}",
            expected=getattr(stored, differs),
            got=getattr(given, differs),
        )


def append_to(run: RunRow, record: Record, **changes: object) -> tuple[RunRow, Record]:
    seq = run.last_seq + 1
    if changes:
        row = msgspec.structs.replace(run, last_seq=seq, **changes)
    else:  # an append: the hot path, without merging an empty dict of changes
        row = msgspec.structs.replace(run, last_seq=seq)
    return row, normalize_record(record, str(seq))


def require_fresh_key(reader: StateReader, run: RunRow, record: Record) -> None:
    if reader.record(run.run_id, record.event_key) is not None:
        raise RecordConflictError(
            run_id=run.run_id,
            field="event_key",
            expected="a key not yet used on this run",
            got=record.event_key,
        )


def require_running(run: RunRow) -> None:
    if run.status is not RunStatus.RUNNING:
        raise RunNotActiveError(run_id=run.run_id, expected="running", got=run.status.value)


def require_running_for(reader: StateReader, run: RunRow, record: Record) -> None:
    """A new record needs a running run; on any other, a retry whose stored record was
    damaged (its key no longer found) is corruption, not a refusal [J1]."""
    if run.status is not RunStatus.RUNNING:
        raise_if_damaged(reader, run, record.event_key, "record", record)
        require_running(run)


def owned_run(reader: StateReader, run_id: str, record: Record) -> RunRow:
    """The run a lifecycle record belongs to, checking the record names it [L8]."""
    require_id("run_id", run_id)
    if record.run_id != run_id:
        raise RecordOwnerMismatchError(
            run_id=run_id, field="run_id", expected=run_id, got=record.run_id
        )
    run = require_run(reader, run_id)
    check_owner(record, run.run_id, run.agent_id, run.session_id)
    return run


def check_completed_payload(
    payload: payloads.RunCompleted,
    status: RunStatus,
    labels: dict[str, str],
    reason: str,
    field: str,
) -> None:
    """A ``run_completed`` payload must agree with its status, labels and reason."""
    want_status, want_phase = TERMINAL_STATUSES[status]
    if payload.status != want_status:
        raise ValidationError(
            field=f"{field}.payload.status", expected=repr(want_status), got=payload.status
        )
    if payload.phase != want_phase:
        raise ValidationError(
            field=f"{field}.payload.phase", expected=repr(want_phase), got=payload.phase
        )
    if payload.labels != labels:
        raise ValidationError(
            field=f"{field}.payload.labels", expected=repr(labels), got=payload.labels
        )
    if payload.failure is not None and status is not RunStatus.FAILED:
        raise ValidationError(
            field=f"{field}.payload.failure", expected="absent unless failed", got=payload.failure
        )
    if status is RunStatus.CANCELED:
        got = payload.cancellation.reason if payload.cancellation else None
        if got != reason:
            raise ValidationError(
                field=f"{field}.payload.cancellation.reason", expected=repr(reason), got=got
            )
    elif payload.cancellation is not None:
        raise ValidationError(
            field=f"{field}.payload.cancellation",
            expected="absent unless canceled",
            got=payload.cancellation,
        )
