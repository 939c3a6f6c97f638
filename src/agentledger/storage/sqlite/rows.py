"""How store values map to SQLite columns, and back, strictly.

Timestamps are integer milliseconds since the Unix epoch (UTC), labels are
JSON text, payloads and checkpoint data are BLOBs kept byte for byte. STRICT tables
guarantee each column's storage class; beyond that, reading back is strict:
a stored value that does not fit its type (an unknown status, a timestamp
out of range, labels that are not a JSON object of strings) raises
:class:`~agentledger.errors.CorruptRecordError`, so a damaged row is reported
instead of being handed to the shared decisions as if it were sound.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from agentledger.errors import CorruptRecordError
from agentledger.storage import pages
from agentledger.storage.integrity import record_checksum, run_seed
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
    "RUN_FIELDS",
    "RUN_PAGE_COLUMNS",
    "SESSION_COLUMNS",
    "decode_record",
    "decode_records",
    "decode_run",
    "decode_session",
    "encode_labels",
    "from_ms",
    "record_values",
    "run_value",
    "to_ms",
    "unverified_record",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_LABELS = msgspec.json.Decoder(dict[str, str])
_ENCODER = msgspec.json.Encoder()

SESSION_COLUMNS = "id, status, created_at, ended_at, labels"
"""Columns of ``sessions`` in the order :func:`decode_session` expects."""

RUN_FIELDS = (
    "run_id",
    "agent_id",
    "session_id",
    "parent_run_id",
    "status",
    "start_outcome",
    "started_at",
    "updated_at",
    "labels",
    "cancellation_reason",
    "successor_run_id",
    "started_key",
    "link_key",
    "cancel_key",
    "suspension_key",
    "terminal_key",
    "start_records",
)
"""RunRow fields stored as columns of ``runs`` (the checkpoint has its own table, and
``last_seq`` is derived from the run's records)."""

RUN_COLUMNS = (
    ", ".join(f"runs.{name}" for name in RUN_FIELDS)
    + ", coalesce((SELECT seq FROM records WHERE records.run_id = runs.run_id "
    "ORDER BY seq DESC LIMIT 1), 0)"
)
"""Columns of ``runs`` and the newest record id, in the order :func:`decode_run`
expects, before the checkpoint's."""

RECORD_COLUMNS = (
    "run_id, seq, agent_id, session_id, turn_id, event_key, type, timestamp, payload, checksum"
)
"""Columns of ``records`` in the order :func:`decode_record` expects."""

RUN_PAGE_COLUMNS = "seq, turn_id, event_key, type, timestamp, payload, checksum"
"""Columns of ``records`` that vary within one run: the run rows of :mod:`..pages`."""


def to_ms(value: datetime) -> int:
    """Milliseconds since the epoch of a checked (aware, UTC, whole-ms) datetime."""
    return (value - _EPOCH) // _MS


def from_ms(value: int) -> datetime:
    """The UTC datetime of a stored millisecond count, exactly."""
    return pages.stamp_time(value, 1000)


def encode_labels(labels: dict[str, str]) -> str:
    """Labels as the JSON text stored in ``runs.labels`` and ``sessions.labels``."""
    return _ENCODER.encode(labels).decode()


def run_value(name: str, value: Any) -> Any:
    """The column value of RunRow field ``name``."""
    if name in ("status", "start_outcome"):
        return str(value)
    if name in ("started_at", "updated_at"):
        return to_ms(value)
    if name == "labels":
        return encode_labels(value)
    return value


_seed = functools.lru_cache(maxsize=1024)(run_seed)
""":func:`run_seed` of the runs being written: the same three ids for every record of one."""


def record_values(record: Record) -> tuple[object, ...]:
    """A record as the values of :data:`RECORD_COLUMNS`, its checksum computed."""
    seq = int(record.id)
    ms = (record.timestamp - _EPOCH) // _MS  # to_ms
    seed = _seed(record.run_id, record.agent_id, record.session_id)
    return (
        record.run_id,
        seq,
        record.agent_id,
        record.session_id,
        record.turn_id,
        record.event_key,
        record.type,
        ms,
        record.payload,
        record_checksum(
            seed, seq, record.turn_id, record.event_key, record.type, ms, record.payload
        ),
    )


def decode_session(row: Sequence[Any]) -> SessionRow:
    """A ``sessions`` row; anything out of shape is corruption."""
    session_id, status, created_at, ended_at, labels = row
    try:
        return SessionRow(
            id=session_id,
            status=SessionStatus(status),
            created_at=from_ms(created_at),
            ended_at=None if ended_at is None else from_ms(ended_at),
            labels=_LABELS.decode(labels),
        )
    except (ValueError, TypeError, OverflowError, msgspec.DecodeError) as e:
        raise CorruptRecordError(
            run_id="", record_id="", reason=f"session {session_id!r}: {e}"
        ) from e


def decode_run(row: Sequence[Any]) -> RunRow:
    """A ``runs`` row followed by its checkpoint's id and data (both NULL if none)."""
    try:
        (
            run_id,
            agent_id,
            session_id,
            parent_run_id,
            status,
            start_outcome,
            started_at,
            updated_at,
            labels,
            cancellation_reason,
            successor_run_id,
            started_key,
            link_key,
            cancel_key,
            suspension_key,
            terminal_key,
            start_records,
            last_seq,
            checkpoint_id,
            checkpoint_data,
        ) = row
        return RunRow(
            run_id=run_id,
            agent_id=agent_id,
            session_id=session_id,
            parent_run_id=parent_run_id,
            status=RunStatus(status),
            start_outcome=StartOutcome(start_outcome),
            started_at=from_ms(started_at),
            updated_at=from_ms(updated_at),
            labels=_LABELS.decode(labels),
            cancellation_reason=cancellation_reason,
            successor_run_id=successor_run_id,
            started_key=started_key,
            link_key=link_key,
            cancel_key=cancel_key,
            suspension_key=suspension_key,
            terminal_key=terminal_key,
            checkpoint=(
                None
                if checkpoint_id is None
                else Checkpoint(id=checkpoint_id, data=checkpoint_data)
            ),
            last_seq=last_seq,
            start_records=start_records,
        )
    except (ValueError, TypeError, OverflowError, msgspec.DecodeError) as e:
        raise CorruptRecordError(run_id=str(row[0]), record_id="", reason=f"run row: {e}") from e


def unverified_record(row: Sequence[Any]) -> Record | None:
    """A :data:`RECORD_COLUMNS` row that fails its checksum, as stored (None if it is
    intact); see :func:`..pages.unverified_record`."""
    run_id, seq, agent_id, session_id, *rest = row
    return pages.unverified_record(run_id, agent_id, session_id, (seq, *rest), 1000)


def decode_record(row: Sequence[Any]) -> Record:
    """A ``records`` row, exactly as stored, its checksum verified; damage is corruption."""
    return decode_records([row])[0]


def decode_records(rows: list[Any]) -> tuple[Record, ...]:
    """:data:`RECORD_COLUMNS` rows (of any runs, in the order given) as records, each
    row's checksum verified; damage is corruption naming the row.

    Each run's rows are decoded together as run rows (see
    :func:`..pages.run_records`), also when runs interleave on a session page.
    """
    by_run: dict[tuple[Any, Any, Any], list[int]] = {}
    for index, row in enumerate(rows):
        by_run.setdefault(_run_ids(row), []).append(index)
    if len(by_run) == 1:
        ((run_id, agent_id, session_id),) = by_run
        run_rows = [(row[1], *row[4:]) for row in rows]
        return pages.run_records(run_id, agent_id, session_id, run_rows, 1000)
    records: list[Any] = [None] * len(rows)
    for (run_id, agent_id, session_id), indexes in by_run.items():
        run_rows = [(rows[i][1], *rows[i][4:]) for i in indexes]
        decoded = pages.run_records(run_id, agent_id, session_id, run_rows, 1000)
        for index, record in zip(indexes, decoded, strict=True):
            records[index] = record
    return tuple(records)


def _run_ids(row: Sequence[Any]) -> tuple[Any, Any, Any]:
    return row[0], row[2], row[3]
