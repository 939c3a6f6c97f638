"""One page of a session's log, decided once for every backend [L9] [J1].

A backend only fetches rows; what makes a session page intact or damaged, and
the cursor of the next page, are decided here, so the same damage is the same
:class:`~agentledger.errors.CorruptRecordError` (class and fields) on SQLite and
PostgreSQL. A backend fetches *session rows*, ``(position, run_id, agent_id,
session_id)`` followed by a run row (see :mod:`agentledger.storage.pages`):
``(position, run_id, agent_id, session_id, seq, turn_id, event_key, type, stamp,
payload, checksum)``, in position order.

The checks, in order: each run's records on the page follow its sequence without
a gap, and the record before a run's first one on the page was stored before it
(:func:`entering` names the records whose positions that needs); every checksum
and seal; the lifecycle records against their runs; and on the last page, every
ended run's log ends with what ended it (:class:`SessionEnd`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from agentledger.errors import CorruptRecordError
from agentledger.storage import lifecycle
from agentledger.storage.cursor import decode_cursor, encode_cursor
from agentledger.storage.integrity import sequence_gap
from agentledger.storage.pages import run_records
from agentledger.storage.types import Page, Record, RunStatus

if TYPE_CHECKING:
    from agentledger.storage.encryption import Encryption

__all__ = [
    "SessionEnd",
    "check_order",
    "entering",
    "missing_before",
    "next_cursor",
    "page_end",
    "position_gap",
    "session_page",
    "session_records",
    "session_start",
]

_SCOPE = "session"


class SessionEnd(NamedTuple):
    """An ended run of the session and its newest stored record (None: it has none)."""

    run_id: str
    status: str
    """As stored: a status that is not a :class:`RunStatus` is damage."""
    last_seq: int | None
    last_type: str | None


def session_start(session_id: str, cursor: str, newest: int) -> int:
    """The position a session cursor names (0: the start), checked against the
    session and its ``newest`` position.

    Raises:
        ValidationError: a cursor this store did not issue for this session,
            or one past ``newest``.
    """
    return decode_cursor(cursor, _SCOPE, session_id, newest)


def entering(rows: Sequence[Any]) -> list[tuple[str, int]]:
    """``(run_id, seq)`` of the record just before each run's first record on the page
    (for runs that do not start on it): :func:`check_order` needs their positions."""
    seen: set[str] = set()
    wanted: list[tuple[str, int]] = []
    for row in rows:
        run_id, seq = row[1], row[4]
        if run_id not in seen:
            seen.add(run_id)
            if seq > 1:
                wanted.append((run_id, seq - 1))
    return wanted


def check_order(rows: Sequence[Any], before: Mapping[tuple[str, int], int | None] | None) -> None:
    """Each run's records on a session page follow its sequence without a gap.

    Positions are commit order and need not be consecutive, so the check is per
    run: consecutive ids within the page, and the record before a run's first one
    on the page (its position in ``before``, keyed as :func:`entering` names it;
    missing or None: not stored) stored before it. ``before`` None: the backend's
    positions are gap-free and were checked, which vouches for those records.

    Raises:
        CorruptRecordError: a sequence gap naming the run and the missing record.
    """
    newest: dict[str, int] = {}
    for row in rows:
        pos, run_id, seq = row[0], row[1], row[4]
        last = newest.get(run_id)
        if last is None:
            if seq > 1 and before is not None:
                found = before.get((run_id, seq - 1))
                if found is None or found >= pos:
                    raise missing_before(run_id, seq)
        elif seq != last + 1:
            raise sequence_gap(run_id, last, [seq])
        newest[run_id] = seq


def missing_before(run_id: str, seq: int) -> CorruptRecordError:
    """The error for record ``seq`` of a run whose record before it is not stored (or
    was stored after it): what :func:`check_order` raises for it."""
    return sequence_gap(run_id, seq - 2, [seq])


def session_records(
    rows: Sequence[Any], *, per_second: int, sealer: Encryption | None
) -> tuple[Record, ...]:
    """Session rows as records in their order, each run's rows verified (checksum, then
    seal) together as one run's page is (see :func:`..pages.run_records`).

    Raises:
        CorruptRecordError: naming the first damaged row of the first run met.
    """
    by_run: dict[tuple[Any, Any, Any], list[int]] = {}
    for index, row in enumerate(rows):
        by_run.setdefault((row[1], row[2], row[3]), []).append(index)
    records: list[Any] = [None] * len(rows)
    for (run_id, agent_id, session_id), indexes in by_run.items():
        run_rows = [rows[i][4:] for i in indexes]
        opener = None
        if sealer is not None:
            opener = sealer.run_opener(session_id, run_id, run_rows[0][0])
        decoded = run_records(run_id, agent_id, session_id, run_rows, per_second, opener)
        for index, record in zip(indexes, decoded, strict=True):
            records[index] = record
    return tuple(records)


def page_end(rows: Sequence[Any], start: int) -> int:
    """The position a page of session ``rows`` after ``start`` ends at (``start`` if empty)."""
    return int(rows[-1][0]) if rows else start


def next_cursor(session_id: str, end: int, newest: int) -> str:
    """The cursor of the page after the one ending at position ``end`` ("" at ``newest``)."""
    return encode_cursor(_SCOPE, session_id, end) if end < newest else ""


def session_page(
    session_id: str,
    records: tuple[Record, ...],
    *,
    end: int,
    newest: int,
    statuses: Mapping[str, RunStatus | None],
    ends: Callable[[], Iterable[SessionEnd]],
) -> Page:
    """The page of ``records`` (built by :func:`session_records`, ending at position
    ``end``: see :func:`page_end`): their lifecycle records checked against ``statuses``
    (those of :func:`~agentledger.storage.lifecycle.completed_runs`), then the next
    page's cursor; on the last page, every ended run's log must end with what ended it
    (``ends`` is asked only then).

    Raises:
        CorruptRecordError: a lifecycle record that does not fit its run, or an
            ended run whose log does not end with its ending.
    """
    lifecycle.check_listed(records, statuses)
    cursor = next_cursor(session_id, end, newest)
    if not cursor:
        _check_ends(ends())
    return Page(records=records, next_cursor=cursor)


def _check_ends(ends: Iterable[SessionEnd]) -> None:
    """Every ended run's newest record is the one that ended it; session positions
    leave no gap to see when a run's last record is gone, so this makes it loud."""
    for run_id, status, seq, type_ in ends:
        try:
            run_status = RunStatus(status)
        except ValueError as e:
            raise CorruptRecordError(
                run_id=str(run_id), record_id="", reason=f"run row: {e}"
            ) from e
        last_type = None if type_ is None else str(type_)
        lifecycle.check_log_end(str(run_id), run_status, str(seq), last_type)


def position_gap(session_id: str, start: int, positions: Sequence[int]) -> CorruptRecordError:
    """A page of a backend whose positions are gap-free that skips one, when no run's
    check names the damage."""
    error = sequence_gap("", start, positions)
    return CorruptRecordError(
        run_id="",
        record_id=error.record_id,
        reason=f"session {session_id!r}, by position: {error.reason}",
    )
