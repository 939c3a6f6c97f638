"""A run at a glance: what the user asked, how long it took, its turns, tokens and history.

:class:`RunDigest` folds a run's records in commit order, once each (a record
it has seen is skipped, so a page can feed it the same tail twice), and
:meth:`RunDigest.view` gives the frozen :class:`RunView` a page or the CLI
shows. A live page keeps its digest and feeds it only the records written
since (:func:`read_run_view`): ``load_run`` and the tail, never the whole log
again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

from agentledger.errors import CorruptRecordError, TranscriptError
from agentledger.runtime.records import messages_key
from agentledger.storage.cursor import encode_cursor
from agentledger.storage.payloads import (
    RUN_COMPLETED,
    RUN_STARTED,
    RUN_SUSPENDED,
    TRANSCRIPT_APPENDED,
    TRANSCRIPT_REFERENCED,
    RunStarted,
)
from agentledger.storage.protocol import Store
from agentledger.storage.run_failure import RunFailure
from agentledger.storage.transcript_chain import decode_reference
from agentledger.storage.types import Record, RunMeta, RunStatus
from agentledger.storage.validation import MAX_PAGE_LIMIT, decode_stored_payload
from agentledger.transcript import TextPart, decode_messages
from agentledger.views.timeline import duration_text, turn_of
from agentledger.views.usage import Tokens, Usage

__all__ = ["HistorySource", "RunDigest", "RunView", "read_run_start", "read_run_view", "summarize"]

_FIRST_MESSAGE = frozenset(
    messages_key(step) for step in ("input", "resume:answer", "resume:tool_results")
)


@dataclass(frozen=True)
class HistorySource:
    """The run whose transcript a run's history is, by reference: ``kind`` is
    ``next_turn`` (after the whole of it), ``continuation`` (a suspended run
    resumed) or ``fork`` (a branch leaving it at record ``through``)."""

    kind: str
    run_id: str
    through: str


@dataclass(frozen=True)
class RunView:
    """A run at a glance (its figures count ``records`` records of its log)."""

    run: RunMeta
    asked: str = ""
    """The text of the user's message that started it ("" if none)."""
    turns: int = 0
    ended: datetime | None = None
    tokens: Tokens = field(default_factory=Tokens)
    usage: Usage = field(default_factory=Usage)
    """Its tokens by model and by turn."""
    predecessor: str = ""
    """The suspended run it continues ("" if none)."""
    history: HistorySource | None = None
    """Where its history comes from, when by reference."""
    failure: RunFailure | None = None
    """Why the run failed (see :func:`~agentledger.storage.run_failure.load_run_failure`)."""
    message: str = ""
    """The position and fate of the message it was started for ("" if none)."""
    complete: bool = True
    """Whether the figures count every record of its log."""

    def seconds(self, now: datetime) -> float:
        """How long the run took (so far, while it runs)."""
        end = self.ended or (now if self.run.status is RunStatus.RUNNING else self.run.updated_at)
        return max((end - self.run.started_at).total_seconds(), 0.0)

    def duration(self, now: datetime) -> str:
        """:meth:`seconds` as text."""
        return duration_text(self.seconds(now))

    def having(self, *, failure: RunFailure | None = None, message: str = "") -> RunView:
        """This view with why the run failed and the fate of its message (each if given)."""
        return replace(self, failure=failure or self.failure, message=message or self.message)


def _said(record: Record) -> str:
    """The text of the last message a transcript record holds ("" if none).

    Raises:
        CorruptRecordError: the record does not hold messages (the store checks them
            when they are written, so this is damage, never skipped).
    """
    try:
        messages = decode_messages(record.payload)
    except TranscriptError as e:
        raise CorruptRecordError(
            run_id=record.run_id, record_id=record.id, reason=f"{record.type}: {e}"
        ) from e
    for message in reversed(messages):
        text = " ".join(p.text for p in message.parts if isinstance(p, TextPart)).strip()
        if text:
            return text
    return ""


class RunDigest:
    """A run's figures, folded from its records in commit order, each record once."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.last = 0
        """The number of the last record folded (record ids count 1, 2, ... per run)."""
        self.asked = ""
        self.turns: set[int] = set()
        self.ended: datetime | None = None
        self.usage = Usage()
        self.predecessor = ""
        self.history: HistorySource | None = None
        self.complete = True

    def add(self, record: Record) -> None:
        """Fold one record of this run (one already folded is skipped).

        Raises:
            CorruptRecordError: a payload the figures read is damaged.
        """
        if record.run_id != self.run_id:
            return
        number = int(record.id) if record.id.isdigit() else 0
        if number and number <= self.last:
            return
        self.last = max(self.last, number)
        if record.type == TRANSCRIPT_APPENDED and not self.asked:
            if record.event_key in _FIRST_MESSAGE:
                self.asked = _said(record)
        elif record.type == RUN_STARTED:
            self.predecessor = decode_stored_payload(record, RunStarted).predecessor_run_id
        elif record.type == TRANSCRIPT_REFERENCED and self.history is None:
            ref = decode_reference(record)
            self.history = HistorySource(ref.kind, ref.run_id, ref.through)
        elif record.type in (RUN_COMPLETED, RUN_SUSPENDED):
            self.ended = record.timestamp
        elif turn := turn_of(record):
            self.turns.add(turn.turn)
        self.usage.add(record)

    def extend(self, records: Iterable[Record]) -> RunDigest:
        """Fold ``records`` (others' are skipped); this digest."""
        for record in records:
            self.add(record)
        return self

    def view(self, run: RunMeta) -> RunView:
        """What the records folded so far say about ``run``."""
        return RunView(
            run=run,
            asked=self.asked,
            turns=len(self.turns),
            ended=self.ended,
            tokens=self.usage.by_run.get(run.run_id, Tokens()),
            usage=self.usage,
            predecessor=self.predecessor,
            history=self.history,
            complete=self.complete,
        )


def summarize(runs: Iterable[RunMeta], records: Iterable[Record]) -> dict[str, RunView]:
    """A view of each of ``runs`` from ``records`` (their logs, interleaved or not)."""
    metas = {run.run_id: run for run in runs}
    digests = {run_id: RunDigest(run_id) for run_id in metas}
    for record in records:
        digest = digests.get(record.run_id)
        if digest is not None:
            digest.add(record)
    return {run_id: digests[run_id].view(meta) for run_id, meta in metas.items()}


_START_RECORDS = 4
"""The records a run's start writes at most before its first turn (start, reference or
seed, input, phase): where its predecessor and its history reference are."""


async def read_run_start(store: Store, run_id: str) -> RunDigest:
    """A digest of the records the run's start wrote: enough for its predecessor
    (:attr:`RunDigest.predecessor`) and its history reference (:attr:`RunDigest.history`).

    Raises:
        CorruptRecordError: its ``run_started`` record or reference is damaged.
    """
    page = await store.list_run_records(run_id, limit=_START_RECORDS)
    digest = RunDigest(run_id).extend(page.records)
    digest.complete = not page.next_cursor
    return digest


async def read_run_view(
    store: Store, run_id: str, digest: RunDigest | None = None, *, most: int = 50_000
) -> tuple[RunView, RunDigest]:
    """The run's view, reading ``load_run`` and the records ``digest`` has not folded
    (the whole log, up to ``most`` records, for a new digest); the digest to keep.

    Reads nothing more when the run's last record is the digest's last.
    """
    run = await store.load_run(run_id)
    digest = digest or RunDigest(run_id)
    last = int(run.last_record_id) if run.last_record_id.isdigit() else 0
    read = 0
    while digest.last < last and read < most:
        cursor = encode_cursor("run", run_id, digest.last) if digest.last else ""
        page = await store.list_run_records(run_id, cursor=cursor, limit=MAX_PAGE_LIMIT)
        if not page.records:
            break
        digest.extend(page.records)
        read += len(page.records)
    digest.complete = digest.last >= last
    return digest.view(run), digest
