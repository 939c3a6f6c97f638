"""[V4] a run's transcript chain: which runs its history reaches, through which record.

A run may start from a history reference (``transcript_messages_referenced``) to
another run of its session, which may start from one in turn. Every backend
answers ``load_transcript_chain`` the same way: it reads the heads of the
session's runs and the session's references (a few rows), follows them here
from the asked run to the first run without one, then reads each run of the
chain through its cut in one more statement and checks it as a listing of
those records would be. So a replay costs the same few statements however long
the conversation is. What a chain decides lives here; backends only read.

A windowed chain [V5] stops where the model input begins: walking from the
asked run, the first run with a ``transcript_window_applied`` record within
its cut holds the window that governs (its newest there), and the chain ends
at the run and record the window starts at. A backend reads the session's
references and windows newest first and stops as soon as :class:`ChainScan`
says the walk has all it needs, so the cost follows the window, not the
session's length; then it reads the heads of only the runs those rows name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from agentledger.errors import CorruptRecordError, ValidationError
from agentledger.storage import payloads
from agentledger.storage.pages import RunHead, run_records, transcript_records
from agentledger.storage.types import Record, TranscriptSegment

if TYPE_CHECKING:
    from agentledger.storage.encryption import Encryption

__all__ = [
    "CHAIN_TYPES",
    "ChainIndex",
    "ChainLink",
    "ChainScan",
    "chain_links",
    "chain_segments",
    "decode_reference",
    "decode_window",
    "reference_records",
]

CHAIN_TYPES = payloads.TRANSCRIPT_TYPES | {
    payloads.TRANSCRIPT_REFERENCED,
    payloads.TRANSCRIPT_WINDOW,
}
"""The record types a chain segment holds: message arrays, history references, windows."""


class ChainLink(NamedTuple):
    """One run of a chain and the ids of the first and last of its records the chain
    reaches (the first is 1 but where a window starts)."""

    run_id: str
    through: int
    first: int = 1


class ChainIndex(NamedTuple):
    """A session's history references (one per run at most) and windows (by run, oldest
    first), each checked."""

    references: dict[str, Record]
    windows: dict[str, list[Record]]


def decode_reference(record: Record) -> payloads.TranscriptReference:
    """A stored history reference, strictly decoded; a misfit is corruption [J1]."""
    try:
        reference = payloads.TranscriptReference.decode(record.payload)
        if not reference.through.isdigit() or reference.through.startswith("0"):
            raise ValidationError(field="through", expected="a record id", got=reference.through)
    except ValidationError as e:
        raise CorruptRecordError(
            run_id=record.run_id,
            record_id=record.id,
            reason=f"{payloads.TRANSCRIPT_REFERENCED}: {e.expected}: {e.got}",
        ) from e
    return reference


class _Step(NamedTuple):
    seq: int
    run_id: str
    through: int


class ChainScan:
    """Follows a windowed walk [V5] over a session's references and windows read newest
    first, to say when the rows read so far hold all the walk needs.

    The rows are not trusted here (their checksums are verified afterwards, by
    :func:`reference_records`): after a row that does not decode, the scan reads
    the session's rows to the end, so the chain check that follows sees all of
    them and names the damage if the chain reaches it.

    Args:
        run_id: the run whose chain is read.
        newest: its newest record id (its cut).
        open_payload: the payload of a row ``(run_id, *run row)`` as stored in
            the clear (opens a sealed one).
    """

    def __init__(
        self, run_id: str, newest: int, open_payload: Callable[[Sequence[Any]], bytes]
    ) -> None:
        self.run_id = run_id
        self.newest = newest
        self.rows: list[Sequence[Any]] = []
        """Every row given, in the order given."""
        self.named: set[str] = {run_id}
        """The runs the rows belong to or name: the heads the chain check needs."""
        self._open = open_payload
        self._references: dict[str, _Step] = {}
        self._windows: dict[str, list[tuple[int, payloads.TranscriptPosition]]] = {}
        self._broken = False

    def add(self, rows: Iterable[Sequence[Any]]) -> bool:
        """Take rows ``(run_id, seq, turn_id, event_key, type, ts, payload, checksum)``,
        newest first; True once the walk has all it needs."""
        for row in rows:
            self.rows.append(row)
            run_id, seq, kind = row[0], int(row[1]), row[4]
            self.named.add(run_id)
            try:
                payload = self._open(row)
                if kind == payloads.TRANSCRIPT_WINDOW:
                    start = payloads.TranscriptWindow.decode(payload).start
                    self.named.add(start.run_id)
                    self._windows.setdefault(run_id, []).append((seq, start))
                elif run_id not in self._references:
                    reference = payloads.TranscriptReference.decode(payload)
                    self.named.add(reference.run_id)
                    step = _Step(seq, reference.run_id, int(reference.through))
                    self._references[run_id] = step
            except (ValidationError, CorruptRecordError, ValueError):
                self._broken = True  # read on: the checks that follow say what is wrong
        return self.done()

    def done(self) -> bool:
        """Whether the rows so far answer the walk (see the module docstring)."""
        if self._broken:
            return False
        current, cut = self.run_id, self.newest
        start: payloads.TranscriptPosition | None = None
        seen: set[str] = set()
        while current not in seen:
            seen.add(current)
            if start is None:  # newest first: the first one within the cut governs
                start = next((s for q, s in self._windows.get(current, ()) if q <= cut), None)
            if start is not None and current == start.run_id:
                return True
            reference = self._references.get(current)
            if reference is None:
                return False  # not read yet, or the run has none: read on
            if reference.seq > cut:
                return True  # the chain ends at this run
            current, cut = reference.run_id, reference.through
        return True  # a cycle: the chain check names it


def decode_window(record: Record) -> payloads.TranscriptWindow:
    """A stored window, strictly decoded; a misfit is corruption [J1]."""
    try:
        return payloads.TranscriptWindow.decode(record.payload)
    except ValidationError as e:
        raise CorruptRecordError(
            run_id=record.run_id,
            record_id=record.id,
            reason=f"{payloads.TRANSCRIPT_WINDOW}: {e.expected}: {e.got}",
        ) from e


def reference_records(
    rows: Iterable[Sequence[Any]],
    heads: Mapping[str, RunHead],
    *,
    per_second: int,
    sealer: Encryption | None,
) -> ChainIndex:
    """The references and windows of a session, by run, from rows ``(run_id, *run row)``,
    each row's checksum verified and, sealed, its payload opened.

    Raises:
        CorruptRecordError: a damaged row, a row of a run the session does not
            hold, or a run with two references.
    """
    found: dict[str, Record] = {}
    windows: dict[str, list[Record]] = {}
    for run_id, *row in rows:
        head = heads.get(run_id)
        if head is None:
            raise CorruptRecordError(
                run_id=run_id, record_id=str(row[0]), reason="a history reference of no run"
            )
        opener = sealer.run_opener(head.session_id, run_id, row[0]) if sealer else None
        (record,) = run_records(run_id, head.agent_id, head.session_id, [row], per_second, opener)
        if record.type == payloads.TRANSCRIPT_WINDOW:
            windows.setdefault(run_id, []).append(record)
            continue
        if run_id in found:
            raise CorruptRecordError(
                run_id=run_id, record_id=record.id, reason="a second history reference"
            )
        found[run_id] = record
    for kept in windows.values():
        kept.sort(key=lambda r: int(r.id))
    return ChainIndex(found, windows)


def chain_links(
    run_id: str,
    heads: Mapping[str, RunHead],
    index: ChainIndex,
    *,
    windowed: bool = False,
) -> list[ChainLink]:
    """The chain of ``run_id``: itself through its newest record, then each source its
    history references, through the record named, until a run with none; ``windowed``,
    until the record the governing window starts at (see the module docstring).

    A reference past the cut of the run holding it is not part of the chain.

    Raises:
        CorruptRecordError: naming the reference that names a run of another
            session or none, a record past its source's log, or closes a cycle;
            or the window that starts outside the chain.
    """
    links = _walk(run_id, heads, index.references)
    if not windowed:
        return links
    for at, link in enumerate(links):
        window = next(
            (w for w in reversed(index.windows.get(link.run_id, ())) if int(w.id) <= link.through),
            None,
        )
        if window is None:
            continue
        start = decode_window(window).start
        for end, bottom in enumerate(links[at:], at):
            if bottom.run_id != start.run_id:
                continue
            first = int(start.record) if start.record.isdigit() else 0
            limit = int(window.id) if end == at else bottom.through
            if not 1 <= first <= limit:
                break
            return [*links[:end], ChainLink(bottom.run_id, bottom.through, first)]
        raise CorruptRecordError(
            run_id=window.run_id,
            record_id=window.id,
            reason=(
                f"the window starts at record {start.record} of run {start.run_id}, "
                "outside its transcript chain"
            ),
        )
    return links


def _walk(
    run_id: str, heads: Mapping[str, RunHead], references: Mapping[str, Record]
) -> list[ChainLink]:
    links: list[ChainLink] = []
    seen: set[str] = set()
    current, through = run_id, heads[run_id].newest
    while True:
        links.append(ChainLink(current, through))
        seen.add(current)
        record = references.get(current)
        if record is None or int(record.id) > through:
            return links
        reference = decode_reference(record)
        source = heads.get(reference.run_id)
        problem = ""
        if reference.run_id in seen:
            problem = f"names run {reference.run_id} again (a cycle)"
        elif source is None:
            problem = f"names run {reference.run_id}, which the session does not hold"
        elif int(reference.through) > source.newest:
            problem = (
                f"names record {reference.through} of run {reference.run_id}, "
                f"whose log ends at {source.newest}"
            )
        if problem:
            raise CorruptRecordError(run_id=current, record_id=record.id, reason=problem)
        current, through = reference.run_id, int(reference.through)


def chain_segments(
    links: Sequence[ChainLink],
    heads: Mapping[str, RunHead],
    rows: Mapping[str, list[Any]],
    *,
    per_second: int,
    sealer: Encryption | None,
) -> tuple[TranscriptSegment, ...]:
    """Each link's run rows (ids first..through) checked as a listing of them is, kept to
    their transcript records.

    Raises:
        CorruptRecordError: a missing or repeated id, a damaged row, or a
            lifecycle record that does not fit its run.
    """
    segments = []
    for link in links:
        records = transcript_records(
            link.run_id,
            heads[link.run_id],
            rows.get(link.run_id, []),
            link.through,
            CHAIN_TYPES,
            first=link.first,
            per_second=per_second,
            sealer=sealer,
        )
        segments.append(
            TranscriptSegment(
                run_id=link.run_id,
                through=str(link.through),
                records=records,
                first=str(link.first),
            )
        )
    return tuple(segments)
