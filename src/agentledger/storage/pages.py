"""One run's stored rows as a checked page of records: what both SQL backends' listings share.

A backend reads a run's own row once (its agent and session ids, status and
newest sequence), then only the columns that vary within the run, as *run rows*
``(seq, turn_id, event_key, type, stamp, payload, checksum)``. ``stamp`` is the
record's timestamp as the integer the checksum hashes: milliseconds on SQLite,
microseconds on PostgreSQL (``per_second``). From here on the decisions are the
same: ids in order without a gap, every checksum verified, lifecycle records
checked against the run [J1], the cursor of the next page [L9].
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from agentledger.errors import CorruptRecordError
from agentledger.storage import lifecycle
from agentledger.storage.cursor import encode_cursor
from agentledger.storage.integrity import mismatch, run_seed, sequence_gap, verify
from agentledger.storage.payloads import LIFECYCLE_TYPES, TRANSCRIPT_TYPES
from agentledger.storage.types import Page, Record, RunStatus

if TYPE_CHECKING:
    from agentledger.storage.encryption import Encryption
    from agentledger.storage.encryption.sealer import Opener

__all__ = [
    "RunHead",
    "row_record",
    "run_page",
    "run_records",
    "split_transcript",
    "stamp_time",
    "transcript_records",
    "unverified_record",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FROM_SECONDS = datetime.fromtimestamp
_UNIT = {1000: timedelta(milliseconds=1), 1_000_000: timedelta(microseconds=1)}
_PAYLOAD = itemgetter(5)
"""A run row's stored payload."""
_STEPS = {
    per_second: {ms * (per_second // 1000): timedelta(milliseconds=ms) for ms in range(1, 1000)}
    for per_second in (1000, 1_000_000)
}
"""The whole-millisecond steps under a second, in stamp units: a record stamped soon
after the one before it (the same turn, a quick tool) gets its time by one exact
addition, about a third of the cost of building it from the stamp."""
_FAST = {1000: 2**33 * 1000, 1_000_000: 2**32 * 1_000_000}
"""Below these stamps (years 2242 and 2106) a float of seconds is within a quarter
of a unit of the exact value, so ``fromtimestamp`` rounds back to the exact stamp;
it is about twice as fast as the integer arithmetic used beyond."""


class RunHead(NamedTuple):
    """What a page of one run needs of the run itself."""

    agent_id: str
    session_id: str
    newest: int
    """The run's newest record id (0: none yet)."""
    status: RunStatus


def stamp_time(stamp: int, per_second: int) -> datetime:
    """The UTC datetime of a stored stamp (``per_second`` units since the epoch), exactly."""
    if 0 <= stamp < _FAST[per_second]:
        return _FROM_SECONDS(stamp / per_second, UTC)
    return _EPOCH + _UNIT[per_second] * stamp


def run_records(
    run_id: str,
    agent_id: str,
    session_id: str,
    rows: Sequence[Any],
    per_second: int,
    opener: Opener | None = None,
    *,
    keep: frozenset[str] | None = None,
    checked: list[Record] | None = None,
) -> tuple[Record, ...]:
    """Run rows as records, each row's checksum verified (with the run's ids) as it is built;
    sealed payloads [A2] are opened by ``opener`` first, so each row becomes one record.
    Given ``keep``, only the rows of those types are returned, and the lifecycle rows and
    the last row become records appended to ``checked`` (what a listing check reads); every
    other row is verified all the same, in the same pass.

    Consecutive records often share a timestamp (one activity's records), so
    an unchanged one is reused rather than built again.

    Raises:
        CorruptRecordError: naming the first damaged row: its checksum, then its seal.
    """
    opened: Iterator[bytes] | None = None
    if opener is not None:
        try:
            opened = iter(opener(rows))
        except CorruptRecordError:
            for one in rows:  # the first damaged row, by its checksum before its seal
                verify(run_id, agent_id, session_id, [one])
                opener([one])
            raise
    records: list[Record] = []
    append = records.append
    fast, unit, steps = _FAST[per_second], _UNIT[per_second], _STEPS[per_second]
    last_stamp = -_FAST[per_second]  # no stamp is a step away from it
    last_at = _EPOCH
    crc = zlib.crc32
    last_seq = rows[-1][0] if keep is not None and rows else None
    lifecycle_types = LIFECYCLE_TYPES
    text_of: int | None = None  # the int stamp whose text is stamp_text
    stamp_text = ""
    row: Any = None  # the row being read, to name it if its values are unreadable
    try:
        seed = run_seed(run_id, agent_id, session_id)
        for row in rows:
            seq, turn_id, event_key, type_, stamp, payload, checksum = row
            # The checksum inline (see integrity.record_checksum): a call per row costs more.
            # The id's text is the record's id too, and a stamp's text is made once per stamp
            # (consecutive records often share one); each is f"{value}", as the write made it.
            record_id = str(seq)
            if type(stamp) is not int:
                text_of, stamp_text = None, f"{stamp}"
            elif stamp != text_of:
                text_of, stamp_text = stamp, f"{stamp}"
            head = f"{record_id}\x00{turn_id}\x00{event_key}\x00{type_}\x00{stamp_text}\x00"
            if crc(payload, crc(head.encode(), seed)) != checksum:
                raise mismatch(run_id, seq)
            if keep is not None:
                kept = type_ in keep
                listed = type_ in lifecycle_types or seq == last_seq
                if not (kept or listed):
                    if opened is not None:
                        next(opened)
                    continue
            if stamp != last_stamp:
                step = steps.get(stamp - last_stamp)
                if step is not None:
                    last_at += step
                elif 0 <= stamp < fast:
                    last_at = _FROM_SECONDS(stamp / per_second, UTC)
                else:
                    last_at = _EPOCH + unit * stamp
                last_stamp = stamp
            record = Record(
                run_id=run_id,
                agent_id=agent_id,
                session_id=session_id,
                turn_id=turn_id,
                event_key=event_key,
                type=type_,
                timestamp=last_at,
                payload=payload if opened is None else next(opened),
                id=record_id,
            )
            if keep is None or kept:
                append(record)
            if keep is not None and listed and checked is not None:
                checked.append(record)
    except (TypeError, ValueError, OverflowError) as e:
        seq = row[0] if isinstance(row, Sequence) and row else ""
        raise CorruptRecordError(
            run_id=run_id, record_id=str(seq), reason=f"unreadable record values: {e}"
        ) from e
    return tuple(records)


_SEEDS: dict[tuple[str, str, str], int] = {}
""":func:`run_seed` of the runs whose single rows were read last (bounded)."""


def row_record(
    run_id: str, agent_id: str, session_id: str, row: Sequence[Any], per_second: int
) -> Record:
    """One plaintext run row as its record, its checksum verified: :func:`run_records` of
    ``[row]`` without its set-up, for reads of one row per run (a chain's references).

    Raises:
        CorruptRecordError: the row is damaged.
    """
    try:
        seq, turn_id, event_key, type_, stamp, payload, checksum = row
        ids = (run_id, agent_id, session_id)
        seed = _SEEDS.get(ids)
        if seed is None:
            if len(_SEEDS) >= 4096:
                _SEEDS.clear()
            seed = _SEEDS[ids] = run_seed(run_id, agent_id, session_id)
        record_id = str(seq)
        head = f"{record_id}\x00{turn_id}\x00{event_key}\x00{type_}\x00{stamp}\x00"
        if zlib.crc32(payload, zlib.crc32(head.encode(), seed)) != checksum:
            raise mismatch(run_id, seq)
        return Record(
            run_id=run_id,
            agent_id=agent_id,
            session_id=session_id,
            turn_id=turn_id,
            event_key=event_key,
            type=type_,
            timestamp=stamp_time(stamp, per_second),
            payload=payload,
            id=record_id,
        )
    except (TypeError, ValueError, OverflowError) as e:
        seq = row[0] if isinstance(row, Sequence) and row else ""
        raise CorruptRecordError(
            run_id=run_id, record_id=str(seq), reason=f"unreadable record values: {e}"
        ) from e


def run_page(
    run_id: str,
    head: RunHead,
    rows: list[Any],
    *,
    start: int,
    size: int,
    per_second: int,
    sealer: Encryption | None,
) -> Page:
    """[L9] the page of at most ``size`` records after ``start``, from its run rows.

    ``start`` is at most ``head.newest`` (the caller refused a cursor past the
    end). The rows must be the ids ``start+1..`` without a gap; out of order
    they are put in order (a backend may skip its ORDER BY).

    Raises:
        CorruptRecordError: a missing or repeated id, a damaged row, or a
            lifecycle record that does not fit the run.
    """
    end = min(start + size, head.newest)
    _check_sequence(run_id, start, end, rows)
    opener = None
    if sealer is not None and rows:
        opener = sealer.run_opener(head.session_id, run_id, rows[0][0])
    records = run_records(run_id, head.agent_id, head.session_id, rows, per_second, opener)
    lifecycle.check_listed(records, {run_id: head.status}, ends_log=end == head.newest)
    next_cursor = encode_cursor("run", run_id, end) if end < head.newest else ""
    return Page(records=records, next_cursor=next_cursor)


def split_transcript(
    run_id: str, head: RunHead, rows: list[Any], *, per_second: int, sealer: Encryption | None
) -> list[bytes]:
    """[R2] a run's whole log of run rows, checked as one listing of it is, as the
    payloads of its transcript records in order (see :func:`transcript_records`)."""
    records = transcript_records(
        run_id, head, rows, head.newest, TRANSCRIPT_TYPES, per_second=per_second, sealer=sealer
    )
    return [record.payload for record in records]


def transcript_records(
    run_id: str,
    head: RunHead,
    rows: list[Any],
    through: int,
    kept: frozenset[str],
    *,
    first: int = 1,
    per_second: int,
    sealer: Encryption | None,
) -> tuple[Record, ...]:
    """[V4] a run's rows ``first..through``, checked as one listing of them is, as the
    records of the types in ``kept`` (a replay's); only those and the rows the listing
    check reads (lifecycle records and the last one) become records, every row's checksum
    verified, all in one pass over the rows."""
    _check_sequence(run_id, first - 1, through, rows)
    opener = None
    if sealer is not None and rows:  # a listing opens every payload: run_records does too
        opener = sealer.run_opener(head.session_id, run_id, rows[0][0])
    checked: list[Record] = []
    built = run_records(
        run_id, head.agent_id, head.session_id, rows, per_second, opener, keep=kept, checked=checked
    )
    lifecycle.check_listed(checked, {run_id: head.status}, ends_log=through == head.newest)
    return built


def unverified_record(
    run_id: object,
    agent_id: object,
    session_id: object,
    row: Sequence[Any],
    per_second: int,
) -> Record | None:
    """A run row that fails its checksum, as stored (None if it is intact).

    For diagnosis only: its values are what the damage left (a stamp that
    cannot be read is the epoch).
    """
    try:
        verify(str(run_id), str(agent_id), str(session_id), [tuple(row)])
    except CorruptRecordError:
        pass
    else:
        return None
    seq, turn_id, event_key, type_, stamp, payload, _ = row
    try:
        at = stamp_time(stamp, per_second)
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
        payload=bytes(payload)
        if isinstance(payload, bytes | memoryview)
        else f"{payload}".encode(),
        id=str(seq),
    )


def _check_sequence(run_id: str, start: int, end: int, rows: list[Any]) -> None:
    """The rows are ids ``start+1..end`` exactly; put in order first if they are not."""
    if rows and (rows[0][0] != start + 1 or rows[-1][0] != start + len(rows)):
        rows.sort(key=lambda row: row[0])
    if len(rows) != end - start or (rows and rows[-1][0] != end):
        raise sequence_gap(run_id, start, [row[0] for row in rows])
