"""A small world for conformance tests: ids, a clock, builders and store dumps."""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from agentledger.errors import AgentledgerError
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.protocol import AdminStore
from agentledger.storage.types import (
    Checkpoint,
    Record,
    RunStart,
    RunStatus,
    Session,
    SessionStatus,
    StartResult,
)

__all__ = [
    "AdminStore",
    "World",
    "all_sessions",
    "changed",
    "dump_store",
    "rebuilt",
    "run_log",
    "short_run_log",
]

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


async def all_pages(list_page: Any, scope_id: str) -> list[Record]:
    records: list[Record] = []
    cursor = ""
    while True:
        page = await list_page(scope_id, cursor=cursor, limit=7)
        records.extend(page.records)
        if not page.next_cursor:
            return records
        cursor = page.next_cursor


async def all_sessions(
    store: AdminStore,
    statuses: Iterable[SessionStatus] = (),
    labels: Mapping[str, str] | None = None,
    limit: int = 1000,
) -> list[Session]:
    """Every session ``list_sessions`` returns for this filter, paging to the end [D6]."""
    sessions: list[Session] = []
    cursor = ""
    while True:
        page = await store.list_sessions(statuses, labels=labels, cursor=cursor, limit=limit)
        sessions.extend(page.sessions)
        if not page.next_cursor:
            return sessions
        cursor = page.next_cursor


async def run_log(store: AdminStore, run_id: str) -> list[Record]:
    """A run's whole log, paging to the end."""
    return await all_pages(store.list_run_records, run_id)


async def short_run_log(store: AdminStore, run_id: str) -> list[Record]:
    """A run's log read as one page, checking that the page is the whole log."""
    page = await store.list_run_records(run_id)
    assert page.next_cursor == ""
    return list(page.records)


def rebuilt(run: RecordBuilder, **changes: Any) -> RecordBuilder:
    """The same run with some identity fields changed (its records follow the change)."""
    return RecordBuilder(msgspec.structs.replace(run.run, **changes), turn_id=run.turn_id)


def changed(record: Record, **changes: Any) -> Record:
    """The record with some fields changed."""
    return msgspec.structs.replace(record, **changes)


async def _outcome(call: Any, *args: Any) -> Any:
    """A call's value, or the error's class name and message: both are part of a dump."""
    try:
        return await call(*args)
    except AgentledgerError as e:
        return (type(e).__name__, str(e))


async def dump_store(
    store: AdminStore, session_ids: Iterable[str], run_ids: Iterable[str]
) -> dict[str, Any]:
    """Everything the public API shows about these sessions and runs.

    Two equal dumps mean no caller could tell the store changed.
    """
    sessions = sorted(set(session_ids))
    runs = sorted(set(run_ids))
    known = set(sessions)
    dump: dict[str, Any] = {
        "sessions": [s for s in await all_sessions(store) if s.id in known],
    }
    for sid in sessions:
        dump[f"session:{sid}"] = await _outcome(store.load_session, sid)
        dump[f"status:{sid}"] = await _outcome(store.load_session_status, sid)
        dump[f"runs:{sid}"] = await _outcome(store.list_runs_by_session, sid)
        dump[f"log:{sid}"] = await _outcome(all_pages, store.list_session_run_records, sid)
        dump[f"messages:{sid}"] = await _outcome(store.list_session_messages, sid)
    for rid in runs:
        dump[f"run:{rid}"] = await _outcome(store.load_run, rid)
        dump[f"records:{rid}"] = await _outcome(all_pages, store.list_run_records, rid)
        dump[f"suspension:{rid}"] = await _outcome(store.load_run_suspension, rid)
    return dump


class World:
    """Ids unique to one test, a millisecond clock, and builders for valid commands.

    Every id is prefixed with a fresh namespace, so tests can share one
    database without seeing each other's data.
    """

    def __init__(self, store: AdminStore, namespace: str | None = None) -> None:
        self.store = store
        self.ns = namespace or uuid.uuid4().hex[:10]
        self._ticks = itertools.count(1)
        self.session_ids: list[str] = []
        self.run_ids: list[str] = []

    def id(self, name: str) -> str:
        """A test-unique id for ``name``."""
        return f"{self.ns}-{name}"

    def now(self) -> datetime:
        """A strictly increasing UTC time with millisecond precision."""
        return EPOCH + timedelta(milliseconds=next(self._ticks))

    def track_session(self, name: str) -> str:
        sid = self.id(name)
        if sid not in self.session_ids:
            self.session_ids.append(sid)
        return sid

    def track_run(self, name: str) -> str:
        rid = self.id(name)
        if rid not in self.run_ids:
            self.run_ids.append(rid)
        return rid

    async def session(
        self, name: str, *, labels: Mapping[str, str] | None = None, at: datetime | None = None
    ) -> str:
        """Create a session (at ``at``, else the next tick) and return its id."""
        sid = self.track_session(name)
        await self.store.create_session(sid, created_at=at or self.now(), labels=labels)
        return sid

    def run(
        self,
        name: str,
        *,
        session: str = "",
        agent: str = "agent",
        parent: str = "",
        predecessor: str = "",
        labels: dict[str, str] | None = None,
        turn_id: str = "",
    ) -> RecordBuilder:
        """A builder for a run named ``name`` (``session``/``parent`` are full ids)."""
        return RecordBuilder(
            RunStart(
                run_id=self.track_run(name),
                agent_id=agent,
                session_id=session,
                parent_run_id=parent,
                predecessor_run_id=predecessor,
                started_at=self.now(),
                labels=labels or {},
            ),
            turn_id=turn_id,
        )

    async def root(self, name: str, *, session: str, **kw: Any) -> RecordBuilder:
        """Start a root run; its result is checked to be a fresh proceed."""
        run = self.run(name, session=session, **kw)
        result = await self.store.start_root_run(run.root_start())
        assert result.started.inserted, result
        return run

    async def child(
        self, name: str, *, parent: RecordBuilder, tool_call_id: str = "", **kw: Any
    ) -> tuple[RecordBuilder, StartResult]:
        """Start a child of ``parent`` (in the parent's session)."""
        run = self.run(name, session=parent.run.session_id, parent=parent.run.run_id, **kw)
        cmd = run.child_start(
            parent_agent_id=parent.run.agent_id,
            tool_name="agent_tool",
            tool_call_id=tool_call_id or f"call-{name}",
        )
        return run, await self.store.start_child_run(cmd)

    async def one_shot(self, name: str, **kw: Any) -> RecordBuilder:
        """Start a sessionless run."""
        run = self.run(name, **kw)
        await self.store.start_one_shot_run(run.one_shot_start())
        return run

    def note(self, run: RecordBuilder, key: str, body: bytes = b'{"note":true}') -> Record:
        """An ordinary record for ``run``."""
        return run.record("planner_note", body, event_key=key, at=self.now())

    async def suspend(self, run: RecordBuilder, checkpoint_id: str = "cp") -> Checkpoint:
        """Suspend ``run`` with a checkpoint and return it."""
        checkpoint = Checkpoint(id=checkpoint_id, data=b"\x00private\xff")
        await self.store.record_run_suspension(run.suspension(checkpoint, at=self.now()))
        return checkpoint

    async def finish(self, run: RecordBuilder, status: RunStatus = RunStatus.COMPLETED) -> None:
        """End ``run`` with ``status``."""
        await self.store.record_run_terminal(run.terminal(status, at=self.now()))

    async def dump(self) -> dict[str, Any]:
        """Everything the public API shows about this world's sessions and runs."""
        return await dump_store(self.store, self.session_ids, self.run_ids)

    @contextlib.asynccontextmanager
    async def unchanged(self) -> AsyncIterator[None]:
        """Assert the block leaves the store exactly as it found it."""
        before = await self.dump()
        yield
        after = await self.dump()
        assert after == before, "a rejected call changed the store"
