"""Every store operation, declared once: the table the backends, the client, the wire and
the tracing wrapper derive from.

An :class:`Operation` names a ``Store`` or ``SessionAdmin`` method, the request struct
its arguments travel in (a command is its own request), the decision that plans it
(a write) or reads it (a read through any :class:`StateReader`), the sessions,
runs and records it names, and who may call it. :class:`StoreOperations` and
:class:`AdminOperations` write each public method once, as
``self.perform(op, request)``; an implementation supplies only ``perform``.

To add a store operation: write its decision in :mod:`.lifecycle`, add the method
to :mod:`.protocol`, its request struct to :mod:`.requests` (unless a type of its
own carries the arguments), and one entry here (the :class:`Operation` and the
method in the mixin). A write needs nothing else: every
backend applies a plan the same way. A read that cannot be answered through a
``StateReader`` (it needs its own query) also needs one read function per
backend, listed in that backend's table of reads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, Literal, NamedTuple, TypeVar, cast

import msgspec

from agentledger.errors import AccessDeniedError, ValidationError
from agentledger.storage import lifecycle, payloads
from agentledger.storage.accounting import LabelUsage, UsageTotals
from agentledger.storage.derivation import DerivedCopy
from agentledger.storage.protocol import DEFAULT_PAGE_LIMIT, DEFAULT_SEARCH_LIMIT
from agentledger.storage.requests import (
    ChainQuery,
    RecordBatch,
    RunPageQuery,
    RunRef,
    RunsBySessionQuery,
    SearchRequest,
    SessionCreate,
    SessionEnd,
    SessionPageQuery,
    SessionPurge,
    SessionRef,
    SessionsQuery,
    ToolResultRef,
    ToolResultSave,
    UsageQuery,
)
from agentledger.storage.search import SearchPage
from agentledger.storage.session_image import SessionImage
from agentledger.storage.session_import import plan_import_session
from agentledger.storage.state import Plan, StateReader
from agentledger.storage.types import (
    AppendResult,
    Checkpoint,
    ChildRunStart,
    MessageSubmission,
    OneShotChildRunStart,
    OneShotRunStart,
    Page,
    PurgeReceipt,
    Record,
    RepairResult,
    RootRunStart,
    RunCancellation,
    RunMeta,
    RunStart,
    RunStatus,
    RunSuspension,
    RunTerminal,
    Session,
    SessionMessage,
    SessionPage,
    SessionStatus,
    StartResult,
    TranscriptSegment,
    TurnAppend,
)
from agentledger.storage.validation import SizeLimits

__all__ = [
    "OPERATIONS",
    "Access",
    "AdminOperations",
    "Operation",
    "StoreOperations",
    "Touch",
    "decide_stateless",
    "within",
]

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class Access(StrEnum):
    """Who may call an operation through the service [S4] (the service maps it to roles)."""

    WRITE = "write"  # a Store write: workers and hosts
    SCRATCH = "scratch"  # a worker's private scratch read: workers and hosts
    READ = "read"  # a Store read: every role
    ADMIN = "admin"  # a SessionAdmin write: hosts
    ADMIN_READ = "admin_read"  # a SessionAdmin read: hosts and readers


class Touch(NamedTuple):
    """One thing an operation names: a session or run (``new``: one it would create), a
    record of a run (``event_key``), or the labels something created would carry."""

    kind: Literal["session", "run", "record", "labels"]
    id: str = ""
    new: bool = False
    event_key: str = ""
    labels: Mapping[str, str] = {}


# ------------------------------------------------------------ operations


class _NeedsState(Exception):
    """A stateless run of a decision reached its first read of stored state."""


class _Stateless:
    """A :class:`StateReader` with no state: its first read stops the decision."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def read(*args: object) -> Any:
            raise _NeedsState(name)

        return read


_STATELESS = cast(StateReader, _Stateless())


def decide_stateless(decide: Callable[[StateReader], object]) -> None:
    """Run a decision up to its first read of stored state: what it refuses there, the
    store refuses whatever is stored, with the same error.

    Raises:
        AgentledgerError: the decision's refusal of its input as given.
    """
    with contextlib.suppress(_NeedsState):
        decide(_STATELESS)


class Operation(Generic[Req, Resp]):
    """One store operation: its request, its decision, what it names, who may call it.

    Attributes:
        name: the protocol method's name (and the service route ``/v1/<name>``).
        request: the msgspec type its arguments travel in.
        response: the type of its result.
        plan: a write's decision (a ``lifecycle`` plan); None for a read.
        read: a read's decision through any ``StateReader``; None for a write, or a
            read each backend answers with its own query (its table of reads).
        touches: the sessions, runs and records it names, in the order a scope
            check reads them; only called on a request :meth:`check` passed.
        access: who may call it through the service.
        appended: an append's records (the backends' fast append paths).
        starts: a run start (a backend may keep the run for its next append).
        bounded: a read of one row or a bounded page (may run on the caller's thread).
        one_statement: a read one statement answers (no read transaction needed).
        positional: how many leading request fields are positional arguments of the
            method; None when the request is the method's one argument.
        prefix: the name the backend gives the body in error fields (``"record"``).
        narrow: for a listing, the request a label-scoped token may make instead.
    """

    __slots__ = (
        "access",
        "appended",
        "bounded",
        "name",
        "narrow",
        "one_statement",
        "plan",
        "positional",
        "prefix",
        "read",
        "request",
        "response",
        "starts",
        "touches",
    )

    def __init__(
        self,
        name: str,
        request: type[Req],
        response: Any,
        *,
        access: Access,
        touches: Callable[[Req], tuple[Touch, ...]],
        plan: Callable[[StateReader, Req, SizeLimits], Plan[Resp]] | None = None,
        read: Callable[[StateReader, Req], Resp] | None = None,
        appended: Callable[[Req], Sequence[object]] | None = None,
        starts: bool = False,
        bounded: bool = False,
        one_statement: bool = False,
        positional: int | None = 1,
        prefix: str = "",
        narrow: Callable[[Req, dict[str, str]], Req] | None = None,
    ) -> None:
        self.name = name
        self.request = request
        self.response: Any = response
        self.access = access
        self.touches = touches
        self.plan = plan
        self.read = read
        self.appended = appended
        self.starts = starts
        self.bounded = bounded
        self.one_statement = one_statement
        self.positional = positional
        self.prefix = prefix
        self.narrow = narrow

    @property
    def writes(self) -> bool:
        """Whether it may change the store."""
        return self.plan is not None

    def __repr__(self) -> str:
        return f"<Operation {self.name}>"

    def check(self, request: Req, limits: SizeLimits) -> None:
        """Run the decision on ``request`` up to its first read of stored state.

        What it refuses there, the store refuses whatever is stored, with the
        same error. A backend that reads a request's ids before deciding (to lock
        or prefetch them: ``PostgresStore``) calls it first, so it reads only
        checked input; ``StoreClient`` calls it on loose arguments before sending.
        A read answered by a backend query has no decision to run here.

        Raises:
            AgentledgerError: the store's own refusal of the request as given.
        """
        plan, read = self.plan, self.read
        if plan is not None:
            decide_stateless(lambda reader: plan(reader, request, limits))
        elif read is not None:
            decide_stateless(lambda reader: read(reader, request))

    def invoke(self, store: object, request: Req) -> Coroutine[Any, Any, Resp]:
        """The operation on any store: through ``perform`` when it derives its methods from
        this table, else through its public method (a store written by hand)."""
        if isinstance(store, StoreOperations):
            return store.perform(self, request)
        method = getattr(store, self.name)
        if self.positional is None:
            return cast(Coroutine[Any, Any, Resp], method(request))
        fields = cast(msgspec.Struct, request).__struct_fields__
        values = [getattr(request, field) for field in fields]
        n = self.positional
        named = dict(zip(fields[n:], values[n:], strict=True))
        return cast(Coroutine[Any, Any, Resp], method(*values[:n], **named))


def within(
    scope: dict[str, str], labels: dict[str, str], operation: str = "list_sessions"
) -> dict[str, str]:
    """A label filter narrowed to a token's scope.

    Raises:
        AccessDeniedError: (403) the filter asks for labels outside the scope.
    """
    clash = {k: v for k, v in labels.items() if k in scope and scope[k] != v}
    if clash:
        raise AccessDeniedError(
            operation=operation,
            status=403,
            reason=f"labels {clash} are outside the token's scope {scope}",
        )
    return {**labels, **scope}


def _session(session_id: str) -> Touch:
    return Touch("session", session_id)


def _run(run_id: str) -> Touch:
    return Touch("run", run_id)


def _record(record: Record) -> Touch:
    return Touch("record", record.run_id, event_key=record.event_key)


def _start(run: RunStart, *named: Touch, records: Sequence[Record] = ()) -> tuple[Touch, ...]:
    """A start's touches: its labels or session, its parent, its predecessor, the run its
    history references, its new id."""
    sources = []
    for record in records:
        if record.type == payloads.TRANSCRIPT_REFERENCED:
            with contextlib.suppress(ValidationError):  # the decision refuses it
                sources.append(_run(payloads.TranscriptReference.decode(record.payload).run_id))
    predecessor = (_run(run.predecessor_run_id),) if run.predecessor_run_id else ()
    return (*named, *predecessor, *sources, Touch("run", run.run_id, new=True))


def _ending(run_id: str, record: Record, carried: Sequence[Record] = ()) -> tuple[Touch, ...]:
    """A lifecycle record's touches: its run, its record, then the records it carries."""
    return (_run(run_id), _record(record), *(_record(r) for r in carried))


def _appending(records: Sequence[Record]) -> tuple[Touch, ...]:
    return (_run(records[0].run_id), *(_record(r) for r in records))


def _imported(image: SessionImage) -> tuple[Touch, ...]:
    """An import's touches: the session's labels, its id and every run id it would create."""
    session = image.session
    return (
        Touch("labels", labels=session.labels),
        Touch("session", session.id, new=True),
        *(Touch("run", run.run_id, new=True) for run in image.runs),
        *(Touch("run", m.run_id, new=True) for m in image.messages if not m.started),
    )


# Store ------------------------------------------------------------------

START_ROOT_RUN: Operation[RootRunStart, StartResult] = Operation(
    "start_root_run", RootRunStart, StartResult, access=Access.WRITE, starts=True,
    touches=lambda c: _start(c.run, _session(c.run.session_id), records=c.records),
    plan=lambda r, c, limits: lifecycle.plan_root_start(r, c, limits=limits), positional=None,
)  # fmt: skip
START_CHILD_RUN: Operation[ChildRunStart, StartResult] = Operation(
    "start_child_run", ChildRunStart, StartResult, access=Access.WRITE, starts=True,
    touches=lambda c: _start(
        c.run, _session(c.run.session_id), _run(c.run.parent_run_id), records=c.records),
    plan=lambda r, c, limits: lifecycle.plan_child_start(r, c, limits=limits), positional=None,
)  # fmt: skip
START_ONE_SHOT_RUN: Operation[OneShotRunStart, StartResult] = Operation(
    "start_one_shot_run", OneShotRunStart, StartResult, access=Access.WRITE, starts=True,
    touches=lambda c: _start(c.run, Touch("labels", labels=c.run.labels)),
    plan=lambda r, c, limits: lifecycle.plan_one_shot_start(r, c, limits=limits),
    positional=None,
)  # fmt: skip
START_ONE_SHOT_CHILD_RUN: Operation[OneShotChildRunStart, StartResult] = Operation(
    "start_one_shot_child_run", OneShotChildRunStart, StartResult, access=Access.WRITE,
    starts=True,
    touches=lambda c: _start(
        c.run, Touch("labels", labels=c.run.labels), _run(c.run.parent_run_id)),
    plan=lambda r, c, limits: lifecycle.plan_one_shot_child_start(r, c, limits=limits),
    positional=None,
)  # fmt: skip
APPEND_RUN_RECORD: Operation[Record, AppendResult] = Operation(
    "append_run_record", Record, AppendResult, access=Access.WRITE,
    touches=lambda r: _appending((r,)), appended=lambda r: (r,),
    plan=lambda r, c, limits: lifecycle.plan_append(r, c, limits=limits),
    positional=None, prefix="record",
)  # fmt: skip
APPEND_RUN_RECORDS: Operation[RecordBatch, list[AppendResult]] = Operation(
    "append_run_records", RecordBatch, list[AppendResult], access=Access.WRITE,
    touches=lambda b: _appending(b.records), appended=lambda b: b.records,
    plan=lambda r, b, limits: lifecycle.plan_append_batch(r, b.records, limits=limits),
)  # fmt: skip
RECORD_RUN_CANCELLATION: Operation[RunCancellation, AppendResult] = Operation(
    "record_run_cancellation", RunCancellation, AppendResult, access=Access.WRITE,
    touches=lambda c: _ending(c.run_id, c.record),
    plan=lambda r, c, limits: lifecycle.plan_cancellation(r, c, limits=limits), positional=None,
)  # fmt: skip
RECORD_RUN_SUSPENSION: Operation[RunSuspension, AppendResult] = Operation(
    "record_run_suspension", RunSuspension, AppendResult, access=Access.WRITE,
    touches=lambda c: _ending(c.run_id, c.record, c.records),
    plan=lambda r, c, limits: lifecycle.plan_suspension(r, c, limits=limits), positional=None,
)  # fmt: skip
RECORD_RUN_TERMINAL: Operation[RunTerminal, AppendResult] = Operation(
    "record_run_terminal", RunTerminal, AppendResult, access=Access.WRITE,
    touches=lambda c: _ending(c.run_id, c.record, c.records),
    plan=lambda r, c, limits: lifecycle.plan_terminal(r, c, limits=limits), positional=None,
)  # fmt: skip
REPAIR_RUN_SUSPENSION: Operation[RunSuspension, RepairResult] = Operation(
    "repair_run_suspension", RunSuspension, RepairResult, access=Access.WRITE,
    touches=lambda c: _ending(c.run_id, c.record),
    plan=lambda r, c, limits: lifecycle.plan_repair_suspension(r, c, limits=limits),
    positional=None,
)  # fmt: skip
REPAIR_RUN_TERMINAL: Operation[RunTerminal, RepairResult] = Operation(
    "repair_run_terminal", RunTerminal, RepairResult, access=Access.WRITE,
    touches=lambda c: _ending(c.run_id, c.record),
    plan=lambda r, c, limits: lifecycle.plan_repair_terminal(r, c, limits=limits),
    positional=None,
)  # fmt: skip
SAVE_TOOL_RESULT: Operation[ToolResultSave, bytes] = Operation(
    "save_tool_result", ToolResultSave, bytes, access=Access.WRITE,
    touches=lambda c: (_run(c.run_id),), positional=3,
    plan=lambda r, c, limits: lifecycle.plan_save_tool_result(
        r, c.run_id, c.call_key, c.data, limits=limits),
)  # fmt: skip
LOAD_TOOL_RESULT: Operation[ToolResultRef, bytes | None] = Operation(
    "load_tool_result", ToolResultRef, bytes | None, access=Access.SCRATCH,
    touches=lambda q: (_run(q.run_id),), positional=2, bounded=True,
    read=lambda r, q: lifecycle.load_tool_result(r, q.run_id, q.call_key),
)  # fmt: skip
LOAD_RUN: Operation[RunRef, RunMeta] = Operation(
    "load_run", RunRef, RunMeta, access=Access.READ,
    touches=lambda q: (_run(q.run_id),), bounded=True, one_statement=True,
    read=lambda r, q: lifecycle.load_run(r, q.run_id),
)  # fmt: skip
LOAD_SESSION_STATUS: Operation[SessionRef, SessionStatus] = Operation(
    "load_session_status", SessionRef, SessionStatus, access=Access.READ,
    touches=lambda q: (_session(q.session_id),), bounded=True, one_statement=True,
    read=lambda r, q: lifecycle.load_session_status(r, q.session_id),
)  # fmt: skip
LOAD_RUN_SUSPENSION: Operation[RunRef, Checkpoint] = Operation(
    "load_run_suspension", RunRef, Checkpoint, access=Access.READ,
    touches=lambda q: (_run(q.run_id),),
    read=lambda r, q: lifecycle.load_run_suspension(r, q.run_id),
)  # fmt: skip
LIST_RUN_RECORDS: Operation[RunPageQuery, Page] = Operation(
    "list_run_records", RunPageQuery, Page, access=Access.READ,
    touches=lambda q: (_run(q.run_id),),
)  # fmt: skip
LOAD_TRANSCRIPT_CHAIN: Operation[ChainQuery, tuple[TranscriptSegment, ...]] = Operation(
    "load_transcript_chain", ChainQuery, tuple[TranscriptSegment, ...], access=Access.READ,
    touches=lambda q: (_run(q.run_id),),
)  # fmt: skip
LIST_SESSION_RUN_RECORDS: Operation[SessionPageQuery, Page] = Operation(
    "list_session_run_records", SessionPageQuery, Page, access=Access.READ,
    touches=lambda q: (_session(q.session_id),),
)  # fmt: skip
SUBMIT_MESSAGE: Operation[MessageSubmission, SessionMessage] = Operation(
    "submit_message", MessageSubmission, SessionMessage, access=Access.WRITE,
    touches=lambda c: (_session(c.session_id), Touch("run", c.run_id, new=True)),
    plan=lambda r, c, limits: lifecycle.plan_submit_message(r, c, limits=limits),
    positional=None,
)  # fmt: skip
LOAD_PENDING_MESSAGES: Operation[SessionRef, list[SessionMessage]] = Operation(
    "load_pending_messages", SessionRef, list[SessionMessage], access=Access.READ,
    touches=lambda q: (_session(q.session_id),),
    read=lambda r, q: lifecycle.load_pending_messages(r, q.session_id),
)  # fmt: skip
LIST_SESSION_MESSAGES: Operation[SessionRef, list[SessionMessage]] = Operation(
    "list_session_messages", SessionRef, list[SessionMessage], access=Access.READ,
    touches=lambda q: (_session(q.session_id),),
    read=lambda r, q: lifecycle.list_session_messages(r, q.session_id),
)  # fmt: skip
LOAD_SESSION_USAGE: Operation[SessionRef, UsageTotals] = Operation(
    "load_session_usage", SessionRef, UsageTotals, access=Access.READ,
    touches=lambda q: (_session(q.session_id),), bounded=True, one_statement=True,
)  # fmt: skip
LOAD_RUN_USAGE: Operation[RunRef, UsageTotals] = Operation(
    "load_run_usage", RunRef, UsageTotals, access=Access.READ,
    touches=lambda q: (_run(q.run_id),), bounded=True, one_statement=True,
)  # fmt: skip
SEARCH: Operation[SearchRequest, SearchPage] = Operation(
    "search", SearchRequest, SearchPage, access=Access.READ, positional=1,
    touches=lambda q: (_session(q.session_id),) if q.session_id else (),
    narrow=lambda q, scope: msgspec.structs.replace(
        q, labels=within(scope, q.labels or {}, "search")),
)  # fmt: skip

# SessionAdmin -----------------------------------------------------------

CREATE_SESSION: Operation[SessionCreate, Session] = Operation(
    "create_session", SessionCreate, Session, access=Access.ADMIN,
    touches=lambda q: (Touch("labels", labels=q.labels or {}),
                       Touch("session", q.session_id, new=True)),
    plan=lambda r, q, _: lifecycle.plan_create_session(r, q.session_id, q.created_at, q.labels),
)  # fmt: skip
LOAD_SESSION: Operation[SessionRef, Session] = Operation(
    "load_session", SessionRef, Session, access=Access.ADMIN_READ,
    touches=lambda q: (_session(q.session_id),), bounded=True, one_statement=True,
    read=lambda r, q: lifecycle.load_session(r, q.session_id),
)  # fmt: skip
END_SESSION: Operation[SessionEnd, Session] = Operation(
    "end_session", SessionEnd, Session, access=Access.ADMIN,
    touches=lambda q: (_session(q.session_id),),
    plan=lambda r, q, _: lifecycle.plan_end_session(r, q.session_id, q.ended_at),
)  # fmt: skip
PURGE_SESSION: Operation[SessionPurge, PurgeReceipt] = Operation(
    "purge_session", SessionPurge, PurgeReceipt, access=Access.ADMIN,
    touches=lambda q: (_session(q.session_id),),
    plan=lambda r, q, _: lifecycle.plan_purge_session(
        r, q.session_id, q.expected_digest, q.cascade, q.scope),
    narrow=lambda q, scope: msgspec.structs.replace(q, scope=scope),
)  # fmt: skip
IMPORT_SESSION: Operation[SessionImage, None] = Operation(
    "import_session", SessionImage, None, access=Access.ADMIN, touches=_imported,
    plan=lambda r, q, limits: plan_import_session(r, q, limits=limits), positional=None,
)  # fmt: skip
APPEND_TURN_RECORDS: Operation[RecordBatch, TurnAppend] = Operation(
    "append_turn_records", RecordBatch, TurnAppend, access=Access.WRITE,
    touches=lambda b: _appending(b.records), appended=lambda b: b.records,
    plan=lambda r, b, limits: lifecycle.plan_append_turn(r, b.records, limits=limits),
)  # fmt: skip
LIST_RUNS_BY_SESSION: Operation[RunsBySessionQuery, list[RunMeta]] = Operation(
    "list_runs_by_session", RunsBySessionQuery, list[RunMeta], access=Access.ADMIN_READ,
    touches=lambda q: (_session(q.session_id),),
)  # fmt: skip
LIST_SESSIONS: Operation[SessionsQuery, SessionPage] = Operation(
    "list_sessions", SessionsQuery, SessionPage, access=Access.ADMIN_READ,
    touches=lambda q: (), positional=0,
    narrow=lambda q, scope: msgspec.structs.replace(q, labels=within(scope, q.labels or {})),
)  # fmt: skip
USAGE_BY_LABEL: Operation[UsageQuery, list[LabelUsage]] = Operation(
    "usage_by_label", UsageQuery, list[LabelUsage], access=Access.ADMIN_READ,
    touches=lambda q: (), positional=0, one_statement=True,
    narrow=lambda q, scope: msgspec.structs.replace(q, labels=within(scope, q.labels or {})),
)  # fmt: skip

LIST_DERIVED_COPIES: Operation[SessionRef, list[DerivedCopy]] = Operation(
    "list_derived_copies", SessionRef, list[DerivedCopy], access=Access.ADMIN_READ,
    touches=lambda q: (_session(q.session_id),), one_statement=True,
)  # fmt: skip

OPERATIONS: tuple[Operation[Any, Any], ...] = (
    START_ROOT_RUN,
    START_CHILD_RUN,
    START_ONE_SHOT_RUN,
    START_ONE_SHOT_CHILD_RUN,
    APPEND_RUN_RECORD,
    APPEND_RUN_RECORDS,
    APPEND_TURN_RECORDS,
    RECORD_RUN_CANCELLATION,
    RECORD_RUN_SUSPENSION,
    RECORD_RUN_TERMINAL,
    REPAIR_RUN_SUSPENSION,
    REPAIR_RUN_TERMINAL,
    SAVE_TOOL_RESULT,
    LOAD_TOOL_RESULT,
    LOAD_RUN,
    LOAD_SESSION_STATUS,
    LOAD_RUN_SUSPENSION,
    LIST_RUN_RECORDS,
    LOAD_TRANSCRIPT_CHAIN,
    LIST_SESSION_RUN_RECORDS,
    SUBMIT_MESSAGE,
    LOAD_PENDING_MESSAGES,
    LIST_SESSION_MESSAGES,
    LOAD_SESSION_USAGE,
    LOAD_RUN_USAGE,
    SEARCH,
    CREATE_SESSION,
    LOAD_SESSION,
    END_SESSION,
    PURGE_SESSION,
    IMPORT_SESSION,
    LIST_RUNS_BY_SESSION,
    LIST_SESSIONS,
    USAGE_BY_LABEL,
    LIST_DERIVED_COPIES,
)
"""Every operation of ``Store`` and ``SessionAdmin``, in protocol order."""

# ---------------------------------------------------------------- methods
# Each public method, written once: its arguments as the operation's request.


class StoreOperations:
    """The ``Store`` methods, each ``self.perform(op, request)``; subclasses give ``perform``."""

    __slots__ = ()

    def perform(self, op: Operation[Req, Resp], request: Req, /) -> Coroutine[Any, Any, Resp]:
        """Run one operation of :data:`OPERATIONS` on ``request`` (its checked arguments)."""
        raise NotImplementedError

    def start_root_run(self, cmd: RootRunStart, /) -> Coroutine[Any, Any, StartResult]:
        """[L1] Save a root run and its ``run_started`` (or [C2] stop) together."""
        return self.perform(START_ROOT_RUN, cmd)

    def start_child_run(self, cmd: ChildRunStart, /) -> Coroutine[Any, Any, StartResult]:
        """[L2] Save the parent link, the child run and its ``run_started`` together."""
        return self.perform(START_CHILD_RUN, cmd)

    def start_one_shot_run(self, cmd: OneShotRunStart, /) -> Coroutine[Any, Any, StartResult]:
        """[L3] Save a run with no session and its ``run_started``."""
        return self.perform(START_ONE_SHOT_RUN, cmd)

    def start_one_shot_child_run(
        self, cmd: OneShotChildRunStart, /
    ) -> Coroutine[Any, Any, StartResult]:
        """[L4] Save the link and start of a sessionless child together."""
        return self.perform(START_ONE_SHOT_CHILD_RUN, cmd)

    def append_run_record(self, record: Record, /) -> Coroutine[Any, Any, AppendResult]:
        """[L8] Append an ordinary record to a running run's log."""
        return self.perform(APPEND_RUN_RECORD, record)

    def append_run_records(
        self, records: Sequence[Record], /
    ) -> Coroutine[Any, Any, list[AppendResult]]:
        """[B1] Append ordinary records of one run, in order, in one transaction."""
        return self.perform(APPEND_RUN_RECORDS, RecordBatch(records=cast(list[Record], records)))

    def append_turn_records(self, records: Sequence[Record], /) -> Coroutine[Any, Any, TurnAppend]:
        """A planner turn's first write: append ``records`` as ``append_run_records`` does and,
        in the same transaction, take the steering messages waiting for the run (each
        becomes a user message in its log, with its provenance, and no longer waits)."""
        return self.perform(APPEND_TURN_RECORDS, RecordBatch(records=cast(list[Record], records)))

    def record_run_cancellation(self, cmd: RunCancellation, /) -> Coroutine[Any, Any, AppendResult]:
        """[L5] Save the first cancellation reason and its intent record."""
        return self.perform(RECORD_RUN_CANCELLATION, cmd)

    def record_run_suspension(self, cmd: RunSuspension, /) -> Coroutine[Any, Any, AppendResult]:
        """[L6] Save the checkpoint, ``suspended`` status and ``run_suspended`` record."""
        return self.perform(RECORD_RUN_SUSPENSION, cmd)

    def record_run_terminal(self, cmd: RunTerminal, /) -> Coroutine[Any, Any, AppendResult]:
        """[L7] Save the final status and its ``run_completed`` record."""
        return self.perform(RECORD_RUN_TERMINAL, cmd)

    def repair_run_suspension(self, cmd: RunSuspension, /) -> Coroutine[Any, Any, RepairResult]:
        """[E1] Store a missing suspension only while the run is still running."""
        return self.perform(REPAIR_RUN_SUSPENSION, cmd)

    def repair_run_terminal(self, cmd: RunTerminal, /) -> Coroutine[Any, Any, RepairResult]:
        """[E1] Store a missing terminal only while the run is still running."""
        return self.perform(REPAIR_RUN_TERMINAL, cmd)

    def save_tool_result(
        self, run_id: str, call_key: str, data: bytes, /
    ) -> Coroutine[Any, Any, bytes]:
        """Save a running run's tool call result unless one is saved; return the kept bytes."""
        request = ToolResultSave(run_id=run_id, call_key=call_key, data=data)
        return self.perform(SAVE_TOOL_RESULT, request)

    def load_tool_result(self, run_id: str, call_key: str, /) -> Coroutine[Any, Any, bytes | None]:
        """The result ``save_tool_result`` kept for this call of a running run, or None."""
        return self.perform(LOAD_TOOL_RESULT, ToolResultRef(run_id=run_id, call_key=call_key))

    def load_run(self, run_id: str, /) -> Coroutine[Any, Any, RunMeta]:
        """The run's current meta."""
        return self.perform(LOAD_RUN, RunRef(run_id=run_id))

    def load_session_status(self, session_id: str, /) -> Coroutine[Any, Any, SessionStatus]:
        """Whether the session still accepts new work."""
        return self.perform(LOAD_SESSION_STATUS, SessionRef(session_id=session_id))

    def load_run_suspension(self, run_id: str, /) -> Coroutine[Any, Any, Checkpoint]:
        """The checkpoint a suspended run stored."""
        return self.perform(LOAD_RUN_SUSPENSION, RunRef(run_id=run_id))

    def list_run_records(
        self, run_id: str, /, cursor: str = "", limit: int = DEFAULT_PAGE_LIMIT
    ) -> Coroutine[Any, Any, Page]:
        """[L9] One page of a run's records in commit order."""
        query = RunPageQuery(run_id=run_id, cursor=cursor, limit=limit)
        return self.perform(LIST_RUN_RECORDS, query)

    def load_transcript_chain(
        self, run_id: str, /, *, windowed: bool = False
    ) -> Coroutine[Any, Any, tuple[TranscriptSegment, ...]]:
        """[V4] The transcript records of ``run_id`` and of each run its history reaches."""
        return self.perform(LOAD_TRANSCRIPT_CHAIN, ChainQuery(run_id=run_id, windowed=windowed))

    def list_session_run_records(
        self, session_id: str, /, cursor: str = "", limit: int = DEFAULT_PAGE_LIMIT
    ) -> Coroutine[Any, Any, Page]:
        """[L9] One page of a session's records, its runs interleaved as committed."""
        query = SessionPageQuery(session_id=session_id, cursor=cursor, limit=limit)
        return self.perform(LIST_SESSION_RUN_RECORDS, query)

    def submit_message(self, sub: MessageSubmission, /) -> Coroutine[Any, Any, SessionMessage]:
        """Keep a message in its session's order and decide its fate (a message while the
        session is busy); an exact retry returns the stored message."""
        return self.perform(SUBMIT_MESSAGE, sub)

    def load_pending_messages(
        self, session_id: str, /
    ) -> Coroutine[Any, Any, list[SessionMessage]]:
        """The session's messages whose turn has not started, in arrival order."""
        return self.perform(LOAD_PENDING_MESSAGES, SessionRef(session_id=session_id))

    def list_session_messages(
        self, session_id: str, /
    ) -> Coroutine[Any, Any, list[SessionMessage]]:
        """Every message submitted to the session, in arrival order, with its fate."""
        return self.perform(LIST_SESSION_MESSAGES, SessionRef(session_id=session_id))

    def load_session_usage(self, session_id: str, /) -> Coroutine[Any, Any, UsageTotals]:
        """[G3] The session's bytes, records, runs and tokens, kept as its records were written."""
        return self.perform(LOAD_SESSION_USAGE, SessionRef(session_id=session_id))

    def load_run_usage(self, run_id: str, /) -> Coroutine[Any, Any, UsageTotals]:
        """[G3] The run's bytes, records and tokens (``runs`` is 1), kept as written."""
        return self.perform(LOAD_RUN_USAGE, RunRef(run_id=run_id))

    def search(
        self,
        text: str,
        /,
        *,
        labels: Mapping[str, str] | None = None,
        session_id: str | None = None,
        limit: int = DEFAULT_SEARCH_LIMIT,
        cursor: str | None = None,
    ) -> Coroutine[Any, Any, SearchPage]:
        """[G1] One page of the messages holding every word of ``text``, newest first,
        within the sessions carrying ``labels`` (or the one ``session_id``)."""
        request = SearchRequest(
            text=text,
            labels=cast(dict[str, str], labels),
            session_id=session_id or "",
            limit=limit,
            cursor=cursor or "",
        )
        return self.perform(SEARCH, request)


class AdminOperations(StoreOperations):
    """The ``Store`` and ``SessionAdmin`` methods, each ``self.perform(op, request)``."""

    __slots__ = ()

    def create_session(
        self,
        session_id: str,
        /,
        created_at: datetime | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Coroutine[Any, Any, Session]:
        """[D4] [D6] Create a session with fixed labels; an exact retry returns it unchanged."""
        request = SessionCreate(
            session_id=session_id, created_at=created_at, labels=cast(dict[str, str], labels)
        )
        return self.perform(CREATE_SESSION, request)

    def load_session(self, session_id: str, /) -> Coroutine[Any, Any, Session]:
        """The session as stored."""
        return self.perform(LOAD_SESSION, SessionRef(session_id=session_id))

    def end_session(self, session_id: str, /, ended_at: datetime) -> Coroutine[Any, Any, Session]:
        """[D2] Stop new work in the session; idempotent."""
        return self.perform(END_SESSION, SessionEnd(session_id=session_id, ended_at=ended_at))

    def purge_session(
        self, session_id: str, /, expected_digest: str = "", cascade: bool = False
    ) -> Coroutine[Any, Any, PurgeReceipt]:
        """[D3] [D7] Delete an ended session with no running run, leaving a tombstone; with
        ``cascade`` [G2] also the sessions holding copies of its history, in one transaction."""
        request = SessionPurge(
            session_id=session_id, expected_digest=expected_digest, cascade=cascade
        )
        return self.perform(PURGE_SESSION, request)

    def import_session(self, image: SessionImage, /) -> Coroutine[Any, Any, None]:
        """[A1] Write an ended session exactly as imaged (a restore), in one transaction."""
        return self.perform(IMPORT_SESSION, image)

    def list_runs_by_session(
        self, session_id: str, /, statuses: Iterable[RunStatus] = ()
    ) -> Coroutine[Any, Any, list[RunMeta]]:
        """The session's runs in start order, optionally only those with these statuses."""
        query = RunsBySessionQuery(session_id=session_id, statuses=cast(list[str], statuses))
        return self.perform(LIST_RUNS_BY_SESSION, query)

    def list_sessions(
        self,
        statuses: Iterable[SessionStatus] = (),
        labels: Mapping[str, str] | None = None,
        cursor: str = "",
        limit: int = DEFAULT_PAGE_LIMIT,
    ) -> Coroutine[Any, Any, SessionPage]:
        """[D6] One page of sessions, newest first (``created_at``, then id, descending)."""
        query = SessionsQuery(
            statuses=cast(list[str], statuses),
            labels=cast(dict[str, str], labels),
            cursor=cursor,
            limit=limit,
        )
        return self.perform(LIST_SESSIONS, query)

    def usage_by_label(
        self, key: str = "", labels: Mapping[str, str] | None = None
    ) -> Coroutine[Any, Any, list[LabelUsage]]:
        """[G3] UsageTotals totals of the sessions carrying ``labels``, one per value of label
        ``key`` (sessions without it are left out), by value; one total when ``key`` is ""."""
        query = UsageQuery(key=key, labels=cast(dict[str, str], labels))
        return self.perform(USAGE_BY_LABEL, query)

    def list_derived_copies(self, session_id: str, /) -> Coroutine[Any, Any, list[DerivedCopy]]:
        """[G2] The copies of the session's history held in other sessions (a fork's copied
        transcript), each naming the run holding it and what it copied; also after a purge."""
        return self.perform(LIST_DERIVED_COPIES, SessionRef(session_id=session_id))
