"""A session's runs as a page or a command shows them: the run tree, each run at a glance
(why a failed one failed, the fate of the message each was started for), and the messages
still waiting for their turn; a session at a glance for the list of sessions."""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from agentledger.errors import CorruptRecordError
from agentledger.storage.accounting import UsageTotals
from agentledger.storage.protocol import AdminStore, Store
from agentledger.storage.run_failure import load_run_failures
from agentledger.storage.types import Record, RunMeta, RunStatus, Session
from agentledger.views.messages import WaitingMessage, message_fates
from agentledger.views.runs import RunDigest, RunView, summarize
from agentledger.views.tree import RunNode, run_tree

__all__ = [
    "SessionGlance",
    "SessionRow",
    "SessionRuns",
    "session_glance",
    "session_rows",
    "session_runs",
]

_START = 12
"""Records of a session's first run read for its first message (its start writes them)."""


@dataclass(frozen=True)
class SessionRuns:
    """A session's run tree, a view of each run by id, and the messages still waiting."""

    tree: list[RunNode]
    summaries: dict[str, RunView]
    waiting: list[WaitingMessage]


async def session_runs(
    store: Store, session_id: str, runs: Sequence[RunMeta], records: Sequence[Record]
) -> SessionRuns:
    """The runs of ``session_id`` (``runs``, its log ``records``) as :class:`SessionRuns`.

    Raises:
        CorruptRecordError: a record the figures read, or a failed run's ending, is damaged.
    """
    summaries = summarize(runs, records)
    for run_id, failure in (await load_run_failures(store, list(runs))).items():
        summaries[run_id] = summaries[run_id].having(failure=failure)
    fates, waiting = await message_fates(store, session_id)
    for run_id, fate in fates.items():
        if run_id in summaries:
            summaries[run_id] = summaries[run_id].having(message=fate)
    return SessionRuns(run_tree(runs), summaries, waiting)


@dataclass(frozen=True)
class SessionGlance:
    """A session in the list of sessions: what its first message said, who answered, and
    when anything last happened in it."""

    first: str
    """The text of the message that started its first turn ("" if none, or unreadable)."""
    agents: tuple[str, ...]
    """The agents of its top-level runs, in order of first use."""
    last_activity: datetime
    """When a run of it last wrote (its creation, without runs; its end, once ended)."""


async def session_glance(
    store: Store,
    session: Session,
    runs: Sequence[RunMeta],
    firsts: MutableMapping[str, str] | None = None,
) -> SessionGlance:
    """``session`` at a glance from its ``runs``: the start of its first turn is read (a few
    records), nothing more. A damaged start leaves the preview empty (its page names it).

    ``firsts`` keeps the first message found by the first run's id: a run's first records
    never change, so a message found once is not read again.
    """
    tops = sorted((r for r in runs if not r.parent_run_id), key=lambda r: (r.started_at, r.run_id))
    first = ""
    if tops:
        known = firsts.get(tops[0].run_id, "") if firsts is not None else ""
        try:
            if known:
                first = known
            else:
                start = await store.list_run_records(tops[0].run_id, limit=_START)
                first = RunDigest(tops[0].run_id).extend(start.records).asked
        except CorruptRecordError:
            first = ""
        if first and firsts is not None:
            firsts[tops[0].run_id] = first
    agents = tuple(dict.fromkeys(r.agent_id for r in tops))
    times = [session.created_at, *(r.updated_at for r in runs)]
    if session.ended_at is not None:
        times.append(session.ended_at)
    return SessionGlance(first, agents, max(times))


@dataclass(frozen=True)
class SessionRow:
    """A session's line in the list of sessions: at a glance, its usage counters, and
    whether a run of it is running."""

    session: Session
    glance: SessionGlance
    usage: UsageTotals
    running: bool


async def session_rows(
    store: AdminStore,
    sessions: Sequence[Session],
    firsts: MutableMapping[str, str] | None = None,
) -> list[SessionRow]:
    """The rows of ``sessions`` in the list of sessions, in as few store reads as it allows.

    Per session: one read of its usage counters (runs, bytes, records, tokens: never a
    scan); only when the counters count runs, one read of its runs (agents, whether one is
    running, last activity); and, unless ``firsts`` already holds it, a few records of its
    first run for its first message. A session without runs costs one read.

    Raises:
        CorruptRecordError: a session's stored counters or runs are damaged.
    """
    rows = []
    for session in sessions:
        usage = await store.load_session_usage(session.id)
        runs = await store.list_runs_by_session(session.id) if usage.runs else []
        glance = await session_glance(store, session, runs, firsts)
        running = any(r.status is RunStatus.RUNNING for r in runs)
        rows.append(SessionRow(session, glance, usage, running))
    return rows
