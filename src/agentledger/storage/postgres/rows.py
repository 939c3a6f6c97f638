"""Table rows to store structs and back: the one place that knows the column order.

Timestamps are ``timestamptz`` (microsecond precision, so milliseconds hold)
and are rebuilt with ``tzinfo=datetime.UTC``; payloads and checkpoint data
are ``bytea``, returned byte for byte as given.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from agentledger.errors import CorruptRecordError
from agentledger.storage import pages
from agentledger.storage.integrity import record_checksum, run_seed, verify
from agentledger.storage.state import RunRow, SessionRow
from agentledger.storage.types import (
    Checkpoint,
    Record,
    RunStatus,
    SessionStatus,
    StartOutcome,
)

__all__ = [
    "RECORD_COLUMNS",
    "RUN_COLUMNS",
    "SESSION_COLUMNS",
    "SESSION_WIDTH",
    "micros",
    "record_from_row",
    "record_params",
    "run_from_row",
    "run_params",
    "session_from_row",
    "unverified_record",
    "utc",
]

Row = tuple[Any, ...]

SESSION_COLUMNS = "id, status, created_at, ended_at, labels"
SESSION_WIDTH = len(SESSION_COLUMNS.split(","))
"""How many values of a row are the session's (``row[:SESSION_WIDTH]``)."""

RUN_COLUMNS = (
    "run_id, agent_id, session_id, parent_run_id, status, start_outcome, started_at, "
    "updated_at, labels, cancellation_reason, successor_run_id, started_key, link_key, "
    "cancel_key, suspension_key, terminal_key, checkpoint_id, checkpoint_data, last_seq, "
    "start_records"
)

RECORD_COLUMNS = (
    "run_id, agent_id, session_id, turn_id, event_key, type, ts, payload, seq, checksum"
)
"""Columns of ``agentledger_records`` as :func:`record_from_row` reads them; the
checksum (see :mod:`agentledger.storage.integrity`) hashes ``ts`` as
microseconds since the epoch, the column's own precision."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def micros(value: datetime) -> int:
    """Microseconds since the epoch: what a record's checksum hashes of ``ts``."""
    return (value - _EPOCH) // _US


def utc(value: datetime) -> datetime:
    """A stored ``timestamptz`` as an aware datetime whose tzinfo is ``datetime.UTC``."""
    return value if value.tzinfo is UTC else value.astimezone(UTC)


def session_from_row(row: Row) -> SessionRow:
    """A ``SESSION_COLUMNS`` row as a SessionRow."""
    sid, status, created_at, ended_at, labels = row
    return SessionRow(
        id=sid,
        status=SessionStatus(status),
        created_at=utc(created_at),
        ended_at=None if ended_at is None else utc(ended_at),
        labels=dict(sorted(labels.items())),  # jsonb keeps its own key order
    )


def run_from_row(row: Row) -> RunRow:
    """A ``RUN_COLUMNS`` row as a RunRow."""
    checkpoint = None if row[16] is None else Checkpoint(id=row[16], data=bytes(row[17]))
    return RunRow(
        run_id=row[0],
        agent_id=row[1],
        session_id=row[2],
        parent_run_id=row[3],
        status=RunStatus(row[4]),
        start_outcome=StartOutcome(row[5]),
        started_at=utc(row[6]),
        updated_at=utc(row[7]),
        labels=dict(row[8]),
        cancellation_reason=row[9],
        successor_run_id=row[10],
        started_key=row[11],
        link_key=row[12],
        cancel_key=row[13],
        suspension_key=row[14],
        terminal_key=row[15],
        checkpoint=checkpoint,
        last_seq=row[18],
        start_records=row[19],
    )


def run_params(run: RunRow) -> tuple[object, ...]:
    """A RunRow as ``RUN_COLUMNS`` parameters."""
    checkpoint = run.checkpoint
    return (
        run.run_id,
        run.agent_id,
        run.session_id,
        run.parent_run_id,
        run.status.value,
        run.start_outcome.value,
        run.started_at,
        run.updated_at,
        Jsonb(run.labels),
        run.cancellation_reason,
        run.successor_run_id,
        run.started_key,
        run.link_key,
        run.cancel_key,
        run.suspension_key,
        run.terminal_key,
        None if checkpoint is None else checkpoint.id,
        None if checkpoint is None else checkpoint.data,
        run.last_seq,
        run.start_records,
    )


def record_from_row(row: Row) -> Record:
    """A ``RECORD_COLUMNS`` row as a Record (its id is the decimal sequence), checksum verified."""
    run_id, agent_id, session_id, turn_id, event_key, type_, ts, payload, seq, checksum = row
    try:
        us = micros(ts)
    except (TypeError, OverflowError) as e:
        raise CorruptRecordError(run_id=str(run_id), record_id=str(seq), reason=str(e)) from e
    verify(run_id, agent_id, session_id, [(seq, turn_id, event_key, type_, us, payload, checksum)])
    return Record(
        run_id=row[0],
        agent_id=row[1],
        session_id=row[2],
        turn_id=row[3],
        event_key=row[4],
        type=row[5],
        timestamp=utc(row[6]),
        payload=bytes(row[7]),
        id=str(row[8]),
    )


def unverified_record(row: Row) -> Record | None:
    """A ``RECORD_COLUMNS`` row that fails its checksum, as stored (None if it is
    intact); see :func:`agentledger.storage.pages.unverified_record`."""
    run_id, agent_id, session_id, turn_id, event_key, type_, ts, payload, seq, checksum = row
    stamp = micros(ts) if isinstance(ts, datetime) else ts
    run_row = (seq, turn_id, event_key, type_, stamp, payload, checksum)
    return pages.unverified_record(run_id, agent_id, session_id, run_row, 1_000_000)


def record_params(record: Record, session_seq: int | None) -> tuple[object, ...]:
    """A stored Record (id set) as ``RECORD_COLUMNS`` + ``session_seq`` parameters."""
    seq = int(record.id)
    seed = run_seed(record.run_id, record.agent_id, record.session_id)
    checksum = record_checksum(
        seed,
        seq,
        record.turn_id,
        record.event_key,
        record.type,
        micros(record.timestamp),
        record.payload,
    )
    return (
        record.run_id,
        record.agent_id,
        record.session_id,
        record.turn_id,
        record.event_key,
        record.type,
        record.timestamp,
        record.payload,
        seq,
        checksum,
        session_seq,
    )
