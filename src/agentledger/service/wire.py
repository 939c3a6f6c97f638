"""The protocol on the wire: one :class:`Method` per store operation [S2].

Each :class:`Method` names its route (``POST /v1/<name>``), the msgspec type
of its request body and of its response, the roles that may call it [S4],
the sessions or runs its label scope is checked against, and how the
service turns a decoded request into the backend call. Every one of them is
derived from an entry of :data:`agentledger.storage.operations.OPERATIONS`
(the request structs are the table's), plus the two archive methods, which
only the service offers. The app, the client and the OpenAPI document are all
built from :data:`METHODS`, so a new store operation needs nothing here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from enum import StrEnum
from typing import Any, Generic, TypeVar

import msgspec

from agentledger.errors import ValidationError
from agentledger.storage.archive import (
    ArchiveManifest,
    archive_bytes,
    read_manifest,
    restore_archive_bytes,
)
from agentledger.storage.operations import OPERATIONS, Access, Operation, Touch, within
from agentledger.storage.protocol import AdminStore
from agentledger.storage.requests import (
    ChainQuery,
    RecordBatch,
    RunPageQuery,
    RunRef,
    RunsBySessionQuery,
    SessionCreate,
    SessionEnd,
    SessionPageQuery,
    SessionPurge,
    SessionRef,
    SessionsQuery,
    ToolResultRef,
    ToolResultSave,
)
from agentledger.storage.state import StateReader
from agentledger.storage.validation import DEFAULT_LIMITS, SizeLimits

__all__ = [
    "CALLS_ROUTE",
    "FRAMES",
    "FRAME_HEADER",
    "MAX_CALLS",
    "MAX_ENTRIES",
    "METHODS",
    "STORE_METHODS",
    "ArchiveFile",
    "ChainQuery",
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
    "decode_frame",
    "decode_group",
    "encode_frame",
    "encode_group",
    "frame_size",
    "method_named",
    "within",
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


def _subjects(touched: tuple[Touch, ...]) -> tuple[Subject, ...]:
    """The scope subjects of what an operation touches (its records are its runs')."""
    return tuple(
        Subject(t.kind, t.id, dict(t.labels), t.new) for t in touched if t.kind != "record"
    )


def _imported(labels: dict[str, str], session_id: str, run_ids: Any) -> tuple[Subject, ...]:
    """An import's subjects: the session's labels, its id and every run id it would create."""
    return (
        Subject("labels", labels=labels),
        Subject("session", session_id, new=True),
        *(Subject("run", r, new=True) for r in run_ids),
    )


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


CALLS_ROUTE = "/v1/calls"
"""Several store calls in one request (see :mod:`agentledger.service.batch`)."""
MAX_CALLS = 64
"""The most calls one ``POST /v1/calls`` may carry."""
FRAMES = "application/vnd.agentledger.frames"
"""The media type of ``POST /v1/calls`` answers streamed as frames, as each call is answered."""
FRAME_HEADER = 4
"""Bytes of a frame's length, which comes before it (big-endian)."""

_GROUP = msgspec.json.Decoder(list[tuple[str, msgspec.Raw]])
_FRAME_ENCODER = msgspec.msgpack.Encoder()
_FRAME = msgspec.msgpack.Decoder(tuple[int, int, bytes])


def encode_group(calls: Iterable[tuple[str, bytes]]) -> bytes:
    """The body of a ``POST /v1/calls``: a JSON array of ``[method name, request]`` pairs,
    each request the JSON its method takes alone."""
    return b"[" + b",".join(b'["%s",%s]' % (name.encode(), body) for name, body in calls) + b"]"


def decode_group(body: bytes) -> list[tuple[str, msgspec.Raw]]:
    """The ``[name, request]`` pairs of a ``POST /v1/calls`` body, at most :data:`MAX_CALLS`.

    Raises:
        ValidationError: not such an array, or too many calls.
    """
    try:
        calls = _GROUP.decode(body)
    except msgspec.DecodeError as e:
        raise ValidationError(
            field="body",
            expected="a JSON array of [store method name, request] pairs",
            got=str(e),
        ) from None
    if len(calls) > MAX_CALLS:
        raise ValidationError(
            field="body",
            expected=f"at most {MAX_CALLS} calls in one request (this service's limit)",
            got=f"{len(calls)} calls",
        )
    return calls


def encode_frame(index: int, status: int, answer: bytes) -> bytes:
    """One answer of a stream of frames: its length (:data:`FRAME_HEADER` bytes), then the
    MessagePack array ``[index of the call, HTTP status, answer]``."""
    frame = _FRAME_ENCODER.encode((index, status, answer))
    return len(frame).to_bytes(FRAME_HEADER, "big") + frame


def frame_size(header: bytes) -> int:
    """The length of the frame whose :data:`FRAME_HEADER` bytes are ``header``."""
    return int.from_bytes(header, "big")


def decode_frame(frame: bytes) -> tuple[int, int, bytes]:
    """``(index of the call, HTTP status, answer)`` of one frame (after its length).

    Raises:
        msgspec.DecodeError: not a frame of this protocol.
    """
    return _FRAME.decode(frame)


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


_ROLES = {
    Access.WRITE: WORKERS,
    Access.SCRATCH: WORKERS,
    Access.READ: STORE_READERS,
    Access.ADMIN: HOSTS,
    Access.ADMIN_READ: ADMIN_READERS,
}


def _method(op: Operation[Req, Resp]) -> Method[Req, Resp]:
    """The wire's view of one store operation: its roles, its scope subjects, its call."""
    touches = op.touches
    return Method(
        op.name,
        op.request,
        op.response,
        roles=_ROLES[op.access],
        writes=op.writes,
        subjects=lambda request: _subjects(touches(request)),
        call=op.invoke,
        prefix=op.prefix,
        narrow=op.narrow,
        plan=op.plan,
    )


STORE_METHODS: dict[Operation[Any, Any], Method[Any, Any]] = {op: _method(op) for op in OPERATIONS}
"""The method of each store operation, by operation (what ``StoreClient`` sends)."""

# -------------------------------------------------------------- archives

EXPORT_ARCHIVE: Method[SessionRef, ArchiveFile] = Method(
    "export_archive", SessionRef, ArchiveFile, roles=ADMIN_READERS, writes=False,
    subjects=lambda q: (Subject("session", q.session_id),),
    call=lambda s, q: _export_archive(s, q.session_id),
)  # fmt: skip
IMPORT_ARCHIVE: Method[ArchiveFile, ArchiveManifest] = Method(
    "import_archive", ArchiveFile, ArchiveManifest, roles=HOSTS, writes=True,
    subjects=_archived,
    call=_restore,
)  # fmt: skip


async def _export_archive(store: AdminStore, session_id: str) -> ArchiveFile:
    return ArchiveFile(data=await archive_bytes(store, session_id))


METHODS: tuple[Method[Any, Any], ...] = (*STORE_METHODS.values(), EXPORT_ARCHIVE, IMPORT_ARCHIVE)
"""Every route of the service: the store operations, then the archives."""

_BY_NAME: dict[str, Method[Any, Any]] = {m.name: m for m in METHODS}


def method_named(name: str) -> Method[Any, Any]:
    """The store method called ``name`` (what a group's or a frame's call names).

    Raises:
        ValidationError: no store method has that name.
    """
    method = _BY_NAME.get(name)
    if method is None:
        raise ValidationError(field="method", expected="the name of a store method",
                              got=name[:100])  # fmt: skip
    return method
