"""TranscriptCache: what this process already read of each run's transcript, checked.

Every planner turn needs the run's whole transcript, valid [T5]. Reading
the whole log and checking the whole transcript again each turn makes a run
of n turns cost n squared; the cache keeps, per run, the messages read so
far, the checker's state after them and where in the log it stopped, so a
turn reads only the records committed since and checks only what they add.

A run the cache does not hold is read whole, windowed [V5]: from where the
window that governs its model input starts (see
:func:`~agentledger.storage.replay.replay_with_origins`), resolving what
the run's first records refer to (an earlier run's transcript), through
:func:`~agentledger.storage.transcript_chain.load_transcript_chain`. After it, the
transcript grows only by the run's own records, so the cache appends the
messages of each new ``transcript_messages_appended`` (or ``seeded``) record,
in commit order, and applies each new window as replay does (dropping what it
cuts, so the cache stays as long as the model input); any other transcript record type
sends the run back to a whole read. Each message is held with where it is
stored, which is how a history policy's cut is recorded.

Where it stopped: a store hands out a cursor only for a page with more after
it, so the cache keeps the cursor of the last page it read ("" is the log's
start) and how many of that page's records it has applied. The next read
starts there, skips those (checking that the last one is the record it
knows) and goes to the end: it re-reads at most one small page, whatever the
run's length. A log only grows and a page never changes once returned [L9],
so this holds across processes too: on Temporal each worker has its own
cache, and a run whose turns move between workers is read on each from the
record that worker read last.

A new run is held from its start: the records the start wrote (its own
messages, no history reference) are applied as written, with their ids, and the
cache's place is after them; its first planner turn, which writes nothing before
it plans (its phase came with the start), takes that without reading, and the
next turn reads from there.

A run's transcript records are written only by its own activities, one
after another; a whole read is cached only if no transcript record arrived
while it read.

A cache that *follows writes* (``follows_writes``: every activity of its runs runs
in this process, on this cache, as with the in-process engine) also applies what
those activities commit: each write of a run it holds as the log stands (read,
started or followed since) is applied, with the ids the store gave, and the run
stays held as the log stands, so no planner turn reads at all while its log's first
records fill one page (then a turn reads the next page, once). A write that
fails, finds its records already stored, or would cross the page leaves the run
held as it was, and the next turn reads what followed, as above.

The cache is bounded: at most ``max_runs`` runs, the least recently used
dropped first; a run that ends or suspends is dropped by the activity that
ends it (its transcript then stays only in the store).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from agentledger.storage.payloads import (
    PROMPT_RENDERED,
    RUN_STARTED,
    TRANSCRIPT_APPENDED,
    TRANSCRIPT_SEEDED,
    TRANSCRIPT_WINDOW,
)
from agentledger.storage.protocol import Store, VerifiedTranscripts
from agentledger.storage.replay import (
    TRANSCRIPT_RECORD_TYPES,
    MessageOrigin,
    position_of,
    replay_run_log_events,
    replay_with_origins,
    summary_first,
)
from agentledger.storage.transcript_chain import decode_window, load_transcript_chain
from agentledger.storage.types import Record
from agentledger.transcript import Message
from agentledger.transcript.validate import PlannerTranscriptCheck

__all__ = ["DEFAULT_MAX_RUNS", "KnownTranscript", "TranscriptCache"]

DEFAULT_MAX_RUNS = 256
"""Runs a cache holds at most."""

_PAGE = 32
"""Records per page when the cache reads a log: the most a turn reads again."""

_EXTENDS = frozenset({TRANSCRIPT_APPENDED, TRANSCRIPT_SEEDED})
"""Transcript record types whose messages simply follow the transcript so far."""
_READ = TRANSCRIPT_RECORD_TYPES | {TRANSCRIPT_WINDOW}
_SEEDS = _EXTENDS | {RUN_STARTED, PROMPT_RENDERED, "run_phase_changed"}
"""The record types a start may write for the cache to hold it (no history reference:
a run whose history is another run's transcript is read whole, the chain resolved)."""
"""The record types the cache applies (or, for a reference, reads the run whole for)."""


class KnownTranscript:
    """A run's transcript as read for one planner turn: its messages (from the start of
    the window that governs the model input), where each is stored, and their check."""

    __slots__ = ("_check", "messages", "origins")

    def __init__(
        self,
        messages: tuple[Message, ...],
        check: PlannerTranscriptCheck,
        origins: tuple[MessageOrigin, ...] = (),
    ) -> None:
        self.messages = messages
        """Every message of the model input, in order."""
        self.origins = origins
        """Where each message is stored (its run, record and place in the record)."""
        self._check = check

    def validate(self, *, allow_pending: bool = False) -> None:
        """[T5] what ``validate_planner_transcript(self.messages)`` says, without reading them.

        Raises:
            TranscriptError: the transcript ends with tool uses that have no results.
        """
        self._check.finish(allow_pending=allow_pending)

    def validate_next(self, message: Message, *, allow_pending: bool = False) -> None:
        """[T5] what ``validate_planner_transcript([*self.messages, message])`` says.

        Raises:
            TranscriptError: the first rule ``message`` breaks after these messages.
        """
        check = self._check.fork()
        check.add(message)
        check.finish(allow_pending=allow_pending)


@dataclass
class _Entry:
    """One run as the cache knows it."""

    messages: list[Message]
    origins: list[MessageOrigin]
    check: PlannerTranscriptCheck
    """The check after reading ``messages`` (they are valid but for the end, rule 8)."""
    cursor: str
    """Where the last page read began ("" is the log's start)."""
    skip: int
    """How many records of that page are applied."""
    last_id: str
    """The id of the last record applied ("" for none)."""
    seeded: bool = False
    """Held from the run's start and not read since (see :meth:`TranscriptCache.seed`)."""
    current: bool = False
    """(A cache that follows writes) held as the log stands: nothing was written to the
    run since it was read, started or followed but what was applied."""


@dataclass
class _Tail:
    """What a read from an entry's position found: the new records and the new position."""

    records: list[Record]
    cursor: str
    skip: int
    last_id: str


class TranscriptCache:
    """Keeps each run's transcript as far as it was read, so a turn reads what is new.

    A cache serves one store (record ids are positions in that store's logs).

    Args:
        max_runs: runs held at most (least recently used dropped first).
    """

    def __init__(self, max_runs: int = DEFAULT_MAX_RUNS, *, follows_writes: bool = False) -> None:
        self._max_runs = max(1, max_runs)
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.follows_writes = follows_writes
        """Every activity of the runs held runs in this process and tells :meth:`writing`
        and :meth:`wrote` of its writes (turned off, no run is taken as current)."""

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._entries

    def forget(self, run_id: str) -> None:
        """Drop what is held of ``run_id`` (it ended, or it is read whole next time)."""
        self._entries.pop(run_id, None)

    def _forget(self, run_id: str, entry: _Entry) -> None:
        """Drop ``entry`` if it is still the one held for ``run_id``."""
        if self._entries.get(run_id) is entry:
            del self._entries[run_id]

    def seed(self, run_id: str, records: Sequence[Record]) -> None:
        """Hold a run just started whose log begins with ``records`` (as stored, ids set):
        its first planner turn then reads only what was committed after them.

        Held only when they are the run's start, prompt, phases and own messages
        (no history reference, no copy, no window) on the log's first page, and
        check; otherwise the turn reads the run whole. A log that does not begin with
        them is read whole too (the next read checks the last one's id where it should be).
        """
        if not records or len(records) > _PAGE or records[0].run_id != run_id:
            return
        if any(r.type not in _SEEDS for r in records):
            return
        entry = _Entry(
            messages=[],
            origins=[],
            check=PlannerTranscriptCheck(),
            cursor="",
            skip=len(records),
            last_id=records[-1].id,
            seeded=True,
            current=self.follows_writes,
        )
        try:
            for record in records:
                if record.type in _EXTENDS:
                    _append(entry, record)
        except Exception:  # its first turn reads it whole, and says what is wrong
            return
        self._entries[run_id] = entry
        while len(self._entries) > self._max_runs:
            self._entries.popitem(last=False)

    async def transcript(
        self, store: Store, run_id: str, *, first_turn: bool = False
    ) -> KnownTranscript:
        """The run's transcript in the store now, checked but for its end (see
        :meth:`KnownTranscript.validate`).

        ``first_turn``: the caller is the run's first planner turn, which wrote nothing
        before it asks (its phase came with the start). A run held from its start is
        then returned as held, without a read: only the run's own activities write its
        transcript, and none has since the start.

        Raises:
            CorruptRecordError: a record cannot be read or decoded.
            TranscriptError: the transcript breaks a rule [T5] before its end.
        """
        entry = self._entries.get(run_id)
        if entry is not None and (
            (entry.seeded and first_turn) or (entry.current and self.follows_writes)
        ):
            self._entries.move_to_end(run_id)
            return KnownTranscript(tuple(entry.messages), entry.check.fork(), tuple(entry.origins))
        if entry is not None:
            entry.seeded = entry.current = False
            try:
                if await self._extend(store, run_id, entry):
                    if self._entries.get(run_id) is entry:
                        self._entries.move_to_end(run_id)
                        entry.current = self.follows_writes
                    return KnownTranscript(
                        tuple(entry.messages), entry.check.fork(), tuple(entry.origins)
                    )
            except BaseException:
                self._forget(run_id, entry)
                raise
            self._forget(run_id, entry)
        return await self._read_whole(store, run_id)

    def writing(self, run_id: str) -> object:
        """Note that the run's own activity is about to write to its log; pass what this
        returns to :meth:`wrote` once the store has said where the records landed.

        Until then the run is not taken as current (a write that fails may have landed).
        """
        entry = self._entries.get(run_id)
        if entry is None or not entry.current or not self.follows_writes:
            return None
        entry.current = False
        return entry

    def wrote(self, run_id: str, token: object, records: Sequence[Record]) -> None:
        """Apply ``records``, what the write :meth:`writing` announced put on the run's log
        in one transaction, each newly stored, in order, ids set; the run is then current.

        Nothing is applied if the run was not current when the write began, or they would
        not fit on the page the cache reads next (the next turn then reads them); a
        record the cache cannot apply drops the run (it is read whole next time).
        """
        entry = self._entries.get(run_id)
        if entry is None or entry is not token or not records:
            return
        if entry.skip + len(records) > _PAGE:
            return
        try:
            for record in records:
                if record.run_id != run_id:
                    raise ValueError(record.run_id)
                if record.type not in _READ:
                    continue
                if record.type == TRANSCRIPT_WINDOW:
                    if not _apply_window(entry, record):
                        raise ValueError(record.id)
                elif record.type in _EXTENDS:
                    _append(entry, record)
                else:  # a reference: resolved by a whole read only
                    raise ValueError(record.type)
        except Exception:
            self._forget(run_id, entry)
            return
        entry.skip += len(records)
        entry.last_id = records[-1].id
        entry.current = True

    async def _read_whole(self, store: Store, run_id: str) -> KnownTranscript:
        """Read the run whole (opaque), and hold it if nothing changed meanwhile."""
        before = await _tail(store, run_id, "", 0, "")
        chain = await load_transcript_chain(store, run_id, windowed=True)
        verified = isinstance(store, VerifiedTranscripts) and store.transcripts_verified
        pairs = replay_with_origins(chain, verified=verified)
        messages = [m for m, _ in pairs]
        origins = [o for _, o in pairs]
        check = PlannerTranscriptCheck()
        check.extend(messages)
        after = before and await _tail(store, run_id, before.cursor, before.skip, before.last_id)
        if after is None or any(r.type in _READ for r in after.records):
            # it moved while read: not held
            return KnownTranscript(tuple(messages), check, tuple(origins))
        self._entries[run_id] = _Entry(
            messages=messages,
            origins=origins,
            check=check,
            cursor=after.cursor,
            skip=after.skip,
            last_id=after.last_id,
            current=self.follows_writes,
        )
        while len(self._entries) > self._max_runs:
            self._entries.popitem(last=False)
        return KnownTranscript(tuple(messages), check.fork(), tuple(origins))

    async def _extend(self, store: Store, run_id: str, entry: _Entry) -> bool:
        """Apply the records committed since ``entry`` was read; False if it must be read
        whole instead (a record type it cannot append, or a log that is not as it was)."""
        while True:
            at = (entry.cursor, entry.skip, entry.last_id)
            tail = await _tail(store, run_id, *at)
            if tail is None:
                return False
            if (entry.cursor, entry.skip, entry.last_id) != at:
                continue  # another read of this run moved it meanwhile: read from there
            new = [r for r in tail.records if r.type in _READ]
            if any(r.type not in _EXTENDS and r.type != TRANSCRIPT_WINDOW for r in new):
                return False
            for record in new:
                if record.type == TRANSCRIPT_WINDOW:
                    if not _apply_window(entry, record):
                        return False
                    continue
                _append(entry, record)  # an error drops the entry (the caller)
            entry.cursor, entry.skip, entry.last_id = tail.cursor, tail.skip, tail.last_id
            return True


def _append(entry: _Entry, record: Record) -> None:
    """Apply one of the run's own message records (``_EXTENDS``) to ``entry``, checked.

    Raises:
        CorruptRecordError: its payload is not a message array.
        TranscriptError: its messages break a rule [T5] after the entry's.
    """
    messages = replay_run_log_events((record,))
    entry.check.extend(messages)
    entry.messages.extend(messages)
    entry.origins.extend(
        MessageOrigin(record.run_id, record.id, record.type, 0, i) for i in range(len(messages))
    )


def _apply_window(entry: _Entry, record: Record) -> bool:
    """Cut ``entry`` where the window ``record`` starts, as replay applies it (the same
    decoding and the same summary check); False if it does not hold that message after
    its first one (then the run is read whole).

    Raises:
        CorruptRecordError: the window does not decode, or puts its summary before
            a message that is not the user's (replay refuses it too).
    """
    window = decode_window(record)
    at = position_of(entry.origins, window.start)
    if not at:
        return False
    first = summary_first(entry.messages[at], record, window)
    del entry.messages[:at], entry.origins[:at]
    entry.messages[0] = first
    return True


async def _tail(store: Store, run_id: str, cursor: str, skip: int, last_id: str) -> _Tail | None:
    """The run's records after ``skip`` records of the page at ``cursor``, to the end.

    None when the page no longer starts as it did (its ``skip``-th record is
    not ``last_id``): the log is not the one that was read.
    """
    records: list[Record] = []
    while True:
        page = await store.list_run_records(run_id, cursor=cursor, limit=_PAGE)
        got = page.records
        if skip and (len(got) < skip or got[skip - 1].id != last_id):
            return None
        records.extend(got[skip:])
        if got:
            last_id = got[-1].id
        if not page.next_cursor:
            return _Tail(records=records, cursor=cursor, skip=len(got), last_id=last_id)
        cursor, skip = page.next_cursor, 0
