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

import zlib
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from agentledger.errors import CorruptRecordError
from agentledger.storage.integrity import mismatch, record_checksum, run_seed, verify
from agentledger.storage.payloads import LIFECYCLE_TYPES, TRANSCRIPT_TYPES
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
    "decode_run_page",
    "decode_session",
    "encode_labels",
    "from_ms",
    "record_values",
    "run_value",
    "split_transcript",
    "to_ms",
    "unverified_record",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_FROM_SECONDS = datetime.fromtimestamp
_FAST_MS = 8_000_000_000_000
"""Below 2**33 seconds (year 2242) a float of seconds is within half a microsecond
of the exact value, so ``fromtimestamp`` rounds back to the exact millisecond; it
is about twice as fast as the integer arithmetic used outside that range."""
_CRC = zlib.crc32
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
"""Columns of ``records`` that vary within one run, as :func:`decode_run_page` expects."""


def to_ms(value: datetime) -> int:
    """Milliseconds since the epoch of a checked (aware, UTC, whole-ms) datetime."""
    return (value - _EPOCH) // _MS


def from_ms(value: int) -> datetime:
    """The UTC datetime of a stored millisecond count, exactly."""
    if 0 <= value < _FAST_MS:
        return _FROM_SECONDS(value / 1000, UTC)
    return _EPOCH + _MS * value


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


def record_values(record: Record) -> tuple[object, ...]:
    """A record as the values of :data:`RECORD_COLUMNS`, its checksum computed."""
    seq = int(record.id)
    ms = to_ms(record.timestamp)
    seed = run_seed(record.run_id, record.agent_id, record.session_id)
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
        )
    except (ValueError, TypeError, OverflowError, msgspec.DecodeError) as e:
        raise CorruptRecordError(run_id=str(row[0]), record_id="", reason=f"run row: {e}") from e


def unverified_record(row: Sequence[Any]) -> Record | None:
    """A ``records`` row that fails its checksum, as stored (None if it is intact).

    For diagnosis only: its values are what the damage left (a timestamp that
    cannot be read is the epoch).
    """
    try:
        decode_record(row)
    except CorruptRecordError:
        pass
    else:
        return None
    run_id, seq, agent_id, session_id, turn_id, event_key, type_, timestamp, payload, _ = row
    try:
        at = from_ms(timestamp)
    except (TypeError, ValueError, OverflowError):
        at = _EPOCH
    return Record(
        run_id=str(run_id),
        agent_id=str(agent_id),
        session_id=str(session_id),
        turn_id=str(turn_id),
        event_key=str(event_key),
        type=str(type_),
        timestamp=at,
        payload=payload if isinstance(payload, bytes) else str(payload).encode(),
        id=str(seq),
    )


def decode_record(row: Sequence[Any]) -> Record:
    """A ``records`` row, exactly as stored, its checksum verified; damage is corruption."""
    run_id, seq, agent_id, session_id, turn_id, event_key, type_, timestamp, payload, checksum = row
    verify(
        run_id,
        agent_id,
        session_id,
        [(seq, turn_id, event_key, type_, timestamp, payload, checksum)],
    )
    try:
        return Record(
            run_id=run_id,
            agent_id=agent_id,
            session_id=session_id,
            turn_id=turn_id,
            event_key=event_key,
            type=type_,
            timestamp=from_ms(timestamp),
            payload=payload,
            id=str(seq),
        )
    except (TypeError, ValueError, OverflowError) as e:
        raise CorruptRecordError(run_id=str(run_id), record_id=str(seq), reason=str(e)) from e


def decode_records(rows: list[Any]) -> tuple[Record, ...]:
    """A page of ``records`` rows; the fast path of every reload.

    It repeats :func:`decode_record` inline on purpose: a function call per row
    costs about a third more on a 10,000-record reload.
    """
    seeds: dict[tuple[object, object, object], int] = {}
    try:
        for run_id, seq, agent_id, session_id, turn_id, event_key, type_, ms, payload, cs in rows:
            ids = (run_id, agent_id, session_id)
            seed = seeds.get(ids)
            if seed is None:
                seed = seeds[ids] = run_seed(run_id, agent_id, session_id)
            if record_checksum(seed, seq, turn_id, event_key, type_, ms, payload) != cs:
                raise mismatch(run_id, seq)
    except (TypeError, ValueError):
        return tuple(decode_record(row) for row in rows)
    try:
        return tuple(
            [
                Record(
                    run_id=run_id,
                    agent_id=agent_id,
                    session_id=session_id,
                    turn_id=turn_id,
                    event_key=event_key,
                    type=type_,
                    timestamp=(
                        _FROM_SECONDS(timestamp / 1000, UTC)
                        if 0 <= timestamp < _FAST_MS
                        else _EPOCH + _MS * timestamp
                    ),
                    payload=payload,
                    id=str(seq),
                )
                for (
                    run_id,
                    seq,
                    agent_id,
                    session_id,
                    turn_id,
                    event_key,
                    type_,
                    timestamp,
                    payload,
                    _,
                ) in rows
            ]
        )
    except (TypeError, OverflowError):
        pass
    # Slow path: find the damaged row and name it.
    return tuple(decode_record(row) for row in rows)


def decode_run_page(
    run_id: str, agent_id: str, session_id: str, rows: list[Any]
) -> tuple[Record, ...]:
    """A page of one run's records from :data:`RUN_PAGE_COLUMNS` rows.

    What is the same for every record of a run (its run, agent and session
    ids, checked against the run on write) comes from the run, not from each
    row; consecutive records often share a timestamp (one activity's
    records), so an unchanged one is reused rather than built again. Every
    row's checksum is verified (with the run's ids) as it is built.
    """
    records: list[Record] = []
    append = records.append
    last_ms: object = None
    last_at = _EPOCH
    crc = _CRC
    try:
        seed = run_seed(run_id, agent_id, session_id)
        for seq, turn_id, event_key, type_, timestamp, payload, checksum in rows:
            # The checksum inline (see integrity.record_checksum): a call per row costs more.
            head = f"{seq}\x00{turn_id}\x00{event_key}\x00{type_}\x00{timestamp}\x00"
            if crc(payload, crc(head.encode(), seed)) != checksum:
                raise mismatch(run_id, seq)
            if timestamp != last_ms:
                last_at = (
                    _FROM_SECONDS(timestamp / 1000, UTC)
                    if 0 <= timestamp < _FAST_MS
                    else _EPOCH + _MS * timestamp
                )
                last_ms = timestamp
            append(
                Record(
                    run_id=run_id,
                    agent_id=agent_id,
                    session_id=session_id,
                    turn_id=turn_id,
                    event_key=event_key,
                    type=type_,
                    timestamp=last_at,
                    payload=payload,
                    id=str(seq),
                )
            )
    except (TypeError, ValueError, OverflowError):
        # Slow path: find the damaged row and name it.
        return tuple(
            decode_record((run_id, row[0], agent_id, session_id, *row[1:])) for row in rows
        )
    return tuple(records)


def split_transcript(
    run_id: str, agent_id: str, session_id: str, rows: list[Any]
) -> tuple[list[bytes], tuple[Record, ...]]:
    """A run's whole log of :data:`RUN_PAGE_COLUMNS` rows, every checksum verified, as
    its transcript payloads and the records a listing check reads.

    Those records are its lifecycle records and its newest one (see
    ``lifecycle.check_listed``); no other row becomes a ``Record``.
    """
    verify(run_id, agent_id, session_id, rows)
    payloads: list[bytes] = []
    listed: list[Any] = []
    for row in rows:
        type_ = row[3]
        if type_ in TRANSCRIPT_TYPES:
            payloads.append(row[5])
        elif type_ in LIFECYCLE_TYPES:
            listed.append(row)
    if rows and (not listed or listed[-1] is not rows[-1]):
        listed.append(rows[-1])
    return payloads, decode_run_page(run_id, agent_id, session_id, listed)
