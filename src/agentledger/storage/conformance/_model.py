"""A tiny reference model of the store contract, for the stateful test.

It is a second, deliberately plain reading of DESIGN.md section 3: dicts and
lists, one method per store call, and no code shared with
:mod:`agentledger.storage.lifecycle` (otherwise the stateful test would
compare the decisions with themselves). It only knows what the stateful
machine sends: commands built by :class:`~agentledger.storage.RecordBuilder`,
plus the defects the machine injects on purpose (an unknown payload field, a
run that names itself as parent or predecessor).

Checks run in the contract's order: the command as given first (shape and
payloads), then the ids it names (run tombstone, session, parent), then the
stored run: exact retry, conflict, status, fresh event key. A refusal changes
nothing; the model raises :class:`Refused` with the error class a store must
raise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentledger.errors import (
    AgentledgerError,
    RecordConflictError,
    RecordOwnerMismatchError,
    RunCancellationConflictError,
    RunConflictError,
    RunNotActiveError,
    RunNotFoundError,
    RunSessionMismatchError,
    RunSuspensionConflictError,
    RunTerminalConflictError,
    SessionActiveError,
    SessionConflictError,
    SessionEndedError,
    SessionHasActiveRunsError,
    SessionNotFoundError,
    SessionPurgedError,
    SuspensionNotFoundError,
    ValidationError,
)
from agentledger.storage.session_image import SessionImage, session_digest
from agentledger.storage.types import (
    AppendResult,
    Checkpoint,
    ChildRunStart,
    OneShotChildRunStart,
    OneShotRunStart,
    PurgeReceipt,
    Record,
    RootRunStart,
    RunCancellation,
    RunMeta,
    RunStart,
    RunStatus,
    RunSuspension,
    RunTerminal,
    Session,
    SessionStatus,
    StartOutcome,
    StartResult,
)

__all__ = ["Model", "Refused"]

# The model's own copy of the vocabulary: it must not lean on the code under test.
_FIELDS = {
    "run_started": {"parent_run_id", "predecessor_run_id", "labels"},
    "run_completed": {"status", "phase", "failure", "cancellation", "labels"},
    "run_suspended": {"suspension_id", "version", "pending_count", "required_tools"},
    "child_run_linked": {"tool_name", "tool_call_id", "child_run_id", "child_agent_id"},
    "runtime.cancellation_intent": {"reason"},
}
_SESSION_ENDED = "session_ended"
_ENGINE_CANCELED = "engine_canceled"
_FINAL = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED)


class Refused(Exception):
    """The model's answer is a refusal with this error class."""

    def __init__(self, error: type[AgentledgerError]) -> None:
        super().__init__(error.__name__)
        self.error = error


def _same(stored: Record, given: Record) -> bool:
    """Whether ``given`` repeats ``stored`` exactly (the id is the store's, not the caller's)."""
    return (
        stored.run_id,
        stored.agent_id,
        stored.session_id,
        stored.turn_id,
        stored.event_key,
        stored.type,
        stored.timestamp,
        stored.payload,
    ) == (
        given.run_id,
        given.agent_id,
        given.session_id,
        given.turn_id,
        given.event_key,
        given.type,
        given.timestamp,
        given.payload,
    )


def _payload(record: Record) -> dict[str, Any]:
    """A lifecycle payload as a dict; unknown fields are a ValidationError [J1]."""
    value = json.loads(record.payload)
    if not isinstance(value, dict) or not set(value) <= _FIELDS[record.type]:
        raise Refused(ValidationError)
    return value


@dataclass
class _Session:
    id: str
    status: SessionStatus
    created_at: datetime
    ended_at: datetime | None = None
    labels: dict[str, str] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)  # start order
    log: list[Record] = field(default_factory=list)  # commit order over all its runs

    def public(self) -> Session:
        return Session(
            id=self.id,
            status=self.status,
            created_at=self.created_at,
            ended_at=self.ended_at,
            labels=dict(self.labels),
        )


@dataclass
class _Run:
    start: RunStart
    status: RunStatus
    outcome: StartOutcome
    updated_at: datetime
    cancellation_reason: str = ""
    successor: str = ""
    checkpoint: Checkpoint | None = None
    log: list[Record] = field(default_factory=list)
    keys: dict[str, Record] = field(default_factory=dict)
    started_key: str = ""
    link_key: str = ""  # on the parent's log
    cancel_key: str = ""
    suspension_key: str = ""
    terminal_key: str = ""
    tool_results: dict[str, bytes] = field(default_factory=dict)  # private, while running

    def meta(self) -> RunMeta:
        return RunMeta(
            run_id=self.start.run_id,
            agent_id=self.start.agent_id,
            session_id=self.start.session_id,
            parent_run_id=self.start.parent_run_id,
            status=self.status,
            start_outcome=self.outcome,
            started_at=self.start.started_at,
            updated_at=self.updated_at,
            labels=dict(self.start.labels),
            cancellation_reason=self.cancellation_reason,
            successor_run_id=self.successor,
            last_record_id=self.log[-1].id if self.log else "",
        )


class Model:
    """Sessions, runs and logs in plain dicts; the same calls as a store, but sync."""

    def __init__(self) -> None:
        self.sessions: dict[str, _Session] = {}  # creation order
        self.purged_sessions: set[str] = set()
        self.runs: dict[str, _Run] = {}
        self.purged_runs: dict[str, str] = {}  # run id -> its purged session
        self.receipts: dict[str, PurgeReceipt] = {}  # purged session id -> its receipt [D7]

    # ------------------------------------------------------------------ lookups

    def _session(self, session_id: str) -> _Session:
        if session_id in self.purged_sessions:
            raise Refused(SessionPurgedError)
        if session_id not in self.sessions:
            raise Refused(SessionNotFoundError)
        return self.sessions[session_id]

    def _run(self, run_id: str) -> _Run:
        if run_id in self.purged_runs:
            raise Refused(SessionPurgedError)
        if run_id not in self.runs:
            raise Refused(RunNotFoundError)
        return self.runs[run_id]

    def _status(self, run: _Run | RunStart) -> SessionStatus | None:
        start = run.start if isinstance(run, _Run) else run
        return self.sessions[start.session_id].status if start.session_id else None

    def _owned(self, run_id: str, record: Record) -> _Run:
        if record.run_id != run_id:
            raise Refused(RecordOwnerMismatchError)
        run = self._run(run_id)
        if (record.agent_id, record.session_id) != (run.start.agent_id, run.start.session_id):
            raise Refused(RecordOwnerMismatchError)
        return run

    def _write(self, run: _Run, record: Record) -> Record:
        stored = Record(
            run_id=record.run_id,
            agent_id=record.agent_id,
            session_id=record.session_id,
            turn_id=record.turn_id,
            event_key=record.event_key,
            type=record.type,
            timestamp=record.timestamp,
            payload=record.payload,
            id=str(len(run.log) + 1),
        )
        run.log.append(stored)
        run.keys[stored.event_key] = stored
        if stored.session_id:
            self.sessions[stored.session_id].log.append(stored)
        return stored

    # ----------------------------------------------------------------- sessions

    def create_session(
        self, session_id: str, created_at: datetime, labels: dict[str, str] | None = None
    ) -> Session:
        if session_id in self.purged_sessions:
            raise Refused(SessionPurgedError)
        existing = self.sessions.get(session_id)
        if existing is not None:
            if existing.status is SessionStatus.ENDED:
                raise Refused(SessionEndedError)
            if existing.labels != (labels or {}):
                raise Refused(SessionConflictError)
            return existing.public()
        self.sessions[session_id] = _Session(
            session_id, SessionStatus.ACTIVE, created_at, labels=dict(labels or {})
        )
        return self.sessions[session_id].public()

    def end_session(self, session_id: str, ended_at: datetime) -> Session:
        session = self._session(session_id)
        if session.status is SessionStatus.ACTIVE:
            session.status, session.ended_at = SessionStatus.ENDED, ended_at
        return session.public()

    def purge_session(self, session_id: str) -> PurgeReceipt:
        """[D7] the receipt has ``purged_at=None`` on the first purge: that is the store's
        clock, which the machine copies into :attr:`receipts` from the store's answer."""
        if session_id in self.purged_sessions:
            return self.receipts[session_id]
        session = self._session(session_id)
        if session.status is SessionStatus.ACTIVE:
            raise Refused(SessionActiveError)
        if any(self.runs[r].status is RunStatus.RUNNING for r in session.runs):
            raise Refused(SessionHasActiveRunsError)
        runs = [self.runs[r] for r in session.runs]
        checkpoints = {r.start.run_id: r.checkpoint for r in runs if r.checkpoint is not None}
        image = SessionImage(
            session=session.public(),
            runs=[r.meta() for r in runs],
            records=list(session.log),
            checkpoints=checkpoints,
        )
        self.receipts[session_id] = PurgeReceipt(
            session_id=session_id,
            runs=len(runs),
            records=len(session.log),
            checkpoints=len(checkpoints),
            bytes=sum(len(r.payload) for r in session.log)
            + sum(len(c.data) for c in checkpoints.values()),
            digest=session_digest(image),
            purged_at=None,
            messages=0,  # the model submits no messages
            search_entries=0,  # nor any transcript: nothing of it is indexed
        )
        for run_id in session.runs:
            del self.runs[run_id]
            self.purged_runs[run_id] = session_id
        del self.sessions[session_id]
        self.purged_sessions.add(session_id)
        return self.receipts[session_id]

    # ------------------------------------------------------------------- starts

    def start_root_run(self, cmd: RootRunStart) -> StartResult:
        return self._start(cmd.run, cmd.started, None, cmd.canceled)

    def start_child_run(self, cmd: ChildRunStart) -> StartResult:
        return self._start(cmd.run, cmd.started, cmd.parent_linked, cmd.canceled)

    def start_one_shot_run(self, cmd: OneShotRunStart) -> StartResult:
        return self._start(cmd.run, cmd.started, None, None)

    def start_one_shot_child_run(self, cmd: OneShotChildRunStart) -> StartResult:
        return self._start(cmd.run, cmd.started, cmd.parent_linked, None)

    def _start(
        self, run: RunStart, started: Record, link: Record | None, stop: Record | None
    ) -> StartResult:
        if run.run_id in (run.parent_run_id, run.predecessor_run_id):
            raise Refused(ValidationError)
        _payload(started)
        if stop is not None:
            _payload(stop)
        if run.run_id in self.purged_runs:
            raise Refused(SessionPurgedError)
        session = self._session(run.session_id) if run.session_id else None
        parent = None
        if link is not None:
            parent = self._run(run.parent_run_id)
            if parent.start.session_id != run.session_id:
                raise Refused(RunSessionMismatchError)
            owner = (link.run_id, link.agent_id, link.session_id)
            if owner != (parent.start.run_id, parent.start.agent_id, parent.start.session_id):
                raise Refused(RecordOwnerMismatchError)
        existing = self.runs.get(run.run_id)
        if existing is not None:
            return self._retry_start(existing, run, started, link, stop)
        if parent is not None and parent.status is not RunStatus.RUNNING:
            raise Refused(RunNotActiveError)
        predecessor = self._predecessor(run)
        if parent is not None and link is not None and link.event_key in parent.keys:
            raise Refused(RecordConflictError)

        status = session.status if session is not None else None
        ended = status is SessionStatus.ENDED
        new = _Run(
            start=run,
            status=RunStatus.CANCELED if ended else RunStatus.RUNNING,
            outcome=StartOutcome.STOP if ended else StartOutcome.PROCEED,
            updated_at=run.started_at,
            cancellation_reason=_SESSION_ENDED if ended else "",
        )
        parent_result = None
        if parent is not None and link is not None:
            linked = self._write(parent, link)
            new.link_key = link.event_key
            parent_result = AppendResult(id=linked.id, inserted=True, session_status=status)
        self.runs[run.run_id] = new
        if session is not None:
            session.runs.append(run.run_id)
        first = self._write(new, started)
        new.started_key = started.event_key
        canceled = None
        if ended and stop is not None:
            last = self._write(new, stop)
            new.terminal_key = stop.event_key
            canceled = AppendResult(id=last.id, inserted=True, session_status=status)
        if predecessor is not None:
            predecessor.successor = run.run_id
            predecessor.updated_at = run.started_at
        return StartResult(
            outcome=new.outcome,
            run_status=new.status,
            started=AppendResult(id=first.id, inserted=True, session_status=status),
            canceled=canceled,
            parent_record=parent_result,
        )

    def _predecessor(self, run: RunStart) -> _Run | None:
        """[K1]/[K3] a continuation's suspended predecessor with no other successor."""
        if not run.predecessor_run_id:
            return None
        pred = self._run(run.predecessor_run_id)
        if pred.start.session_id != run.session_id:
            raise Refused(RunSessionMismatchError)
        if (pred.start.agent_id, pred.start.parent_run_id) != (run.agent_id, run.parent_run_id):
            raise Refused(RunConflictError)
        if pred.status is not RunStatus.SUSPENDED:
            raise Refused(RunNotActiveError)
        if pred.successor and pred.successor != run.run_id:
            raise Refused(RunConflictError)
        return pred

    def _retry_start(
        self,
        existing: _Run,
        run: RunStart,
        started: Record,
        link: Record | None,
        stop: Record | None,
    ) -> StartResult:
        """[X1]/[X4] the same start again: the original decision and record ids."""
        first = existing.start
        if (
            first.agent_id,
            first.session_id,
            first.parent_run_id,
            first.predecessor_run_id,
            first.started_at,
            first.labels,
        ) != (
            run.agent_id,
            run.session_id,
            run.parent_run_id,
            run.predecessor_run_id,
            run.started_at,
            run.labels,
        ):
            raise Refused(RunConflictError)
        stored_started = existing.keys[existing.started_key]
        if not _same(stored_started, started):
            raise Refused(RunConflictError)
        status = self._status(existing)
        parent_result = None
        if link is not None:
            stored_link = self.runs[first.parent_run_id].keys[existing.link_key]
            if not _same(stored_link, link):
                raise Refused(RunConflictError)
            parent_result = AppendResult(id=stored_link.id, inserted=False, session_status=status)
        canceled = None
        if existing.outcome is StartOutcome.STOP:
            stored_stop = existing.keys[existing.terminal_key]
            if stop is not None and not _same(stored_stop, stop):
                raise Refused(RunConflictError)
            canceled = AppendResult(id=stored_stop.id, inserted=False, session_status=status)
        return StartResult(
            outcome=existing.outcome,
            run_status=existing.status,
            started=AppendResult(id=stored_started.id, inserted=False, session_status=status),
            canceled=canceled,
            parent_record=parent_result,
        )

    # ------------------------------------------------------------------ records

    def append_run_record(self, record: Record) -> AppendResult:
        if record.type in _FIELDS:
            raise Refused(ValidationError)
        run = self._owned(record.run_id, record)
        status = self._status(run)
        stored = run.keys.get(record.event_key)
        if stored is not None:
            if not _same(stored, record):
                raise Refused(RecordConflictError)
            return AppendResult(id=stored.id, inserted=False, session_status=status)
        if run.status is not RunStatus.RUNNING:
            raise Refused(RunNotActiveError)
        return AppendResult(id=self._write(run, record).id, inserted=True, session_status=status)

    def append_run_records(self, records: list[Record]) -> list[AppendResult]:
        """[B1] check the whole batch first, then write it: all or nothing."""
        if not records or any(r.type in _FIELDS or r.run_id != records[0].run_id for r in records):
            raise Refused(ValidationError)
        run = self._owned(records[0].run_id, records[0])
        for record in records[1:]:
            self._owned(run.start.run_id, record)
        status = self._status(run)
        pending: dict[str, Record] = {}
        for record in records:
            seen = pending.get(record.event_key) or run.keys.get(record.event_key)
            if seen is not None:
                if not _same(seen, record):
                    raise Refused(RecordConflictError)
            elif run.status is not RunStatus.RUNNING:
                raise Refused(RunNotActiveError)
            else:
                pending[record.event_key] = record
        results: list[AppendResult] = []
        for record in records:
            stored = run.keys.get(record.event_key)
            if stored is not None:
                results.append(AppendResult(id=stored.id, inserted=False, session_status=status))
            else:
                new = self._write(run, record)
                results.append(AppendResult(id=new.id, inserted=True, session_status=status))
        return results

    def _fresh(self, run: _Run, record: Record) -> None:
        if run.status is not RunStatus.RUNNING:
            raise Refused(RunNotActiveError)
        if record.event_key in run.keys:
            raise Refused(RecordConflictError)

    def record_run_cancellation(self, cmd: RunCancellation) -> AppendResult:
        if not cmd.reason or cmd.reason in (_SESSION_ENDED, _ENGINE_CANCELED):
            raise Refused(ValidationError)
        if _payload(cmd.record).get("reason") != cmd.reason:
            raise Refused(ValidationError)
        run = self._owned(cmd.run_id, cmd.record)
        status = self._status(run)
        if run.cancel_key:
            stored = run.keys[run.cancel_key]
            if (
                run.cancellation_reason != cmd.reason
                or run.cancel_key != cmd.record.event_key
                or not _same(stored, cmd.record)
            ):
                raise Refused(RunCancellationConflictError)
            return AppendResult(id=stored.id, inserted=False, session_status=status)
        self._fresh(run, cmd.record)
        new = self._write(run, cmd.record)
        run.cancellation_reason, run.cancel_key = cmd.reason, new.event_key
        run.updated_at = new.timestamp
        return AppendResult(id=new.id, inserted=True, session_status=status)

    def record_run_suspension(self, cmd: RunSuspension) -> AppendResult:
        if _payload(cmd.record).get("suspension_id") != cmd.checkpoint.id:
            raise Refused(ValidationError)
        run = self._owned(cmd.run_id, cmd.record)
        status = self._status(run)
        if run.suspension_key:
            stored = run.keys[run.suspension_key]
            if (
                run.suspension_key != cmd.record.event_key
                or not _same(stored, cmd.record)
                or run.checkpoint != cmd.checkpoint
            ):
                raise Refused(RunSuspensionConflictError)
            return AppendResult(id=stored.id, inserted=False, session_status=status)
        self._fresh(run, cmd.record)
        new = self._write(run, cmd.record)
        run.status, run.checkpoint, run.suspension_key = (
            RunStatus.SUSPENDED,
            cmd.checkpoint,
            new.event_key,
        )
        run.updated_at = new.timestamp
        return AppendResult(id=new.id, inserted=True, session_status=status)

    def record_run_terminal(self, cmd: RunTerminal) -> AppendResult:
        if cmd.status not in _FINAL:
            raise Refused(ValidationError)
        payload = _payload(cmd.record)
        run = self._owned(cmd.run_id, cmd.record)
        if payload.get("labels", {}) != run.start.labels:
            raise Refused(ValidationError)
        if cmd.status is RunStatus.CANCELED:
            want = run.cancellation_reason or _ENGINE_CANCELED
            if (payload.get("cancellation") or {}).get("reason") != want:
                raise Refused(ValidationError)
        status = self._status(run)
        if run.terminal_key:
            stored = run.keys[run.terminal_key]
            if (
                run.status is not cmd.status
                or run.terminal_key != cmd.record.event_key
                or not _same(stored, cmd.record)
            ):
                raise Refused(RunTerminalConflictError)
            return AppendResult(id=stored.id, inserted=False, session_status=status)
        self._fresh(run, cmd.record)
        new = self._write(run, cmd.record)
        run.status, run.terminal_key = RunStatus(cmd.status), new.event_key
        run.updated_at = new.timestamp
        return AppendResult(id=new.id, inserted=True, session_status=status)

    # -------------------------------------------------------------------- reads

    def load_session(self, session_id: str) -> Session:
        return self._session(session_id).public()

    def load_session_status(self, session_id: str) -> SessionStatus:
        return self._session(session_id).status

    def list_sessions(self) -> list[Session]:
        """Every session, newest first: ``created_at``, then id, descending [D6]."""
        ordered = sorted(self.sessions.values(), key=lambda s: (s.created_at, s.id), reverse=True)
        return [s.public() for s in ordered]

    def list_runs_by_session(
        self, session_id: str, statuses: tuple[RunStatus, ...] = ()
    ) -> list[RunMeta]:
        runs = (self.runs[r] for r in self._session(session_id).runs)
        return [r.meta() for r in runs if not statuses or r.status in statuses]

    def session_log(self, session_id: str) -> list[Record]:
        return list(self._session(session_id).log)

    def load_run(self, run_id: str) -> RunMeta:
        return self._run(run_id).meta()

    def run_log(self, run_id: str) -> list[Record]:
        return list(self._run(run_id).log)

    def load_run_suspension(self, run_id: str) -> Checkpoint:
        run = self._run(run_id)
        if run.checkpoint is None:
            raise Refused(SuspensionNotFoundError)
        return run.checkpoint

    def save_tool_result(self, run_id: str, call_key: str, data: bytes) -> bytes:
        """The first save of a call's result wins; only a running run saves."""
        run = self._running(run_id)
        return run.tool_results.setdefault(call_key, data)

    def load_tool_result(self, run_id: str, call_key: str) -> bytes | None:
        return self._running(run_id).tool_results.get(call_key)

    def _running(self, run_id: str) -> _Run:
        run = self._run(run_id)
        if run.status is not RunStatus.RUNNING:
            raise Refused(RunNotActiveError)
        return run

    def session_of(self, run_id: str) -> str:
        """The session a run is (or was, before a purge) in; "" if unknown or one-shot."""
        if run_id in self.runs:
            return self.runs[run_id].start.session_id
        return self.purged_runs.get(run_id, "")
