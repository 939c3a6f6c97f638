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

Readers take the chain resolved once: :func:`load_transcript_chain` (or
:func:`resolve_chain` on a store's segments) walks what the store returned by
the same rules (:func:`chain_links`' walk) and returns a
:class:`TranscriptChain`: each link's run, cut, first record, depth,
exclusion of reasoning, reference and newest window, and the window that
governs. Replay, the transcript cache and prompt versions read that; none
walks references on its own. References and windows are decoded by the
checks their writes passed (:mod:`agentledger.storage.validation`), so a
reader accepts exactly what a store accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from agentledger.errors import CorruptRecordError, ValidationError
from agentledger.storage import payloads
from agentledger.storage.pages import RunHead, row_record, run_records, transcript_records
from agentledger.storage.types import Record, TranscriptSegment
from agentledger.storage.validation import (
    check_reference_payload,
    check_stored_payload,
    check_window_payload,
    record_number,
)

if TYPE_CHECKING:
    from agentledger.storage.encryption import Encryption
    from agentledger.storage.protocol import Store

__all__ = [
    "CHAIN_TYPES",
    "ChainIndex",
    "ChainLink",
    "ChainScan",
    "ChainWindow",
    "TranscriptChain",
    "chain_links",
    "chain_segments",
    "decode_reference",
    "decode_window",
    "load_transcript_chain",
    "reference_records",
    "resolve_chain",
]

CHAIN_TYPES = payloads.TRANSCRIPT_TYPES | {
    payloads.TRANSCRIPT_REFERENCED,
    payloads.TRANSCRIPT_WINDOW,
}
"""The record types a chain segment holds: message arrays, history references, windows."""
_LINKING = frozenset({payloads.TRANSCRIPT_REFERENCED, payloads.TRANSCRIPT_WINDOW})
"""The record types of a segment that shape its chain: its reference and its windows."""


class ChainLink(NamedTuple):
    """One run of a chain, as :func:`chain_links` resolves it.

    ``through`` and ``first`` are the ids of the last and first of its records
    the chain reaches (``first`` is 1 but where a window starts). ``depth`` is
    how many history references were followed to reach it (0: the run asked
    about); ``exclude_reasoning`` whether a reference above it drops reasoning
    (it composes down the chain and no later turn undoes it [V4]).
    ``reference`` is its history reference within the cut (it names the next
    link; None for the last), ``window`` its newest window within the cut
    (None if none).
    """

    run_id: str
    through: int
    first: int = 1
    depth: int = 0
    exclude_reasoning: bool = False
    reference: Record | None = None
    window: Record | None = None


class ChainWindow(NamedTuple):
    """The window that governs a chain's model input [V5]: walking from the run asked
    about, the newest window within the cut of the first run that has one."""

    record: Record
    window: payloads.TranscriptWindow
    link: int
    """The index of the link whose run holds ``record``."""


class ChainIndex(NamedTuple):
    """A session's history references (one per run at most) and windows (by run, oldest
    first), each checked."""

    references: dict[str, Record]
    windows: dict[str, list[Record]]


_REFERENCES: dict[tuple[str, bytes], payloads.TranscriptReference] = {}
"""References that passed their check, by record type and payload bytes: the check
depends on nothing else, so a chain read again (every turn replays the turns before)
decodes each once. Only passes are kept; a misfit is checked, and named, anew."""
_WINDOWS: dict[tuple[str, bytes], payloads.TranscriptWindow] = {}
"""Windows that passed their check, kept as :data:`_REFERENCES` are."""
_CHECKED_MAX = 4096


def decode_reference(record: Record) -> payloads.TranscriptReference:
    """A stored history reference, decoded by the check its write passed; a misfit is
    corruption [J1]."""
    return _checked(_REFERENCES, record, check_reference_payload)


def decode_window(record: Record) -> payloads.TranscriptWindow:
    """A stored window, decoded by the check its write passed; a misfit is corruption
    [J1]."""
    return _checked(_WINDOWS, record, check_window_payload)


_C = TypeVar("_C")


def _checked(
    kept: dict[tuple[str, bytes], _C], record: Record, check: Callable[[Record, str], _C]
) -> _C:
    payload = record.payload
    if type(payload) is not bytes:  # only bytes are kept (hashable, immutable)
        return check_stored_payload(record, check)
    key = (record.type, payload)
    found = kept.get(key)
    if found is None:
        found = check_stored_payload(record, check)
        if len(kept) >= _CHECKED_MAX:
            kept.clear()
        kept[key] = found
    return found


class _Step(NamedTuple):
    seq: int
    run_id: str
    through: int


class _Walk(NamedTuple):
    current: str
    cut: int
    start: payloads.TranscriptPosition | None
    seen: set[str]


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
        self._walk = _Walk(run_id, newest, None, set())
        """Where the last :meth:`done` stopped: the run whose reference it lacked, that
        run's cut, the governing window's start found before it, the runs walked past."""
        self.steps = 0
        """Runs the walks have visited: each at most once while no window arrives for a run
        walked past (the walk resumes where it stopped), so a long chain read in many
        batches costs its length, not its length times the batches."""

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
                    if run_id in self._walk.seen:  # it may govern where the walk went on
                        self._walk = _Walk(self.run_id, self.newest, None, set())
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
        if self._walk_to_end():
            self._walk = _Walk(self.run_id, self.newest, None, set())  # asked again: anew
            return True
        return False

    def _walk_to_end(self) -> bool:
        """The walk of :meth:`done`, resumed where the last one stopped."""
        current, cut, start, seen = self._walk
        while current not in seen:
            self.steps += 1
            found = start
            windows = self._windows.get(current) if found is None else None
            if windows:  # newest first: the first one within the cut governs
                found = next((s for q, s in windows if q <= cut), None)
            if found is not None and current == found.run_id:
                return True
            reference = self._references.get(current)
            if reference is None:  # not read yet, or the run has none: read on, and resume here
                self._walk = _Walk(current, cut, start, seen)
                return False
            seen.add(current)
            start = found
            if reference.seq > cut:
                return True  # the chain ends at this run
            current, cut = reference.run_id, reference.through
        return True  # a cycle: the chain check names it


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
        if sealer is None:
            record = row_record(run_id, head.agent_id, head.session_id, row, per_second)
        else:
            opener = sealer.run_opener(head.session_id, run_id, row[0])
            (record,) = run_records(
                run_id, head.agent_id, head.session_id, [row], per_second, opener
            )
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
    This is the one place the rules of a chain are decided: backends call it on
    the rows they read, and :func:`resolve_chain` on what a store returned.

    Raises:
        CorruptRecordError: naming the reference that names a run of another
            session or none, a record past its source's log, or closes a cycle;
            or the window that starts outside the chain.
    """
    newest = {rid: head.newest for rid, head in heads.items()}
    links = _walk(run_id, newest, index, "which the session does not hold")
    if not windowed:
        return links
    governing = _governing(links)
    return links if governing is None else _cut(links, governing)


def _walk(
    run_id: str, newest: Mapping[str, int], index: ChainIndex, missing: str
) -> list[ChainLink]:
    """Each link from ``run_id`` down, with its depth, exclusion, reference and window."""
    links: list[ChainLink] = []
    seen: set[str] = set()
    current, through, exclude = run_id, newest[run_id], False
    while True:
        seen.add(current)
        record = index.references.get(current)
        if record is not None and int(record.id) > through:
            record = None
        window = None
        windows = index.windows.get(current)
        if windows:
            window = next((w for w in reversed(windows) if int(w.id) <= through), None)
        links.append(ChainLink(current, through, 1, len(links), exclude, record, window))
        if record is None:
            return links
        reference = decode_reference(record)
        source = newest.get(reference.run_id)
        cut = int(reference.through)
        problem = ""
        if reference.run_id in seen:
            problem = f"names run {reference.run_id} again (a cycle)"
        elif source is None:
            problem = f"names run {reference.run_id}, {missing}"
        elif cut > source:
            problem = (
                f"names record {reference.through} of run {reference.run_id}, "
                f"whose log ends at {source}"
            )
        if problem:
            raise CorruptRecordError(run_id=current, record_id=record.id, reason=problem)
        current, through = reference.run_id, cut
        exclude = exclude or reference.exclude_reasoning


def _governing(links: Sequence[ChainLink]) -> ChainWindow | None:
    """The window that governs the chain's model input, decoded (None if none)."""
    for at, link in enumerate(links):
        if link.window is not None:
            return ChainWindow(link.window, decode_window(link.window), at)
    return None


def _cut(links: Sequence[ChainLink], governing: ChainWindow) -> list[ChainLink]:
    """``links`` down to the record the governing window starts at."""
    record, start, at = governing.record, governing.window.start, governing.link
    first = record_number(start.record) or 0
    for end, bottom in enumerate(links[at:], at):
        if bottom.run_id != start.run_id:
            continue
        limit = int(record.id) if end == at else bottom.through
        if not 1 <= first <= limit:
            break
        reference = bottom.reference
        if reference is not None and int(reference.id) >= first:
            raise CorruptRecordError(
                run_id=record.run_id,
                record_id=record.id,
                reason=(
                    f"the window starts at record {start.record} of run {start.run_id}, "
                    "before that run's history reference"
                ),
            )
        window = bottom.window
        if window is not None and int(window.id) < first:
            window = None
        return [*links[:end], bottom._replace(first=first, reference=None, window=window)]
    raise CorruptRecordError(
        run_id=record.run_id,
        record_id=record.id,
        reason=(
            f"the window starts at record {start.record} of run {start.run_id}, "
            "outside its transcript chain"
        ),
    )


@dataclass(frozen=True, slots=True)
class TranscriptChain:
    """A run's transcript chain, resolved once [V4]/[V5]: what replay, the transcript
    cache, prompt versions and every view of a conversation read.

    Build one with :func:`load_transcript_chain` (from a store) or
    :func:`resolve_chain` (from the segments a store's ``load_transcript_chain``
    returned). Nothing here is decoded but the references and the governing
    window, each by the check its write passed; damage and cycles are
    :class:`~agentledger.errors.CorruptRecordError`.

    Attributes:
        links: the runs of the chain from the run asked about (depth 0) down to
            the first run without a history reference within its cut (or,
            ``windowed``, the run the governing window starts in). Each
            :class:`ChainLink` says its run, its cut (``through``), its first
            record, its depth, whether reasoning is excluded there, its
            reference (naming the next link) and its newest window.
        segments: for each link (same index), its chain records (message
            arrays, its reference, windows) from ``first`` through ``through``,
            in log order.
        window: the window that governs the run's model input at its cut
            (:class:`ChainWindow`: the record, its decoded payload and the
            index of the link holding it), or None.
        windowed: whether the links end where ``window`` starts (the model
            input); else they reach the conversation's start.

    To read it in conversation order, take each link's message records before
    its reference, then (recursively) the next link's, then its records after
    the reference, dropping reasoning where ``exclude_reasoning`` says so:
    :func:`agentledger.storage.replay.replay_with_origins` does exactly that.
    """

    links: tuple[ChainLink, ...]
    segments: tuple[TranscriptSegment, ...]
    window: ChainWindow | None
    windowed: bool

    @property
    def run_id(self) -> str:
        """The run the chain was read for."""
        return self.links[0].run_id

    @property
    def through(self) -> int:
        """The cut of the run the chain was read for."""
        return self.links[0].through


def resolve_chain(
    segments: Sequence[TranscriptSegment], *, through: int = 0, windowed: bool = False
) -> TranscriptChain:
    """The :class:`TranscriptChain` of segments as a store's ``load_transcript_chain``
    returns them (first the run asked about), walked by :func:`chain_links`' rules.

    ``through`` cuts the first run at that record (0: at its segment's end).
    ``windowed`` ends the links where the governing window starts; the store
    may have ended its segments there already (asked ``windowed``), or not.
    The governing window is decoded either way.

    Raises:
        CorruptRecordError: a run twice, a second reference, a reference the
            segments do not answer, a cycle, a window that does not decode or
            (``windowed``) starts outside the chain.
    """
    if not segments:
        raise CorruptRecordError(run_id="", record_id="", reason="a transcript chain of no run")
    by_run: dict[str, TranscriptSegment] = {}
    index = ChainIndex({}, {})
    for segment in segments:
        if segment.run_id in by_run:
            raise CorruptRecordError(
                run_id=segment.run_id, record_id="", reason="a transcript chain holds it twice"
            )
        by_run[segment.run_id] = segment
        for record in segment.records:
            if record.type not in _LINKING:  # a message array: most records
                continue
            if record.type == payloads.TRANSCRIPT_WINDOW:
                index.windows.setdefault(segment.run_id, []).append(record)
            else:
                if segment.run_id in index.references:
                    raise CorruptRecordError(
                        run_id=segment.run_id,
                        record_id=record.id,
                        reason="a second history reference",
                    )
                index.references[segment.run_id] = record
    top = segments[0]
    newest = {s.run_id: int(s.through) for s in segments}
    if through:
        newest[top.run_id] = through
    links = _walk(top.run_id, newest, index, "which its transcript chain does not hold")
    governing = _governing(links)
    if windowed and governing is not None:
        links = _cut(links, governing)
    kept = []
    for link in links:
        segment = by_run[link.run_id]
        if (link.first, link.through) != (int(segment.first), int(segment.through)):
            segment = TranscriptSegment(
                run_id=link.run_id,
                through=str(link.through),
                records=tuple(
                    r for r in segment.records if link.first <= int(r.id) <= link.through
                ),
                first=str(link.first),
            )
        kept.append(segment)
    return TranscriptChain(tuple(links), tuple(kept), governing, windowed)


async def load_transcript_chain(
    store: Store, run_id: str, *, windowed: bool = False, through: str = ""
) -> TranscriptChain:
    """[V4]/[V5] read a run's transcript chain from ``store`` once, resolved.

    ``windowed``: the chain ends where the window that governs the run's model
    input starts (at ``through``, if given). ``through`` cuts the run's own log
    at that record id ("" for its end).

    Raises:
        ValidationError: ``through`` is not a record id of the run.
        RunNotFoundError: as the store says.
        CorruptRecordError: damage anywhere in the chain, naming its run and record.
    """
    segments = await store.load_transcript_chain(run_id, windowed=windowed and not through)
    cut = 0
    if through:
        newest = int(segments[0].through) if segments else 0
        cut = record_number(through) or 0
        if not 1 <= cut <= newest:
            raise ValidationError(
                field="through",
                expected=f"a record id of run {run_id} (1..{newest})",
                got=through,
            )
    return resolve_chain(segments, through=cut, windowed=windowed)


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
