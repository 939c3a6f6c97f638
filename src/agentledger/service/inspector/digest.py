"""What a page says about runs at a glance, read from their logs in one pass.

A run row shows the user's first message, the run's duration, its planner
turns and its tokens; a session shows how many runs it has and whether one
is running. Logs are read in the store's largest pages, up to
:data:`MAX_RECORDS` records per request, so a huge log costs a bounded read
(and its page says the summary is partial).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from agentledger.errors import TranscriptError
from agentledger.runtime.records import messages_key
from agentledger.service.inspector.positions import end_position, position_after
from agentledger.service.inspector.timeline import duration_text, turn_of
from agentledger.service.inspector.usage import Tokens, Usage
from agentledger.storage.payloads import RUN_COMPLETED, RUN_SUSPENDED, TRANSCRIPT_APPENDED
from agentledger.storage.run_failure import RunFailure
from agentledger.storage.types import Page, Record, RunMeta, RunStatus
from agentledger.storage.validation import MAX_PAGE_LIMIT
from agentledger.transcript import TextPart, decode_messages

__all__ = ["MAX_RECORDS", "Log", "RunSummary", "read_log", "summarize"]

MAX_RECORDS = 50_000
"""Records one inspector request reads at most to summarize a log."""

_FIRST_MESSAGE = frozenset(
    messages_key(step) for step in ("input", "resume:answer", "resume:tool_results")
)

ListPage = Callable[..., Awaitable[Page]]


@dataclass
class Log:
    """A log's records (up to :data:`MAX_RECORDS`) and whether that is all of it.

    ``last_cursor`` is the page cursor its last page was read from and
    ``last_count`` how many records that page held: where the read ended.
    """

    records: list[Record]
    complete: bool
    last_cursor: str = ""
    last_count: int = 0

    async def end(self, list_page: ListPage, scope_id: str) -> str:
        """The follow position just after the records read (where live follow starts)."""
        if not self.complete:
            return await end_position(list_page, scope_id)
        return await position_after(list_page, scope_id, self.last_cursor, self.last_count)


async def read_log(list_page: ListPage, scope_id: str, *, most: int = MAX_RECORDS) -> Log:
    """The records of a run's or session's log, in commit order, up to ``most``."""
    records: list[Record] = []
    cursor = ""
    while True:
        page = await list_page(scope_id, cursor=cursor, limit=MAX_PAGE_LIMIT)
        records.extend(page.records)
        if not page.next_cursor:
            return Log(records, complete=True, last_cursor=cursor, last_count=len(page.records))
        cursor = page.next_cursor
        if len(records) >= most:
            return Log(records, complete=False)


def _said(record: Record) -> str:
    """The text of the last message a transcript record holds ("" if none)."""
    try:
        messages = decode_messages(record.payload)
    except TranscriptError:
        return ""
    for message in reversed(messages):
        text = " ".join(p.text for p in message.parts if isinstance(p, TextPart)).strip()
        if text:
            return text
    return ""


@dataclass
class RunSummary:
    """A run at a glance: what the user asked, how long it took, turns and tokens."""

    run: RunMeta
    asked: str = ""
    turns: int = 0
    ended: datetime | None = None
    tokens: Tokens = field(default_factory=Tokens)
    failure: RunFailure | None = None
    """Why the run failed (see :func:`~agentledger.storage.run_failure.load_run_failure`)."""
    message: str = ""
    """The position and fate of the message it was started for ("" if none)."""

    def seconds(self, now: datetime) -> float:
        """How long the run took (so far, while it runs)."""
        end = self.ended or (now if self.run.status is RunStatus.RUNNING else self.run.updated_at)
        return max((end - self.run.started_at).total_seconds(), 0.0)

    def duration(self, now: datetime) -> str:
        """:meth:`seconds` as text."""
        return duration_text(self.seconds(now))


def summarize(runs: Iterable[RunMeta], records: Iterable[Record]) -> dict[str, RunSummary]:
    """A summary of each of ``runs`` from ``records`` (their logs, interleaved or not)."""
    out = {run.run_id: RunSummary(run) for run in runs}
    usage = Usage()
    turns: dict[str, set[int]] = {}
    for record in records:
        summary = out.get(record.run_id)
        if summary is None:
            continue
        if record.type == TRANSCRIPT_APPENDED and not summary.asked:
            if record.event_key in _FIRST_MESSAGE:
                summary.asked = _said(record)
        elif turn := turn_of(record):
            turns.setdefault(record.run_id, set()).add(turn.turn)
        elif record.type in (RUN_COMPLETED, RUN_SUSPENDED):
            summary.ended = record.timestamp
        usage.add(record)
    for run_id, summary in out.items():
        summary.turns = len(turns.get(run_id, ()))
        summary.tokens = usage.by_run.get(run_id, Tokens())
    return out
