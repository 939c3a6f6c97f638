"""[V4] a transcript chain's rows read lean: one pass over every link's rows at once.

What :func:`~agentledger.storage.transcript_chain.chain_segments` decides, for a store
that reads a chain's rows in one statement in plaintext, at a fraction of its cost on a
long conversation (hundreds of short runs): no call per link or per row, no grouping
of the rows by run, no string per row for its type, and no second read of the history
references the chain was walked by.

A lean row is ``(link, seq, type, turn_id, event_key, stamp, payload, checksum)``:
``link`` the index of its link, ``type`` the index of a common type in
:data:`CODED_TYPES` (the statement maps them, see :func:`coded_type_sql`), or the stored
text. The history references are left out (:data:`WITHOUT_REFERENCES`): each link's
reference was read, verified and decoded with the references the chain was walked by,
in the same snapshot, and is put back at its id. Rows that do not account for every
other id (a gap, or a reference the walk did not take) are a reason to read the chain
the whole way (:class:`NotLean`), which names the damage.

Every other row is verified by its checksum as it is read; the lifecycle records are
checked as a listing of them is (:func:`..lifecycle.check_listed`), a record built only
for a payload not seen passing before; a link through its run's newest record must end
as its run did (:func:`..lifecycle.check_log_end`); the ids of each link must be
``first..through`` without a gap.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from typing import Any

from agentledger.errors import CorruptRecordError
from agentledger.storage import lifecycle, payloads
from agentledger.storage.integrity import mismatch, run_seed
from agentledger.storage.pages import RunHead, stamp_time
from agentledger.storage.types import Record, RunStatus, TranscriptSegment

__all__ = [
    "CODED_TYPES",
    "WITHOUT_REFERENCES",
    "NotLean",
    "coded_type_sql",
    "lean_columns",
    "lean_segments",
]

CODED_TYPES = (
    payloads.TRANSCRIPT_APPENDED,
    payloads.TRANSCRIPT_SEEDED,
    payloads.TRANSCRIPT_REFERENCED,
    payloads.TRANSCRIPT_WINDOW,
    payloads.RUN_STARTED,
    payloads.RUN_COMPLETED,
    payloads.RUN_SUSPENDED,
    payloads.CHILD_RUN_LINKED,
    payloads.CANCELLATION_INTENT,
)
"""The types a lean row names by their index: the rows of a conversation are almost all
of these, and a small int is no new object where a type's text is one per row."""
_REFERENCE = CODED_TYPES.index(payloads.TRANSCRIPT_REFERENCED)
_KEPT = frozenset(
    {*payloads.TRANSCRIPT_TYPES, payloads.TRANSCRIPT_REFERENCED, payloads.TRANSCRIPT_WINDOW}
)
"""A segment's record types (the chain types)."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FROM_SECONDS = datetime.fromtimestamp


_PASSED: dict[tuple[str, bytes, RunStatus], None] = {}
"""Lifecycle payloads that passed the listing check for a run of that status: it depends
on nothing else, and a conversation's runs mostly store the same few (a ``run_started``
of ``{}``, a ``run_completed`` of success), so each is decoded once, not once per run.
Only passes are kept; a misfit is checked, and named, anew."""
_PASSED_MAX = 4096


def _passed(type_: str, payload: bytes, status: RunStatus) -> None:
    if type(payload) is not bytes:  # only bytes are kept (hashable, immutable)
        return
    if len(_PASSED) >= _PASSED_MAX:
        _PASSED.clear()
    _PASSED[type_, payload, status] = None


class NotLean(Exception):
    """Rows the lean read cannot account for (a gap, or a history reference the walk did
    not take, left out): read the chain whole, which says what is wrong."""


def coded_type_sql(column: str = "type") -> str:
    """The SQL expression of a lean row's type: the index of a :data:`CODED_TYPES` type,
    else the stored text."""
    cases = " ".join(f"WHEN '{name}' THEN {n}" for n, name in enumerate(CODED_TYPES))
    return f"CASE {column} {cases} ELSE {column} END"


def lean_columns(prefix: str = "") -> str:
    """The lean row's columns after ``link`` (``prefix``: the table's name and a dot)."""
    return (
        f"{prefix}seq, {coded_type_sql(prefix + 'type')}, {prefix}turn_id, {prefix}event_key, "
        f"{prefix}timestamp, {prefix}payload, {prefix}checksum"
    )


WITHOUT_REFERENCES = f"type != '{payloads.TRANSCRIPT_REFERENCED}'"
"""The condition that leaves a chain's history references out of its lean rows."""


def lean_segments(
    links: Sequence[Any],
    heads: Mapping[str, RunHead],
    rows: list[Any],
    *,
    per_second: int,
) -> tuple[TranscriptSegment, ...]:
    """Each link's lean rows (ids first..through) checked as a listing of them is, kept to
    their chain records; see the module docstring.

    ``links`` are :class:`~agentledger.storage.transcript_chain.ChainLink`; ``rows`` are
    every link's lean rows but its history reference, in link then id order (put in that
    order if they are not); each link's ``reference`` is put back at its id.

    Raises:
        CorruptRecordError: a damaged row, or a lifecycle record that does not fit its run.
        NotLean: rows that are not every id of each link but its reference's.
    """
    try:
        return _segments(links, heads, rows, per_second)
    except _Disorder:
        rows.sort(key=itemgetter(0, 1))
        try:
            return _segments(links, heads, rows, per_second)
        except _Disorder:
            raise NotLean from None


class _Disorder(Exception):
    """The rows are not each link's ids in order: sort them, or read the chain whole."""


def _segments(
    links: Sequence[Any],
    heads: Mapping[str, RunHead],
    rows: list[Any],
    per_second: int,
) -> tuple[TranscriptSegment, ...]:
    crc = zlib.crc32
    kept_types, coded = _KEPT, CODED_TYPES
    lifecycle_types = payloads.LIFECYCLE_TYPES
    passed = _PASSED
    fast = 2**33 * 1000 if per_second == 1000 else 2**32 * 1_000_000
    unit = timedelta(microseconds=1_000_000 // per_second)
    segments: list[TranscriptSegment] = []
    total = len(rows)
    at = 0
    last_stamp: Any = None
    text_of: Any = None  # the stamp whose text is stamp_text
    stamp_text = ""
    last_at = _EPOCH
    for index, link in enumerate(links):
        run_id, first, through = link.run_id, link.first, link.through
        head = heads[run_id]
        agent_id, session_id = head.agent_id, head.session_id
        reference = link.reference
        left_out = 0 if reference is None else int(reference.id)  # within first..through
        end = at + through - first + 1 - (left_out > 0)
        if end > total or (end > at and rows[end - 1][0] != index):
            raise _Disorder(index)
        records: list[Record] = []
        status = head.status
        last_type: str | None = None
        expected = first
        row: Any = None
        try:
            seed = run_seed(run_id, agent_id, session_id)
            for n in range(at, end):
                row = rows[n]
                link_at, seq, type_, turn_id, event_key, stamp, payload, checksum = row
                if expected == left_out and reference is not None:  # left out of the rows
                    records.append(reference)
                    expected += 1
                if link_at != index or seq != expected:
                    raise _Disorder(index)
                expected += 1
                if type_.__class__ is int:
                    type_ = coded[type_]
                last_type = type_
                record_id = str(seq)
                if stamp != text_of:  # consecutive records often share their stamp
                    text_of, stamp_text = stamp, f"{stamp}"
                text = f"{record_id}\x00{turn_id}\x00{event_key}\x00{type_}\x00{stamp_text}\x00"
                if crc(payload, crc(text.encode(), seed)) != checksum:
                    raise mismatch(run_id, seq)
                kept = type_ in kept_types
                if not kept:
                    if type_ in lifecycle_types and (type_, payload, status) not in passed:
                        record = Record(
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
                        lifecycle.check_listed([record], {run_id: status})
                        _passed(type_, payload, status)
                    continue
                if stamp != last_stamp:
                    if 0 <= stamp < fast:
                        last_at = _FROM_SECONDS(stamp / per_second, UTC)
                    else:
                        last_at = _EPOCH + unit * stamp
                    last_stamp = stamp
                records.append(
                    Record(
                        run_id=run_id,
                        agent_id=agent_id,
                        session_id=session_id,
                        turn_id=turn_id,
                        event_key=event_key,
                        type=type_,
                        timestamp=last_at,
                        payload=payload,
                        id=record_id,
                    )
                )
        except (TypeError, ValueError, OverflowError, IndexError) as e:
            seq = row[1] if isinstance(row, Sequence) and len(row) > 1 else ""
            raise CorruptRecordError(
                run_id=run_id, record_id=str(seq), reason=f"unreadable record values: {e}"
            ) from e
        if expected == left_out and reference is not None:  # the link's last record
            records.append(reference)
            expected += 1
            last_type = payloads.TRANSCRIPT_REFERENCED
        at = end
        if through == head.newest and last_type is not None:
            lifecycle.check_log_end(run_id, status, str(through), last_type)
        segments.append(
            TranscriptSegment(
                run_id=run_id, through=str(through), records=tuple(records), first=str(first)
            )
        )
    if at != total:
        raise _Disorder(len(links) - 1)
    return tuple(segments)
