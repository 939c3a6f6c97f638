"""The protocol on the wire: one declaration per store method [S2].

Each :class:`Method` names its route (``POST /v1/<name>``), the msgspec type
of its request body and of its response, the roles that may call it [S4],
the sessions or runs its label scope is checked against, and how the
service turns a decoded request into the backend call. The app, the client
and the OpenAPI document are all built from :data:`METHODS`, so adding a
method is one entry here and one line in the client.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

import msgspec

from agentledger.errors import AccessDeniedError, ValidationError
from agentledger.storage import lifecycle, payloads
from agentledger.storage.archive import (
    ArchiveManifest,
    archive_bytes,
    read_manifest,
    restore_archive_bytes,
)
from agentledger.storage.protocol import DEFAULT_PAGE_LIMIT, AdminStore
from agentledger.storage.session_image import SessionImage
from agentledger.storage.session_import import plan_import_session
from agentledger.storage.state import StateReader
from agentledger.storage.types import (
    AppendResult,
    Checkpoint,
    ChildRunStart,
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
    RunSuspension,
    RunTerminal,
    Session,
    SessionPage,
    SessionStatus,
    StartResult,
    TranscriptSegment,
)
from agentledger.storage.validation import DEFAULT_LIMITS, SizeLimits

__all__ = [
    "MAX_ENTRIES",
    "METHODS",
    "ArchiveFile",
    "Method",
    "RecordBatch",
    "Role",
    "RunPageQuery",
    "RunRef",
    "RunsBySessionQuery",
    "SessionCreate",
    "SessionEnd",
    "SessionPageQuery",
    "SessionPurge",
    "SessionRef",
    "SessionsQuery",
    "Subject",
    "ToolResultRef",
    "ToolResultSave",
    "body_cap",
    "check_entries",
]

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class Role(StrEnum):
    """What a token may do [S4]."""

    WORKER = "worker"  # the Store methods
    HOST = "host"  # Store and SessionAdmin
    READER = "reader"  # loads and listings only


WORKERS = frozenset({Role.WORKER, Role.HOST})
HOSTS = frozenset({Role.HOST})
STORE_READERS = frozenset({Role.WORKER, Role.HOST, Role.READER})
ADMIN_READERS = frozenset({Role.HOST, Role.READER})


class RunRef(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Names one run."""

    run_id: str


class ChainQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Names one run's transcript chain: whole, or ``windowed`` to the model input's start."""

    run_id: str
    windowed: bool = False


class RecordBatch(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """[B1] Ordinary records of one run, in order, stored all or none."""

    records: list[Record]


class ToolResultSave(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Save a tool call's result unless one is saved (the first save wins)."""

    run_id: str
    call_key: str
    data: bytes


class ToolResultRef(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Names one tool call's saved result."""

    run_id: str
    call_key: str


class SessionRef(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Names one session."""

    session_id: str


class SessionPurge(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Purge a session [D7], only if its digest is ``expected_digest`` when one is given [A1]."""

    session_id: str
    expected_digest: str = ""


class RunPageQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One page of a run's records [L9]."""

    run_id: str
    cursor: str = ""
    limit: int = DEFAULT_PAGE_LIMIT


class SessionPageQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One page of a session's records [L9]."""

    session_id: str
    cursor: str = ""
    limit: int = DEFAULT_PAGE_LIMIT


class SessionCreate(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Create a session with its fixed labels [D4] [D6]; no ``created_at``: the store's clock."""

    session_id: str
    created_at: datetime | None = None
    labels: dict[str, str] | None = None


class SessionEnd(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """End a session [D2]."""

    session_id: str
    ended_at: datetime


# Status filters travel as strings: the store, not the wire, refuses unknown ones.
class RunsBySessionQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A session's runs, optionally only those with these statuses."""

    session_id: str
    statuses: list[str] | str = msgspec.field(default_factory=list)


class SessionsQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One page of sessions, newest first, filtered by statuses and labels [D6]."""

    statuses: list[str] | str = msgspec.field(default_factory=list)
    labels: dict[str, str] | None = None
    cursor: str = ""
    limit: int = DEFAULT_PAGE_LIMIT


class ArchiveFile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An archive file's bytes [A1], made or restored by the service, which holds the keys [A2]."""

    data: bytes


class Subject(msgspec.Struct, frozen=True):
    """What a label-scoped token must be allowed to touch for a call to proceed [S4].

    ``kind`` is ``"session"`` or ``"run"``, named by ``id``: an existing row
    the call reads, writes, continues or links (``new`` False), or an id the
    call would create (``new`` True); or ``"labels"``: what something being
    created would carry.
    """

    kind: str
    id: str = ""
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    new: bool = False


def _session(session_id: str) -> Subject:
    return Subject("session", session_id)


def _run(run_id: str) -> Subject:
    return Subject("run", run_id)


def _new_session(session_id: str) -> Subject:
    return Subject("session", session_id, new=True)


def _new_run(run_id: str) -> Subject:
    return Subject("run", run_id, new=True)


def _labels(labels: dict[str, str]) -> Subject:
    return Subject("labels", labels=labels)


def _start(run: RunStart, *named: Subject, records: Sequence[Record] = ()) -> tuple[Subject, ...]:
    """A start's subjects: its labels or session, its parent, its predecessor, the run its
    history references, its new id."""
    sources = []
    for record in records:
        if record.type == payloads.TRANSCRIPT_REFERENCED:
            with contextlib.suppress(ValidationError):  # the store refuses it, unscoped
                sources.append(_run(payloads.TranscriptReference.decode(record.payload).run_id))
    return (*named, _run(run.predecessor_run_id), *sources, _new_run(run.run_id))


def _imported(labels: dict[str, str], session_id: str, run_ids: Any) -> tuple[Subject, ...]:
    """An import's subjects: the session's labels, its id and every run id it would create."""
    return (_labels(labels), _new_session(session_id), *(_new_run(r) for r in run_ids))


def _archived(archive: ArchiveFile) -> tuple[Subject, ...]:
    """The subjects of an archive, from its manifest (a damaged file is refused)."""
    manifest = read_manifest(archive.data, "the archive sent")
    return _imported(manifest.labels, manifest.session_id, manifest.run_digests)


def body_cap(limits: SizeLimits) -> int:
    """The largest request body the service reads: a suspension at the store's caps.

    Bytes travel as base64 (4 bytes per 3), plus 1 MiB for everything else; a batch
    whose records together pass it is refused whole, as a ValidationError. An
    archive sent to the service may inflate to this much at most, whatever its
    manifest claims: no request makes the service hold more than its own caps.
    """
    largest = limits.max_checkpoint_bytes + limits.max_payload_bytes
    return 4 * -(-largest // 3) + 1024 * 1024


MAX_ENTRIES = 100_000
"""The most records and runs one request may carry (a batch, a start, an import): each
decoded record costs far more memory than its bytes on the wire."""

_LARGE_BODY = 1024 * 1024
"""Bodies past this size are counted before they are decoded."""


class _Carried(msgspec.Struct, frozen=True, kw_only=True):
    """A body's records and runs as raw spans: counted before any is decoded."""

    records: list[msgspec.Raw] = msgspec.field(default_factory=list)
    runs: list[msgspec.Raw] = msgspec.field(default_factory=list)


_CARRIED = msgspec.json.Decoder(_Carried)


def _too_many(count: int, operation: str) -> ValidationError:
    return ValidationError(
        field="records",
        expected=f"at most {MAX_ENTRIES} records and runs in one {operation} request "
        "(this service's limit)",
        got=f"{count} records and runs",
    )


def check_entries(body: bytes, operation: str) -> None:
    """Refuse a large body carrying more than :data:`MAX_ENTRIES` records and runs.

    Raises:
        ValidationError: too many; a body that is not even JSON is left to the decoder.
    """
    if len(body) <= _LARGE_BODY:
        return  # decoding a small body costs little whatever it holds
    try:
        carried = _CARRIED.decode(body)
    except msgspec.DecodeError:
        return
    count = len(carried.records) + len(carried.runs)
    if count > MAX_ENTRIES:
        raise _too_many(count, operation)


async def _restore(store: AdminStore, archive: ArchiveFile) -> ArchiveManifest:
    """Restore an archive sent to the service within its caps: the body cap inflated, at
    most :data:`MAX_ENTRIES` records and runs (counted before any is built)."""
    manifest = read_manifest(archive.data, "the archive sent")
    if manifest.records + manifest.runs > MAX_ENTRIES:
        raise _too_many(manifest.records + manifest.runs, "import_archive")
    cap = body_cap(getattr(store, "limits", DEFAULT_LIMITS))
    return await restore_archive_bytes(
        store, archive.data, "the archive sent", max_inflated_bytes=cap
    )


def within(scope: dict[str, str], labels: dict[str, str]) -> dict[str, str]:
    """A label filter narrowed to a token's scope.

    Raises:
        AccessDeniedError: (403) the filter asks for labels outside the scope.
    """
    clash = {k: v for k, v in labels.items() if k in scope and scope[k] != v}
    if clash:
        raise AccessDeniedError(
            operation="list_sessions",
            status=403,
            reason=f"labels {clash} are outside the token's scope {scope}",
        )
    return {**labels, **scope}


class Method(Generic[Req, Resp]):
    """One store method on the wire.

    Attributes:
        name: the protocol method's name; the route is ``POST /v1/<name>``.
        request: the msgspec type of the request body.
        response: the msgspec type of the response body.
        roles: the roles allowed to call it.
        writes: whether it may change the store (followers are woken after it).
        subjects: what a label-scoped token must be allowed to touch.
        call: the backend call for a decoded request.
        prefix: the backend's name for the body in error fields (``"record"``), if any.
        narrow: for a listing, the request a label-scoped token may make instead.
        plan: for a write, the store's own decision of it (a ``lifecycle`` plan),
            which the scope check runs without stored state first, so a call the
            store would refuse as given is refused the same way whatever its ids name.
    """

    __slots__ = (
        "call",
        "decoder",
        "name",
        "narrow",
        "plan",
        "prefix",
        "request",
        "response",
        "response_decoder",
        "response_msgpack_decoder",
        "roles",
        "route",
        "subjects",
        "writes",
    )

    def __init__(
        self,
        name: str,
        request: type[Req],
        response: Any,
        *,
        roles: frozenset[Role],
        writes: bool,
        subjects: Callable[[Req], tuple[Subject, ...]],
        call: Callable[[Any, Req], Awaitable[Resp]],
        prefix: str = "",
        narrow: Callable[[Req, dict[str, str]], Req] | None = None,
        plan: Callable[[StateReader, Req, SizeLimits], object] | None = None,
    ) -> None:
        self.name = name
        self.route = f"/v1/{name}"
        self.request = request
        self.response: Any = response
        self.roles = roles
        self.writes = writes
        self.subjects = subjects
        self.call = call
        self.prefix = prefix
        self.narrow = narrow
        self.plan = plan
        self.decoder: msgspec.json.Decoder[Req] = msgspec.json.Decoder(request)
        self.response_decoder: msgspec.json.Decoder[Resp] = msgspec.json.Decoder(response)
        self.response_msgpack_decoder: msgspec.msgpack.Decoder[Resp] = msgspec.msgpack.Decoder(
            response
        )


# ------------------------------------------------------------------ Store

START_ROOT_RUN: Method[RootRunStart, StartResult] = Method(
    "start_root_run", RootRunStart, StartResult, roles=WORKERS, writes=True,
    subjects=lambda c: _start(c.run, _session(c.run.session_id), records=c.records),
    call=lambda s, c: s.start_root_run(c),
    plan=lambda r, c, limits: lifecycle.plan_root_start(r, c, limits=limits),
)  # fmt: skip
START_CHILD_RUN: Method[ChildRunStart, StartResult] = Method(
    "start_child_run", ChildRunStart, StartResult, roles=WORKERS, writes=True,
    subjects=lambda c: _start(
        c.run, _session(c.run.session_id), _run(c.run.parent_run_id), records=c.records),
    call=lambda s, c: s.start_child_run(c),
    plan=lambda r, c, limits: lifecycle.plan_child_start(r, c, limits=limits),
)  # fmt: skip
START_ONE_SHOT_RUN: Method[OneShotRunStart, StartResult] = Method(
    "start_one_shot_run", OneShotRunStart, StartResult, roles=WORKERS, writes=True,
    subjects=lambda c: _start(c.run, _labels(c.run.labels)),
    call=lambda s, c: s.start_one_shot_run(c),
    plan=lambda r, c, limits: lifecycle.plan_one_shot_start(r, c, limits=limits),
)  # fmt: skip
START_ONE_SHOT_CHILD_RUN: Method[OneShotChildRunStart, StartResult] = Method(
    "start_one_shot_child_run", OneShotChildRunStart, StartResult, roles=WORKERS, writes=True,
    subjects=lambda c: _start(c.run, _labels(c.run.labels), _run(c.run.parent_run_id)),
    call=lambda s, c: s.start_one_shot_child_run(c),
    plan=lambda r, c, limits: lifecycle.plan_one_shot_child_start(r, c, limits=limits),
)  # fmt: skip
APPEND_RUN_RECORD: Method[Record, AppendResult] = Method(
    "append_run_record", Record, AppendResult, roles=WORKERS, writes=True,
    subjects=lambda r: (_run(r.run_id),),
    call=lambda s, r: s.append_run_record(r), prefix="record",
    plan=lambda r, c, limits: lifecycle.plan_append(r, c, limits=limits),
)  # fmt: skip
APPEND_RUN_RECORDS: Method[RecordBatch, list[AppendResult]] = Method(
    "append_run_records", RecordBatch, list[AppendResult], roles=WORKERS, writes=True,
    subjects=lambda b: tuple(_run(run_id) for run_id in dict.fromkeys(r.run_id for r in b.records)),
    call=lambda s, b: s.append_run_records(b.records),
    plan=lambda r, b, limits: lifecycle.plan_append_batch(r, b.records, limits=limits),
)  # fmt: skip
RECORD_RUN_CANCELLATION: Method[RunCancellation, AppendResult] = Method(
    "record_run_cancellation", RunCancellation, AppendResult, roles=WORKERS, writes=True,
    subjects=lambda c: (_run(c.run_id),),
    call=lambda s, c: s.record_run_cancellation(c),
    plan=lambda r, c, limits: lifecycle.plan_cancellation(r, c, limits=limits),
)  # fmt: skip
RECORD_RUN_SUSPENSION: Method[RunSuspension, AppendResult] = Method(
    "record_run_suspension", RunSuspension, AppendResult, roles=WORKERS, writes=True,
    subjects=lambda c: (_run(c.run_id),),
    call=lambda s, c: s.record_run_suspension(c),
    plan=lambda r, c, limits: lifecycle.plan_suspension(r, c, limits=limits),
)  # fmt: skip
RECORD_RUN_TERMINAL: Method[RunTerminal, AppendResult] = Method(
    "record_run_terminal", RunTerminal, AppendResult, roles=WORKERS, writes=True,
    subjects=lambda c: (_run(c.run_id),),
    call=lambda s, c: s.record_run_terminal(c),
    plan=lambda r, c, limits: lifecycle.plan_terminal(r, c, limits=limits),
)  # fmt: skip
REPAIR_RUN_SUSPENSION: Method[RunSuspension, RepairResult] = Method(
    "repair_run_suspension", RunSuspension, RepairResult, roles=WORKERS, writes=True,
    subjects=lambda c: (_run(c.run_id),),
    call=lambda s, c: s.repair_run_suspension(c),
    plan=lambda r, c, limits: lifecycle.plan_repair_suspension(r, c, limits=limits),
)  # fmt: skip
REPAIR_RUN_TERMINAL: Method[RunTerminal, RepairResult] = Method(
    "repair_run_terminal", RunTerminal, RepairResult, roles=WORKERS, writes=True,
    subjects=lambda c: (_run(c.run_id),),
    call=lambda s, c: s.repair_run_terminal(c),
    plan=lambda r, c, limits: lifecycle.plan_repair_terminal(r, c, limits=limits),
)  # fmt: skip
SAVE_TOOL_RESULT: Method[ToolResultSave, bytes] = Method(
    "save_tool_result", ToolResultSave, bytes, roles=WORKERS, writes=True,
    subjects=lambda c: (_run(c.run_id),),
    call=lambda s, c: s.save_tool_result(c.run_id, c.call_key, c.data),
    plan=lambda r, c, limits: lifecycle.plan_save_tool_result(
        r, c.run_id, c.call_key, c.data, limits=limits),
)  # fmt: skip
LOAD_TOOL_RESULT: Method[ToolResultRef, bytes | None] = Method(
    "load_tool_result", ToolResultRef, bytes | None, roles=WORKERS, writes=False,
    subjects=lambda q: (_run(q.run_id),),
    call=lambda s, q: s.load_tool_result(q.run_id, q.call_key),
)  # fmt: skip
LOAD_RUN: Method[RunRef, RunMeta] = Method(
    "load_run", RunRef, RunMeta, roles=STORE_READERS, writes=False,
    subjects=lambda q: (_run(q.run_id),),
    call=lambda s, q: s.load_run(q.run_id),
)  # fmt: skip
LOAD_SESSION_STATUS: Method[SessionRef, SessionStatus] = Method(
    "load_session_status", SessionRef, SessionStatus, roles=STORE_READERS, writes=False,
    subjects=lambda q: (_session(q.session_id),),
    call=lambda s, q: s.load_session_status(q.session_id),
)  # fmt: skip
LOAD_RUN_SUSPENSION: Method[RunRef, Checkpoint] = Method(
    "load_run_suspension", RunRef, Checkpoint, roles=STORE_READERS, writes=False,
    subjects=lambda q: (_run(q.run_id),),
    call=lambda s, q: s.load_run_suspension(q.run_id),
)  # fmt: skip
LIST_RUN_RECORDS: Method[RunPageQuery, Page] = Method(
    "list_run_records", RunPageQuery, Page, roles=STORE_READERS, writes=False,
    subjects=lambda q: (_run(q.run_id),),
    call=lambda s, q: s.list_run_records(q.run_id, cursor=q.cursor, limit=q.limit),
)  # fmt: skip
LOAD_TRANSCRIPT_CHAIN: Method[ChainQuery, tuple[TranscriptSegment, ...]] = Method(
    "load_transcript_chain", ChainQuery, tuple[TranscriptSegment, ...], roles=STORE_READERS,
    writes=False,
    subjects=lambda q: (_run(q.run_id),),
    call=lambda s, q: s.load_transcript_chain(q.run_id, windowed=q.windowed),
)  # fmt: skip
LIST_SESSION_RUN_RECORDS: Method[SessionPageQuery, Page] = Method(
    "list_session_run_records", SessionPageQuery, Page, roles=STORE_READERS, writes=False,
    subjects=lambda q: (_session(q.session_id),),
    call=lambda s, q: s.list_session_run_records(q.session_id, cursor=q.cursor, limit=q.limit),
)  # fmt: skip

# ---------------------------------------------------------- SessionAdmin

CREATE_SESSION: Method[SessionCreate, Session] = Method(
    "create_session", SessionCreate, Session, roles=HOSTS, writes=True,
    subjects=lambda q: (_labels(q.labels or {}), _new_session(q.session_id)),
    call=lambda s, q: s.create_session(q.session_id, created_at=q.created_at, labels=q.labels),
    plan=lambda r, q, _: lifecycle.plan_create_session(r, q.session_id, q.created_at, q.labels),
)  # fmt: skip
LOAD_SESSION: Method[SessionRef, Session] = Method(
    "load_session", SessionRef, Session, roles=ADMIN_READERS, writes=False,
    subjects=lambda q: (_session(q.session_id),),
    call=lambda s, q: s.load_session(q.session_id),
)  # fmt: skip
END_SESSION: Method[SessionEnd, Session] = Method(
    "end_session", SessionEnd, Session, roles=HOSTS, writes=True,
    subjects=lambda q: (_session(q.session_id),),
    call=lambda s, q: s.end_session(q.session_id, ended_at=q.ended_at),
    plan=lambda r, q, _: lifecycle.plan_end_session(r, q.session_id, q.ended_at),
)  # fmt: skip
PURGE_SESSION: Method[SessionPurge, PurgeReceipt] = Method(
    "purge_session", SessionPurge, PurgeReceipt, roles=HOSTS, writes=True,
    subjects=lambda q: (_session(q.session_id),),
    call=lambda s, q: s.purge_session(q.session_id, q.expected_digest),
    plan=lambda r, q, _: lifecycle.plan_purge_session(r, q.session_id, q.expected_digest),
)  # fmt: skip
IMPORT_SESSION: Method[SessionImage, None] = Method(
    "import_session", SessionImage, None, roles=HOSTS, writes=True,
    subjects=lambda q: _imported(q.session.labels, q.session.id, (r.run_id for r in q.runs)),
    call=lambda s, q: s.import_session(q),
    plan=lambda r, q, limits: plan_import_session(r, q, limits=limits),
)  # fmt: skip
LIST_RUNS_BY_SESSION: Method[RunsBySessionQuery, list[RunMeta]] = Method(
    "list_runs_by_session", RunsBySessionQuery, list[RunMeta], roles=ADMIN_READERS,
    writes=False,
    subjects=lambda q: (_session(q.session_id),),
    call=lambda s, q: s.list_runs_by_session(q.session_id, statuses=q.statuses),
)  # fmt: skip
LIST_SESSIONS: Method[SessionsQuery, SessionPage] = Method(
    "list_sessions", SessionsQuery, SessionPage, roles=ADMIN_READERS, writes=False,
    subjects=lambda q: (), narrow=lambda q, scope: msgspec.structs.replace(
        q, labels=within(scope, q.labels or {})),
    call=lambda s, q: s.list_sessions(
        statuses=q.statuses, labels=q.labels, cursor=q.cursor, limit=q.limit),
)  # fmt: skip

# -------------------------------------------------------------- archives

EXPORT_ARCHIVE: Method[SessionRef, ArchiveFile] = Method(
    "export_archive", SessionRef, ArchiveFile, roles=ADMIN_READERS, writes=False,
    subjects=lambda q: (_session(q.session_id),),
    call=lambda s, q: _export_archive(s, q.session_id),
)  # fmt: skip
IMPORT_ARCHIVE: Method[ArchiveFile, ArchiveManifest] = Method(
    "import_archive", ArchiveFile, ArchiveManifest, roles=HOSTS, writes=True,
    subjects=_archived,
    call=_restore,
)  # fmt: skip


async def _export_archive(store: AdminStore, session_id: str) -> ArchiveFile:
    return ArchiveFile(data=await archive_bytes(store, session_id))


METHODS: tuple[Method[Any, Any], ...] = (
    START_ROOT_RUN,
    START_CHILD_RUN,
    START_ONE_SHOT_RUN,
    START_ONE_SHOT_CHILD_RUN,
    APPEND_RUN_RECORD,
    APPEND_RUN_RECORDS,
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
    CREATE_SESSION,
    LOAD_SESSION,
    END_SESSION,
    PURGE_SESSION,
    IMPORT_SESSION,
    LIST_RUNS_BY_SESSION,
    LIST_SESSIONS,
    EXPORT_ARCHIVE,
    IMPORT_ARCHIVE,
)
