"""[L8]/[B1] ordinary records, one or a batch."""

from __future__ import annotations

from collections.abc import Sequence

from agentledger.errors import (
    RecordConflictError,
    RunConflictError,
    RunSuspensionConflictError,
    RunTerminalConflictError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.lifecycle.checks import check_sizes
from agentledger.storage.lifecycle.guards import (
    append_to,
    check_owner,
    owned_run,
    require_running_for,
    same_or_conflict,
)
from agentledger.storage.lifecycle.reads import (
    raise_if_damaged,
    require_run,
    run_session_status,
)
from agentledger.storage.state import Plan, RunRow, StateReader
from agentledger.storage.types import (
    AppendResult,
    Record,
    SessionStatus,
)
from agentledger.storage.validation import (
    DEFAULT_LIMITS,
    SizeLimits,
    validate_record,
)


def _check_ordinary(record: Record, field: str, *, start: bool = False) -> None:
    validate_record(record, field)
    if record.type in payloads.LIFECYCLE_TYPES:
        raise ValidationError(
            field=f"{field}.type",
            expected="an ordinary (non-lifecycle) record type",
            got=record.type,
        )
    if record.type == payloads.TRANSCRIPT_REFERENCED and not start:
        raise ValidationError(
            field=f"{field}.type",
            expected="a history reference only among the records a run start carries",
            got=record.type,
        )


def plan_append(
    reader: StateReader, record: Record, *, limits: SizeLimits = DEFAULT_LIMITS
) -> Plan[AppendResult]:
    """[L8]/[X1] append an ordinary record; an exact repeat returns its original id."""
    check_sizes(record, limits)
    _check_ordinary(record, "record")
    run = reader.run(record.run_id)  # owned_run, but record.run_id is checked: an id
    if run is None:
        run = require_run(reader, record.run_id)  # raises: not found, or purged
    check_owner(record, run.run_id, run.agent_id, run.session_id)
    status = run_session_status(reader, run)
    stored = reader.record(run.run_id, record.event_key)
    if stored is not None:
        same_or_conflict(RecordConflictError, run.run_id, "record", stored, record)
        return Plan(AppendResult(id=stored.id, inserted=False, session_status=status))
    require_running_for(reader, run, record)
    row, new = append_to(run, record)
    return Plan(
        AppendResult(id=new.id, inserted=True, session_status=status), runs=[row], records=[new]
    )


def check_batch(records: object, limits: SizeLimits | None = None) -> list[Record]:
    """[B1] a non-empty sequence of ordinary records of one run, each valid as given.

    The first check of :func:`plan_append_batch`; a remote client (``StoreClient``)
    runs it before sending, so what the wire cannot carry is refused as the store would
    (with the store's ``limits`` when the client knows them: one oversized record
    refuses the whole batch).
    """
    batch = _sequence(records)
    if not batch:
        raise ValidationError(field="records", expected="at least one record", got=0)
    if limits is not None:
        check_sizes(batch, limits)
    return check_records(batch)


def _sequence(records: object) -> list[Record]:
    if not isinstance(records, Sequence) or isinstance(records, str | bytes):
        raise ValidationError(
            field="records", expected="a sequence of Records", got=type(records).__name__
        )
    return list(records)


def check_records(
    records: object, run_id: str | None = None, *, start: bool = False
) -> list[Record]:
    """Ordinary records of one run (``run_id`` when given), each valid as given; may be empty.

    What a batch holds, and what a lifecycle command carries in ``records``; only
    a ``start`` may carry a history reference [V3].
    """
    batch = _sequence(records)
    for i, record in enumerate(batch):
        _check_ordinary(record, f"records[{i}]", start=start)
        owner = batch[0].run_id if run_id is None else run_id
        if record.run_id != owner:
            raise ValidationError(
                field=f"records[{i}].run_id",
                expected=f"{owner!r} (one run per batch)",
                got=record.run_id,
            )
    return batch


def carry(
    reader: StateReader,
    run: RunRow,
    batch: Sequence[Record],
    status: SessionStatus | None,
    *,
    taken: Sequence[Record] = (),
    new_run: bool = False,
) -> tuple[RunRow, list[AppendResult], list[Record]]:
    """[B1] place ``batch`` on ``run``'s log, in order: each record new or an exact retry.

    Returns the run after it, one result per record and the records to insert.
    ``taken`` are records the same operation writes before the batch (a start's
    ``run_started``): a batch record with one of their keys must repeat it.
    A ``new_run`` has nothing stored yet, so nothing is read.
    """
    for record in batch:
        check_owner(record, run.run_id, run.agent_id, run.session_id)
    results: list[AppendResult] = []
    written: list[Record] = []
    fresh = {record.event_key: record for record in taken}  # event key -> record written here
    for record in batch:
        stored = fresh.get(record.event_key)
        if stored is None and not new_run:
            stored = reader.record(run.run_id, record.event_key)
        if stored is not None:
            same_or_conflict(RecordConflictError, run.run_id, "record", stored, record)
            results.append(AppendResult(id=stored.id, inserted=False, session_status=status))
            continue
        require_running_for(reader, run, record)
        run, new = append_to(run, record)
        fresh[record.event_key] = new
        written.append(new)
        results.append(AppendResult(id=new.id, inserted=True, session_status=status))
    return run, results, written


def retried_records(
    error: type[RunConflictError]
    | type[RunSuspensionConflictError]
    | type[RunTerminalConflictError],
    reader: StateReader,
    run: RunRow,
    carried: Sequence[Record],
) -> list[Record]:
    """The stored records a retried lifecycle command carries, each repeated exactly [X1].

    Its first write stored them all with its lifecycle record, so a carried
    record that is missing or differs makes the retry a conflict (``error``).
    """
    stored_records: list[Record] = []
    for i, record in enumerate(carried):
        stored = reader.record(run.run_id, record.event_key)
        if stored is None:
            raise_if_damaged(reader, run, record.event_key, record.type, record)
            raise error(
                run_id=run.run_id,
                field=f"records[{i}].event_key",
                expected="a record the first write stored",
                got=record.event_key,
            )
        same_or_conflict(error, run.run_id, f"records[{i}]", stored, record)
        stored_records.append(stored)
    return stored_records


def plan_append_batch(
    reader: StateReader, records: Sequence[Record], *, limits: SizeLimits = DEFAULT_LIMITS
) -> Plan[list[AppendResult]]:
    """[B1] append ordinary records of one run, in order, all or none.

    Each record is inserted or is an exact retry [X1] (of a stored record, or of
    an earlier record of the same batch); the first refusal is raised and
    nothing is written.
    """
    batch = check_batch(records, limits)
    run = owned_run(reader, batch[0].run_id, batch[0])
    status = run_session_status(reader, run)
    run, results, written = carry(reader, run, batch, status)
    if not written:
        return Plan(results)
    return Plan(results, runs=[run], records=written)
