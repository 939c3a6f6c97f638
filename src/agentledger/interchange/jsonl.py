"""The portable session format [G4]: one ended session as JSON Lines, written and read back.

A file in this format is, one JSON object a line (UTF-8, ``\\n`` after each)::

    {"format": "agentledger-session", "version": 1, "session": {...}, "runs": 2, ...}
    {"kind": "run", "run_id": "...", ...}            each run, in start order
    {"kind": "record", "run_id": "...", "id": "1", "payload": {...}, ...}
                                                     each record, in session order
    {"kind": "checkpoint", "run_id": "...", ...}     a suspended run's checkpoint
    {"kind": "message", "position": 1, ...}          each submitted message, in order

The header counts the lines of each kind, so a truncated file is refused. A
record's payload (always JSON) is embedded as it is stored, byte for byte
(``payload``), unless its bytes cannot sit verbatim on one line (a newline in
its whitespace, whitespace around it): then they are given as a JSON string
(``payload_text``). A submitted message's JSON is carried the same way
(``message`` or ``message_text``); checkpoint data, which is private bytes, is
standard base64. Times are RFC 3339 in UTC with ``Z``.

Export then import then export gives the same bytes: the file holds every field
of the session's image (see :mod:`agentledger.storage.session_image`) except
those the store derives (a record's session id is the header's, a run's last
record is its last record line). An import is checked like an archive's
restore: the whole session is verified, then written in one transaction, or
refused and nothing is written. The JSON Schema of a line is
:func:`session_schema` (``docs/agentledger-session.schema.json``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from agentledger.errors import (
    SessionActiveError,
    SessionConflictError,
    SessionHasActiveRunsError,
    ValidationError,
)
from agentledger.storage.session_image import (
    SessionImage,
    SessionImageSource,
    read_session_image,
    session_digest,
)
from agentledger.storage.types import (
    BusyPolicy,
    Checkpoint,
    MessageFate,
    Record,
    RunMeta,
    RunStatus,
    Session,
    SessionMessage,
    SessionStatus,
    StartOutcome,
)

if TYPE_CHECKING:
    from agentledger.storage.protocol import AdminStore

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "ImportOutcome",
    "SessionFileHeader",
    "decode_session",
    "encode_session",
    "export_session",
    "import_image",
    "import_session_file",
    "is_session_file",
    "session_schema",
]

FORMAT = "agentledger-session"
"""The ``format`` of a header line."""
FORMAT_VERSION = 1
"""The version this agentledger writes and reads."""

_UNSET: Any = msgspec.UNSET


class SessionFileHeader(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The first line: the format, its version, the session, and how many lines follow."""

    format: str
    """Always ``agentledger-session``."""
    version: int
    """The format version (1)."""
    session: Session
    """The session: id, status (``ended``), creation and end times, labels."""
    runs: int
    """How many ``run`` lines follow."""
    records: int
    """How many ``record`` lines follow."""
    checkpoints: int
    """How many ``checkpoint`` lines follow."""
    messages: int
    """How many ``message`` lines follow."""


class _Run(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag="run",
    tag_field="kind",
):
    run_id: str
    agent_id: str
    parent_run_id: str
    status: RunStatus
    start_outcome: StartOutcome
    started_at: datetime
    updated_at: datetime
    labels: dict[str, str]
    cancellation_reason: str
    successor_run_id: str


class _Record(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    omit_defaults=True,
    tag="record",
    tag_field="kind",
):
    run_id: str
    id: str
    agent_id: str
    turn_id: str
    event_key: str
    type: str
    timestamp: datetime
    payload: msgspec.Raw | msgspec.UnsetType = _UNSET
    payload_text: str | msgspec.UnsetType = _UNSET


class _Checkpoint(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag="checkpoint",
    tag_field="kind",
):
    run_id: str
    id: str
    data: bytes


class _Message(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    omit_defaults=True,
    tag="message",
    tag_field="kind",
):
    position: int
    run_id: str
    turn_id: str
    agent_id: str
    if_busy: BusyPolicy
    submitted_at: datetime
    requested_after: str
    labels: dict[str, str]
    fate: MessageFate
    after: str
    running_run_id: str
    started: bool
    message: msgspec.Raw | msgspec.UnsetType = _UNSET
    message_text: str | msgspec.UnsetType = _UNSET


_Line = _Run | _Record | _Checkpoint | _Message
_ENCODER = msgspec.json.Encoder()
_HEADER = msgspec.json.Decoder(SessionFileHeader)
_LINE: msgspec.json.Decoder[_Line] = msgspec.json.Decoder(_Line)
_KINDS = ("run", "record", "checkpoint", "message")
_SPACE = b" \t\r\n"


def _verbatim(data: bytes) -> bool:
    """Whether JSON ``data`` reads back byte for byte when embedded as a value on one line."""
    return bool(data) and b"\n" not in data and b"\r" not in data and data.strip(_SPACE) == data


def _json_or_text(data: bytes) -> tuple[Any, Any]:
    if _verbatim(data):
        return msgspec.Raw(data), _UNSET
    return _UNSET, data.decode("utf-8")


def encode_session(image: SessionImage) -> Iterator[bytes]:
    """The lines of the file for ``image``, each ending in ``\\n``.

    Raises:
        SessionActiveError: the session has not ended (only an ended one is whole).
        SessionHasActiveRunsError: a run is still running.
    """
    session = image.session
    if session.status is not SessionStatus.ENDED:
        raise SessionActiveError(session_id=session.id)
    running = [r.run_id for r in image.runs if r.status is RunStatus.RUNNING]
    if running:
        raise SessionHasActiveRunsError(session_id=session.id, run_ids=running)
    header = SessionFileHeader(
        format=FORMAT,
        version=FORMAT_VERSION,
        session=session,
        runs=len(image.runs),
        records=len(image.records),
        checkpoints=len(image.checkpoints),
        messages=len(image.messages),
    )
    yield _ENCODER.encode(header) + b"\n"
    for run in image.runs:
        fields = msgspec.structs.asdict(run)
        del fields["session_id"], fields["last_record_id"]
        yield _ENCODER.encode(_Run(**fields)) + b"\n"
    for record in image.records:
        payload, text = _json_or_text(record.payload)
        line = _Record(
            run_id=record.run_id,
            id=record.id,
            agent_id=record.agent_id,
            turn_id=record.turn_id,
            event_key=record.event_key,
            type=record.type,
            timestamp=record.timestamp,
            payload=payload,
            payload_text=text,
        )
        yield _ENCODER.encode(line) + b"\n"
    for run_id, checkpoint in image.checkpoints.items():
        yield _ENCODER.encode(_Checkpoint(run_id=run_id, id=checkpoint.id, data=checkpoint.data))
        yield b"\n"
    for message in image.messages:
        fields = msgspec.structs.asdict(message)
        del fields["session_id"]
        body, text = _json_or_text(fields.pop("message"))
        yield _ENCODER.encode(_Message(**fields, message=body, message_text=text)) + b"\n"


def _one_of(where: str, raw: Any, text: Any, name: str) -> bytes:
    """The bytes a line carries as ``name`` (JSON) or ``name_text`` (a string): exactly one."""
    if (raw is _UNSET) == (text is _UNSET):
        raise ValidationError(
            field=where,
            expected=f"exactly one of {name} (a JSON value) and {name}_text (a string)",
            got="both" if raw is not _UNSET else "neither",
        )
    if raw is not _UNSET:
        return bytes(raw)
    assert isinstance(text, str)
    return text.encode("utf-8", "surrogatepass")


def decode_session(lines: Iterable[bytes], where: str = "<session file>") -> SessionImage:
    """The session image a file's lines hold, every line checked against the format.

    Only the format is checked here; whether the session holds together (runs,
    records, references, messages) is checked when it is imported, as a
    restore's is.

    Raises:
        ValidationError: not this format, an unknown version, a malformed line
            (``field`` names the file and line), or counts that do not match
            the header (a truncated file).
    """
    numbered = enumerate(lines, start=1)
    first = next(numbered, None)
    if first is None:
        raise ValidationError(field=where, expected="an agentledger session file", got="empty")
    header = _read_header(first[1], where)
    sid = header.session.id
    runs: list[RunMeta] = []
    records: list[Record] = []
    checkpoints: dict[str, Checkpoint] = {}
    messages: list[SessionMessage] = []
    for number, data in numbered:
        at = f"{where} line {number}"
        if not data.strip(_SPACE):
            raise ValidationError(field=at, expected="one JSON object a line", got="an empty line")
        try:
            line = _LINE.decode(data)
        except msgspec.DecodeError as e:
            raise ValidationError(
                field=at, expected=f"a line of kind {', '.join(_KINDS)}", got=str(e)
            ) from None
        if isinstance(line, _Run):
            fields = msgspec.structs.asdict(line)
            runs.append(RunMeta(**fields, session_id=sid))
        elif isinstance(line, _Record):
            payload = _one_of(at, line.payload, line.payload_text, "payload")
            records.append(
                Record(
                    run_id=line.run_id,
                    agent_id=line.agent_id,
                    session_id=sid,
                    turn_id=line.turn_id,
                    event_key=line.event_key,
                    type=line.type,
                    timestamp=line.timestamp,
                    payload=payload,
                    id=line.id,
                )
            )
        elif isinstance(line, _Checkpoint):
            if line.run_id in checkpoints:
                raise ValidationError(
                    field=at, expected="one checkpoint a run", got=f"a second for {line.run_id!r}"
                )
            checkpoints[line.run_id] = Checkpoint(id=line.id, data=line.data)
        else:
            fields = msgspec.structs.asdict(line)
            body = _one_of(at, fields.pop("message"), fields.pop("message_text"), "message")
            messages.append(SessionMessage(**fields, message=body, session_id=sid))
    counted = {
        "runs": len(runs),
        "records": len(records),
        "checkpoints": len(checkpoints),
        "messages": len(messages),
    }
    wanted = {name: getattr(header, name) for name in counted}
    if counted != wanted:
        raise ValidationError(
            field=where,
            expected=f"the lines its header counts ({_count(wanted)})",
            got=f"{_count(counted)} (the file is truncated or was edited)",
        )
    last = {r.run_id: r.id for r in records}
    runs = [msgspec.structs.replace(r, last_record_id=last.get(r.run_id, "")) for r in runs]
    return SessionImage(
        session=header.session,
        runs=runs,
        records=records,
        checkpoints=checkpoints,
        messages=messages,
    )


def _count(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {name}" for name, n in counts.items())


def _read_header(data: bytes, where: str) -> SessionFileHeader:
    try:
        fields = json.loads(data)
    except ValueError:
        fields = None
    if not isinstance(fields, dict) or fields.get("format") != FORMAT:
        raise ValidationError(
            field=where,
            expected=f'an agentledger session file (a first line with "format": "{FORMAT}")',
            got=data[:60].decode("utf-8", "replace"),
        )
    if fields.get("version") != FORMAT_VERSION:
        raise ValidationError(
            field=f"{where} line 1",
            expected=f"format version {FORMAT_VERSION} (the version this agentledger reads)",
            got=fields.get("version"),
        )
    try:
        return _HEADER.decode(data)
    except msgspec.DecodeError as e:
        raise ValidationError(
            field=f"{where} line 1", expected="a header line", got=str(e)
        ) from None


def is_session_file(first_line: bytes) -> bool:
    """Whether a file's first line is the header of this format (any version)."""
    try:
        fields = json.loads(first_line)
    except ValueError:
        return False
    return isinstance(fields, dict) and fields.get("format") == FORMAT


class ImportOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What an import did with one session."""

    session_id: str
    """The session imported."""
    runs: int
    """Its runs."""
    records: int
    """Its records."""
    digest: str
    """Its session digest (as a purge receipt and an archive carry it)."""
    imported: bool
    """True: written now. False: the store already held this same session (nothing changed)."""


async def import_image(store: AdminStore, image: SessionImage) -> ImportOutcome:
    """Import ``image`` in one transaction; a store holding the very same session is left as it is.

    Raises:
        SessionConflictError: the store holds a session with this id and other contents.
        and whatever ``import_session`` refuses (the image is checked like a restore's).
    """
    digest = await asyncio.to_thread(session_digest, image)
    outcome = ImportOutcome(
        session_id=image.session.id,
        runs=len(image.runs),
        records=len(image.records),
        digest=digest,
        imported=True,
    )
    try:
        await store.import_session(image)
    except SessionConflictError as e:
        held = await read_session_image(store, image.session.id)
        if session_digest(held) != digest:
            raise SessionConflictError(
                session_id=e.session_id,
                field="contents",
                expected=f"digest {session_digest(held)} (the session as the store holds it)",
                got=f"digest {digest} (purge the session first to replace it)",
            ) from e
        return msgspec.structs.replace(outcome, imported=False)
    return outcome


async def export_session(store: SessionImageSource, session_id: str) -> bytes:
    """The whole file for the ended session ``session_id`` (records as the store reads them:
    an encrypted store's are opened with its keys, so only a store opened with them exports).

    Raises:
        SessionNotFoundError, SessionPurgedError: nothing to export.
        SessionActiveError, SessionHasActiveRunsError: not ended yet.
    """
    image = await read_session_image(store, session_id)
    return await asyncio.to_thread(lambda: b"".join(encode_session(image)))


async def import_session_file(store: AdminStore, path: str | Path) -> ImportOutcome:
    """Check the file at ``path`` whole, then import its session (see :func:`import_image`)."""
    where = Path(path)

    def read() -> SessionImage:
        with where.open("rb") as f:
            return decode_session(f, str(where))

    image = await asyncio.to_thread(read)
    return await import_image(store, image)


_SCHEMA = "agentledger-session.schema.json"


def session_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one line of the format, shipped in the package."""
    text = resources.files(__package__).joinpath(_SCHEMA).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
