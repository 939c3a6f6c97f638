"""MemoryStore: the in-process reference backend, for tests and examples.

Every operation runs its decision and its writes under one lock, with no
await in between, so it is atomic for asyncio tasks and threads alike.
Nothing survives the process.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from agentledger.errors import StoreClosedError
from agentledger.storage import accounting, derivation, lifecycle, payloads, search, session_pages
from agentledger.storage import operations as ops
from agentledger.storage import requests as req
from agentledger.storage.cursor import decode_cursor, encode_cursor
from agentledger.storage.listing import session_page, session_query
from agentledger.storage.operations import AdminOperations, Operation
from agentledger.storage.pages import RunHead
from agentledger.storage.state import Plan, RunRow, SessionRow, StateReader
from agentledger.storage.transcript_chain import CHAIN_TYPES, ChainIndex, chain_links
from agentledger.storage.types import (
    Page,
    PurgeReceipt,
    Record,
    RunMeta,
    RunStatus,
    SessionMessage,
    SessionPage,
    SessionStatus,
    TranscriptSegment,
)
from agentledger.storage.validation import (
    DEFAULT_MAX_CHECKPOINT_BYTES,
    DEFAULT_MAX_PAYLOAD_BYTES,
    SizeLimits,
    check_limit,
    check_statuses,
    require_id,
)

if TYPE_CHECKING:
    from agentledger.storage.encryption import Encryption

__all__ = ["MemoryStore"]

R = TypeVar("R")
Req = TypeVar("Req")
Resp = TypeVar("Resp")


class _State(StateReader):
    """The dictionaries behind a MemoryStore; reads for the shared decisions."""

    def __init__(self) -> None:
        self.sessions: dict[str, SessionRow] = {}
        self.purged_sessions: dict[str, PurgeReceipt] = {}  # tombstones [D7]
        self.runs: dict[str, RunRow] = {}
        self.purged_runs: dict[str, str] = {}
        self.logs: dict[str, list[Record]] = {}  # run id -> records, id = index + 1
        self.keys: dict[tuple[str, str], Record] = {}
        self.session_logs: dict[str, list[Record]] = {}  # commit order across runs
        self.session_runs: dict[str, list[str]] = {}  # start order
        self.tool_results: dict[str, dict[str, bytes]] = {}  # run id -> call key -> data
        self.messages: dict[str, SessionMessage] = {}  # run id -> message
        self.session_messages_: dict[str, list[str]] = {}  # session id -> run ids, in order
        self.run_usage: dict[str, accounting.UsageTotals] = {}  # [G3] counters, kept as written
        self.session_usage: dict[str, accounting.UsageTotals] = {}
        self.found: dict[int, search.FoundEntry] = {}  # search index entries by id [G1]
        self.session_found: dict[str, list[int]] = {}  # session id -> its entries' ids
        self.last_found = 0  # the newest entry's id: ids grow with the commit order

    def session(self, session_id: str) -> SessionRow | None:
        return self.sessions.get(session_id)

    def session_purged(self, session_id: str) -> bool:
        return session_id in self.purged_sessions

    def run(self, run_id: str) -> RunRow | None:
        return self.runs.get(run_id)

    def purge_receipt(self, session_id: str) -> PurgeReceipt:
        return self.purged_sessions[session_id]

    def session_contents(self, session_id: str) -> tuple[list[RunRow], list[Record]]:
        runs = [self.runs[run_id] for run_id in self.session_runs.get(session_id, ())]
        return runs, list(self.session_logs.get(session_id, ()))

    def purged_run_session(self, run_id: str) -> str | None:
        return self.purged_runs.get(run_id)

    def record(self, run_id: str, event_key: str) -> Record | None:
        return self.keys.get((run_id, event_key))

    def running_run_ids(self, session_id: str) -> list[str]:
        return [
            run_id
            for run_id in self.session_runs.get(session_id, ())
            if self.runs[run_id].status is RunStatus.RUNNING
        ]

    def tool_result(self, run: RunRow, call_key: str) -> bytes | None:
        return self.tool_results.get(run.run_id, {}).get(call_key)

    def session_message(self, run_id: str) -> SessionMessage | None:
        return self.messages.get(run_id)

    def pending_messages(self, session_id: str) -> list[SessionMessage]:
        found = (self.messages[r] for r in self.session_messages_.get(session_id, ()))
        return [m for m in found if not m.started]

    def latest_message(self, session_id: str) -> SessionMessage | None:
        ids = self.session_messages_.get(session_id)
        return self.messages[ids[-1]] if ids else None

    def session_messages(self, session_id: str) -> list[SessionMessage]:
        return [self.messages[r] for r in self.session_messages_.get(session_id, ())]

    def derived_copies(self, session_id: str) -> list[derivation.DerivedCopy]:
        found = []
        for holder in sorted(self.session_logs):
            for record in self.session_logs[holder]:
                if record.type == derivation.HISTORY_COPIED:
                    copy = derivation.derived_copy(record)
                    if copy.source.session_id == session_id:
                        found.append(copy)
        holders = dict.fromkeys(c.session_id for c in found)
        windows = (r for h in holders for r in self.session_logs[h])
        return derivation.summaries_of(found, windows)

    def damaged_records(self, run_id: str) -> list[Record]:
        return []  # nothing outside this process can reach the dictionaries

    def apply(self, plan: Plan[R]) -> None:
        new_runs = [(r.run_id, r.session_id) for r in plan.runs if r.run_id not in self.runs]
        self.count(accounting.usage_change(plan, new_runs))
        if plan.session is not None:
            self.sessions[plan.session.id] = plan.session
        for row in plan.runs:
            if row.run_id not in self.runs:
                self.logs[row.run_id] = []
                if row.session_id:
                    self.session_runs.setdefault(row.session_id, []).append(row.run_id)
            self.runs[row.run_id] = row
        for record in plan.records:
            self.logs[record.run_id].append(record)
            self.keys[(record.run_id, record.event_key)] = record
            if record.session_id:
                self.session_logs.setdefault(record.session_id, []).append(record)
                self._index(record)
        for result in plan.tool_results:
            self.tool_results.setdefault(result.run_id, {})[result.call_key] = result.data
        for run_id in plan.ended_runs:
            self.tool_results.pop(run_id, None)
        for message in plan.messages:
            if message.run_id not in self.messages:
                self.session_messages_.setdefault(message.session_id, []).append(message.run_id)
            self.messages[message.run_id] = message
        if plan.purge_session:
            assert plan.purge_receipt is not None
            search.count_purged(plan, len(self.session_found.get(plan.purge_session, ())))
            self._purge(plan.purge_session, plan.purge_receipt)
        for receipt in plan.cascade:  # [G2] sessions holding copies, purged with it
            self._purge(receipt.session_id, receipt)

    def count(self, change: accounting.UsageChange) -> None:
        """[G3] add a write's usage to the counters (in the write's own step)."""
        for run_id, (_, usage) in change.runs.items():
            self.run_usage[run_id] = accounting.add(self.run_usage.get(run_id, _NONE), usage)
        for session_id, usage in change.sessions.items():
            before = self.session_usage.get(session_id, _NONE)
            self.session_usage[session_id] = accounting.add(before, usage)

    def _index(self, record: Record) -> None:
        ids = self.session_found.setdefault(record.session_id, [])
        for entry in search.index_entries(record):
            self.last_found += 1
            found = search.FoundEntry(
                self.last_found,
                record.session_id,
                record.run_id,
                int(record.id),
                entry.message_index,
                entry.role,
                record.timestamp,
                entry.body,
            )
            self.found[found.id] = found
            ids.append(found.id)

    def _purge(self, session_id: str, receipt: PurgeReceipt) -> None:
        self.session_usage.pop(session_id, None)
        for run_id in self.session_runs.pop(session_id, []):
            self.run_usage.pop(run_id, None)
            del self.runs[run_id]
            self.tool_results.pop(run_id, None)
            for record in self.logs.pop(run_id):
                del self.keys[(run_id, record.event_key)]
            self.purged_runs[run_id] = session_id
        self.session_logs.pop(session_id, None)
        for entry_id in self.session_found.pop(session_id, []):
            del self.found[entry_id]
        for run_id in self.session_messages_.pop(session_id, []):
            del self.messages[run_id]
            self.purged_runs.setdefault(run_id, session_id)
        del self.sessions[session_id]
        self.purged_sessions[session_id] = receipt


_NONE = accounting.UsageTotals()


def _page(records: list[Record], scope: str, scope_id: str, cursor: str, limit: int) -> Page:
    size = check_limit(limit)
    start = decode_cursor(cursor, scope, scope_id, len(records))
    chunk = records[start : start + size]
    end = start + len(chunk)
    next_cursor = encode_cursor(scope, scope_id, end) if end < len(records) else ""
    return Page(records=tuple(chunk), next_cursor=next_cursor)


class MemoryStore(AdminOperations):
    """A complete ``Store`` and ``SessionAdmin`` held in memory.

    Safe under concurrent asyncio tasks and threads; every rule of the
    contract holds, which makes it the reference the conformance suite is
    checked against.
    """

    def __init__(
        self,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        max_checkpoint_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES,
    ) -> None:
        """An empty store; the caps bound each write's payloads and checkpoint (bytes)."""
        self.limits = SizeLimits(
            max_payload_bytes=max_payload_bytes, max_checkpoint_bytes=max_checkpoint_bytes
        )
        """The payload and checkpoint caps this store enforces on writes."""
        self.encryption: Encryption | None = None
        """Always None: nothing is kept at rest to seal."""
        self._lock = threading.Lock()
        self._state = _State()
        self._closed = False

    @classmethod
    async def open(
        cls,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        max_checkpoint_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES,
    ) -> MemoryStore:
        """An empty store, opened as every backend is (``MemoryStore()`` is the same):
        no location and nothing at rest, so only the caps of the other backends' ``open``."""
        return cls(max_payload_bytes=max_payload_bytes, max_checkpoint_bytes=max_checkpoint_bytes)

    async def close(self) -> None:
        """Refuse every later call (``StoreClosedError``), as every backend does; idempotent."""
        self._closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def handle(self) -> MemoryStore:
        """Another handle on this store's data, closed on its own (as a second open of a
        database file would be): what the conformance suite's ``store_factory`` returns."""
        other = copy.copy(self)  # the same lock and state, its own closed flag
        other._closed = False
        return other

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(backend="memory")

    async def perform(self, op: Operation[Req, Resp], request: Req, /) -> Resp:
        """Run ``op`` under the lock: a write's plan decided and applied with no await between."""
        self._check_open()
        plan, read = op.plan, op.read
        with self._lock:
            if plan is not None:
                planned = plan(self._state, request, self.limits)
                self._state.apply(planned)
                return planned.result
            if read is not None:
                return read(self._state, request)
            return cast(Resp, _READS[op](self._state, request))


# Reads a StateReader cannot answer: one function per operation, over the dictionaries.


def _run_page(s: _State, q: req.RunPageQuery) -> Page:
    lifecycle.require_run(s, q.run_id)
    return _page(s.logs[q.run_id], "run", q.run_id, q.cursor, q.limit)


def _transcript_chain(s: _State, q: req.ChainQuery) -> tuple[TranscriptSegment, ...]:
    run_id = q.run_id
    run = lifecycle.require_run(s, run_id)
    ids = s.session_runs.get(run.session_id, []) if run.session_id else [run_id]
    heads = {}
    index = ChainIndex({}, {})
    for rid in ids:
        row = s.runs[rid]
        heads[rid] = RunHead(row.agent_id, row.session_id, row.last_seq, row.status)
        for record in s.logs[rid]:
            if record.type == payloads.TRANSCRIPT_REFERENCED:
                index.references[rid] = record
            elif record.type == payloads.TRANSCRIPT_WINDOW:
                index.windows.setdefault(rid, []).append(record)
    return tuple(
        TranscriptSegment(
            run_id=link.run_id,
            through=str(link.through),
            records=tuple(
                r
                for r in s.logs[link.run_id][link.first - 1 : link.through]
                if r.type in CHAIN_TYPES
            ),
            first=str(link.first),
        )
        for link in chain_links(run_id, heads, index, windowed=q.windowed)
    )


def _session_page(s: _State, q: req.SessionPageQuery) -> Page:
    lifecycle.require_session(s, q.session_id)
    log = s.session_logs.get(q.session_id, [])  # positions 1..len(log); never damaged
    size = check_limit(q.limit)
    start = session_pages.session_start(q.session_id, q.cursor, len(log))
    records = tuple(log[start : start + size])
    end = start + len(records)
    next_cursor = session_pages.next_cursor(q.session_id, end, len(log))
    return Page(records=records, next_cursor=next_cursor)


def _session_runs(s: _State, q: req.RunsBySessionQuery) -> list[RunMeta]:
    wanted = check_statuses(q.statuses, RunStatus)
    lifecycle.require_session(s, q.session_id)
    rows = (s.runs[run_id] for run_id in s.session_runs.get(q.session_id, ()))
    return [row.meta() for row in rows if not wanted or row.status in wanted]


def _sessions(s: _State, q: req.SessionsQuery) -> SessionPage:
    statuses = cast(Iterable[SessionStatus], q.statuses)
    query = session_query(statuses, {} if q.labels is None else q.labels, q.cursor, q.limit)
    found = [row.public() for row in s.sessions.values()]
    found = [session for session in found if query.matches(session)]
    found.sort(key=lambda session: (session.created_at, session.id), reverse=True)
    return session_page(query, found[: query.fetch])


def _session_usage(s: _State, q: req.SessionRef) -> accounting.UsageTotals:
    lifecycle.require_session(s, q.session_id)
    return s.session_usage.get(q.session_id, _NONE)


def _run_usage(s: _State, q: req.RunRef) -> accounting.UsageTotals:
    lifecycle.require_run(s, q.run_id)
    return s.run_usage.get(q.run_id, _NONE)


def _derived_copies(s: _State, q: req.SessionRef) -> list[derivation.DerivedCopy]:
    require_id("session_id", q.session_id)
    return s.derived_copies(q.session_id)


def _usage_by_label(s: _State, q: req.UsageQuery) -> list[accounting.LabelUsage]:
    wanted = accounting.check_usage_query(q.key, q.labels)
    groups: dict[str, tuple[int, accounting.UsageTotals]] = {}
    for session_id, row in s.sessions.items():
        if any(row.labels.get(k) != v for k, v in wanted.items()):
            continue
        if q.key and q.key not in row.labels:
            continue
        value = row.labels[q.key] if q.key else ""
        count, total = groups.get(value, (0, _NONE))
        usage = s.session_usage.get(session_id, _NONE)
        groups[value] = (count + 1, accounting.add(total, usage))
    return [
        accounting.LabelUsage(key=q.key, value=value, sessions=count, usage=usage)
        for value, (count, usage) in sorted(groups.items())
    ]


def _search(s: _State, q: req.SearchRequest) -> search.SearchPage:
    query = search.search_query(q.text, q.labels, q.session_id, q.cursor, q.limit)
    if query.session_id:
        lifecycle.require_session(s, query.session_id)
    wanted: list[search.FoundEntry] = []
    for entry_id in sorted(s.found, reverse=True):
        if query.before is not None and entry_id >= query.before:
            continue
        entry = s.found[entry_id]
        session = s.sessions[entry.session_id]
        if query.in_scope(session.id, session.labels) and search.matches(query.terms, entry.body):
            wanted.append(entry)
            if len(wanted) == query.fetch:
                break
    return search.search_page(query, wanted, left_out=0, complete=True)


_READS: dict[Operation[Any, Any], Callable[[_State, Any], object]] = {
    ops.LIST_RUN_RECORDS: _run_page,
    ops.LOAD_TRANSCRIPT_CHAIN: _transcript_chain,
    ops.LIST_SESSION_RUN_RECORDS: _session_page,
    ops.LIST_RUNS_BY_SESSION: _session_runs,
    ops.LIST_SESSIONS: _sessions,
    ops.LOAD_SESSION_USAGE: _session_usage,
    ops.LOAD_RUN_USAGE: _run_usage,
    ops.USAGE_BY_LABEL: _usage_by_label,
    ops.LIST_DERIVED_COPIES: _derived_copies,
    ops.SEARCH: _search,
}
