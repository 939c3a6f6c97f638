"""[L8]/[B1] ordinary records, one or a batch."""

from __future__ import annotations

from collections.abc import Sequence

from agentledger.errors import (
    RecordConflictError,
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
from agentledger.storage.lifecycle.reads import run_session_status
from agentledger.storage.state import Plan, StateReader
from agentledger.storage.types import (
    AppendResult,
    Record,
)
from agentledger.storage.validation import (
    DEFAULT_LIMITS,
    SizeLimits,
    validate_record,
)


def _check_ordinary(record: Record, field: str) -> None:
    validate_record(record, field)
    if record.type in payloads.LIFECYCLE_TYPES:
        raise ValidationError(
            field=f"{field}.type",
            expected="an ordinary (non-lifecycle) record type",
            got=record.type,
        )


def plan_append(
    reader: StateReader, record: Record, *, limits: SizeLimits = DEFAULT_LIMITS
) -> Plan[AppendResult]:
    """[L8]/[X1] append an ordinary record; an exact repeat returns its original id."""
    check_sizes(record, limits)
    _check_ordinary(record, "record")
    run = owned_run(reader, record.run_id, record)
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
    if not isinstance(records, Sequence) or isinstance(records, str | bytes):
        raise ValidationError(
            field="records", expected="a sequence of Records", got=type(records).__name__
        )
    if not records:
        raise ValidationError(field="records", expected="at least one record", got=0)
    batch = list(records)
    if limits is not None:
        check_sizes(batch, limits)
    for i, record in enumerate(batch):
        _check_ordinary(record, f"records[{i}]")
        if record.run_id != batch[0].run_id:
            raise ValidationError(
                field=f"records[{i}].run_id",
                expected=f"{batch[0].run_id!r} (one run per batch)",
                got=record.run_id,
            )
    return batch


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
    for record in batch[1:]:
        check_owner(record, run.run_id, run.agent_id, run.session_id)
    status = run_session_status(reader, run)
    results: list[AppendResult] = []
    written: list[Record] = []
    fresh: dict[str, Record] = {}  # event key -> record this batch inserts
    for record in batch:
        stored = fresh.get(record.event_key) or reader.record(run.run_id, record.event_key)
        if stored is not None:
            same_or_conflict(RecordConflictError, run.run_id, "record", stored, record)
            results.append(AppendResult(id=stored.id, inserted=False, session_status=status))
            continue
        require_running_for(reader, run, record)
        run, new = append_to(run, record)
        fresh[record.event_key] = new
        written.append(new)
        results.append(AppendResult(id=new.id, inserted=True, session_status=status))
    if not written:
        return Plan(results)
    return Plan(results, runs=[run], records=written)
