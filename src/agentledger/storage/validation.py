"""Checks on commands as given, before any stored state is consulted.

Pure functions shared by every backend: they raise
:class:`~agentledger.errors.ValidationError` for malformed input, and
:class:`~agentledger.errors.CorruptRecordError` when data read back from a
store does not fit its contract [J1].
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TypeGuard, TypeVar, cast

import msgspec

from agentledger.errors import CorruptRecordError, TranscriptError, ValidationError
from agentledger.storage import payloads
from agentledger.storage.derivation import HISTORY_COPIED, CopiedFrom
from agentledger.storage.types import Record, RunStart
from agentledger.transcript.codec import decode_messages

__all__ = [
    "COMPARED_FIELDS",
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_CHECKPOINT_BYTES",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "MAX_ID_LENGTH",
    "MAX_LABELS",
    "MAX_LABEL_KEY_LENGTH",
    "MAX_LABEL_VALUE_LENGTH",
    "MAX_PAGE_LIMIT",
    "SizeLimits",
    "check_labels",
    "check_limit",
    "check_reference_payload",
    "check_statuses",
    "check_stored_payload",
    "check_stored_record",
    "check_timestamp",
    "check_transcript_payload",
    "check_window_payload",
    "decode_payload",
    "decode_stored_payload",
    "normalize_record",
    "record_difference",
    "record_number",
    "require_id",
    "stored_record_error",
    "validate_record",
    "validate_run_start",
]

MAX_PAGE_LIMIT = 1000
"""Largest page a listing returns; bigger limits are capped to it."""

_P = TypeVar("_P", bound="payloads._Payload")
_T = TypeVar("_T")
_S = TypeVar("_S", bound=StrEnum)
_ZERO = timedelta(0)
# Syntax only, without building a value: decoding into Raw parses the whole
# document (one value, nothing after it) but allocates nothing per element,
# about four times faster on message arrays. Numbers are checked for syntax
# only: 1e400 is valid JSON (and a valid exact transcript number [T4]) even
# though no float can hold it. UTF-8 is checked separately, before.
_JSON_VALUE = msgspec.json.Decoder(msgspec.Raw)


MAX_ID_LENGTH = 512
"""Longest id, event key, record type, turn id or reason a store accepts, in characters
(label keys and values have their own limits, below)."""

DEFAULT_MAX_PAYLOAD_BYTES = 16 * 1024 * 1024
"""The default largest record payload a store accepts (16 MiB). A transcript message or
tool result beyond it belongs in a blob store, named by the record."""

DEFAULT_MAX_CHECKPOINT_BYTES = 64 * 1024 * 1024
"""The default largest checkpoint a suspension may store (64 MiB)."""


class SizeLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The byte caps one store enforces, set when it is opened (or served).

    A payload or checkpoint over its cap is refused with a ValidationError
    naming the cap and the size, before any write. Records stored under a
    larger cap stay readable: the caps bound writes, not what is stored.
    """

    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    """Largest payload of any record, lifecycle records included."""
    max_checkpoint_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES
    """Largest checkpoint of a suspension."""

    def __post_init__(self) -> None:
        for name in ("max_payload_bytes", "max_checkpoint_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValidationError(field=name, expected="a positive number of bytes", got=value)


DEFAULT_LIMITS = SizeLimits()
"""The caps of a store opened without its own."""


def _are_ids(*values: object) -> bool:
    """Whether :func:`require_id` accepts every one of ``values``."""
    for value in values:
        if not (isinstance(value, str) and 0 < len(value) <= MAX_ID_LENGTH and value.isprintable()):
            return False
    return True


def require_id(field: str, value: object) -> str:
    """A non-empty, printable string id of at most :data:`MAX_ID_LENGTH` characters.

    Control characters and lone surrogates are refused: they cannot be stored
    by every backend (PostgreSQL text holds no NUL) nor carried in a cursor.
    """
    if _are_ids(value):
        return cast(str, value)
    if not isinstance(value, str) or not value:
        raise ValidationError(field=field, expected="a non-empty string", got=value)
    if len(value) > MAX_ID_LENGTH or not value.isprintable():
        raise ValidationError(
            field=field,
            expected=f"printable text of at most {MAX_ID_LENGTH} characters",
            got=value,
        )
    return value


def record_number(text: str) -> int | None:
    """The position a record id names, or None if ``text`` is not a record id.

    A record id is a run's position of a record: a decimal of ASCII digits from
    1, without leading zeros (``"7"``, not ``"07"``, ``"0"``, ``"-1"`` or a non-ASCII digit).
    This is the one check of that format: references, windows, replay cuts and
    a run's last record id all go through it.
    """
    if text.isascii() and text.isdigit() and text[0] != "0":
        return int(text)
    return None


def _require_str(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValidationError(field=field, expected="a string", got=value)
    return value


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _storable(value: str) -> bool:
    """Whether every backend can store ``value`` as text: no NUL, no lone surrogate."""
    return _UNSTORABLE.search(value) is None


def _is_text(value: object) -> TypeGuard[str]:
    """Whether :func:`_require_text` accepts ``value`` (storable: see :func:`_storable`)."""
    return (
        isinstance(value, str) and len(value) <= MAX_ID_LENGTH and _UNSTORABLE.search(value) is None
    )


def _require_text(field: str, value: object) -> str:
    """A string (maybe empty) every backend can store, of at most :data:`MAX_ID_LENGTH`."""
    if not _is_text(value):
        raise ValidationError(
            field=field,
            expected=f"text of at most {MAX_ID_LENGTH} characters without NUL or lone surrogates",
            got=value if not isinstance(value, str) else value[:64],
        )
    return value


def _is_utc_ms(value: object) -> TypeGuard[datetime]:
    """Whether :func:`check_timestamp` accepts ``value``."""
    return (
        isinstance(value, datetime)
        and value.utcoffset() == _ZERO  # None (naive) is not
        and not value.microsecond % 1000
    )


def check_timestamp(field: str, value: object) -> datetime:
    """A timezone-aware UTC datetime with millisecond precision, normalised to ``UTC``."""
    if not isinstance(value, datetime):
        raise ValidationError(field=field, expected="a datetime", got=value)
    offset = value.utcoffset()
    if offset is None:
        raise ValidationError(field=field, expected="a timezone-aware UTC datetime", got=value)
    if offset != _ZERO:
        raise ValidationError(field=field, expected="a UTC datetime (offset 0)", got=value)
    if value.microsecond % 1000:
        raise ValidationError(field=field, expected="millisecond precision", got=value)
    return value if value.tzinfo is UTC else value.replace(tzinfo=UTC)


MAX_LABELS = 64
"""Most labels one session carries (or one listing filters by)."""

MAX_LABEL_KEY_LENGTH = 256
"""Longest label key, in characters."""

MAX_LABEL_VALUE_LENGTH = 1024
"""Longest label value, in characters."""


def check_labels(field: str, labels: object) -> dict[str, str]:
    """Session labels, or a listing's label filter [D6], as a new dict sorted by key.

    Like run labels, keys and values are text every backend can store (no
    NUL, no lone surrogate); session labels are also bounded, because they are
    indexed, filtered on and matched against token scopes: at most
    :data:`MAX_LABELS` labels, keys non-empty and at most
    :data:`MAX_LABEL_KEY_LENGTH` characters, values at most
    :data:`MAX_LABEL_VALUE_LENGTH`.
    """
    if not isinstance(labels, Mapping):
        raise ValidationError(field=field, expected="a mapping of str to str", got=labels)
    if len(labels) > MAX_LABELS:
        raise ValidationError(
            field=field, expected=f"at most {MAX_LABELS} labels", got=f"{len(labels)} labels"
        )
    checked: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValidationError(field=field, expected="a mapping of str to str", got=labels)
        if not key or len(key) > MAX_LABEL_KEY_LENGTH:
            expected = f"label keys of 1 to {MAX_LABEL_KEY_LENGTH} characters"
            raise ValidationError(field=field, expected=expected, got=key)
        if len(value) > MAX_LABEL_VALUE_LENGTH:
            expected = f"label values of at most {MAX_LABEL_VALUE_LENGTH} characters"
            raise ValidationError(field=field, expected=expected, got=value)
        if not (_storable(key) and _storable(value)):
            raise ValidationError(
                field=field, expected="text without NUL or lone surrogates", got={key: value}
            )
        checked[key] = value
    return dict(sorted(checked.items()))


def check_limit(limit: object) -> int:
    """A page size: a positive int, capped at :data:`MAX_PAGE_LIMIT`."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        raise ValidationError(field="limit", expected="a positive integer", got=limit)
    return min(limit, MAX_PAGE_LIMIT)


def check_statuses(values: Iterable[object], kind: type[_S]) -> frozenset[_S]:
    """A listing's status filter: members of ``kind`` (or their values), else a ValidationError."""
    if isinstance(values, str | bytes):
        raise ValidationError(
            field="statuses", expected=f"a collection of {kind.__name__}", got=values
        )
    wanted: set[_S] = set()
    names = {m.value: m for m in kind}
    for value in values:
        member = names.get(value) if isinstance(value, str) else None
        if member is None:
            expected = f"one of {', '.join(names)}"
            raise ValidationError(field="statuses", expected=expected, got=value)
        wanted.add(member)
    return frozenset(wanted)


def _check_record_fields(record: Record, field: str) -> None:
    """The field checks of :func:`validate_record`, in order, each naming its field."""
    require_id(f"{field}.run_id", record.run_id)
    require_id(f"{field}.agent_id", record.agent_id)
    _require_str(f"{field}.session_id", record.session_id)
    _require_text(f"{field}.turn_id", record.turn_id)
    require_id(f"{field}.event_key", record.event_key)
    require_id(f"{field}.type", record.type)
    if record.id != "":
        raise ValidationError(
            field=f"{field}.id", expected='"" (ids are assigned by the store)', got=record.id
        )
    check_timestamp(f"{field}.timestamp", record.timestamp)


def validate_record(record: object, field: str = "record") -> Record:
    """Check the fields every record needs before a store can accept it.

    A transcript record's payload must also decode strictly as messages [R1].
    """
    if not isinstance(record, Record):
        raise ValidationError(field=field, expected="a Record", got=type(record).__name__)
    if not (  # the common case, without naming each field
        _are_ids(record.run_id, record.agent_id, record.event_key, record.type)
        and isinstance(record.session_id, str)
        and _is_text(record.turn_id)
        and record.id == ""
        and _is_utc_ms(record.timestamp)
    ):
        _check_record_fields(record, field)  # raises, naming the first bad field
    payload = record.payload
    if not isinstance(payload, bytes) or not payload:
        raise ValidationError(field=f"{field}.payload", expected="non-empty bytes", got=payload)
    try:
        if not payload.isascii():  # ASCII is UTF-8
            payload.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValidationError(
            field=f"{field}.payload", expected="valid UTF-8", got=f"invalid byte at {e.start}"
        ) from e
    if record.type in payloads.TRANSCRIPT_TYPES:
        check_transcript_payload(record, field)  # also exactly one JSON value
        return record
    if record.type == payloads.TRANSCRIPT_REFERENCED:
        check_reference_payload(record, field)
        return record
    if record.type == payloads.TRANSCRIPT_WINDOW:
        check_window_payload(record, field)
        return record
    if record.type == HISTORY_COPIED:  # [G2] listed strictly, so refused unless it decodes
        try:
            _COPIED_FROM.decode(payload)
        except msgspec.DecodeError as e:
            raise ValidationError(
                field=f"{field}.payload", expected="a session_id, run_id and through", got=str(e)
            ) from e
        return record
    try:
        _JSON_VALUE.decode(payload)
    except msgspec.DecodeError as e:
        raise ValidationError(
            field=f"{field}.payload", expected="exactly one JSON value", got=str(e)
        ) from e
    return record


_COPIED_FROM = msgspec.json.Decoder(CopiedFrom)


def check_transcript_payload(record: Record, field: str = "record") -> None:
    """A transcript record's payload must decode strictly as messages [R1].

    Part of :func:`validate_record`: checked on write, so that replay of a
    verified stored record can trust what it reads (see
    ``protocol.VerifiedTranscripts``).
    """
    if record.type not in payloads.TRANSCRIPT_TYPES:
        return

    try:
        decode_messages(record.payload)
    except TranscriptError as e:
        raise ValidationError(
            field=f"{field}.payload{e.field.removeprefix('$')}",
            expected=f"a {record.type} payload: {e.expected}",
            got=e.got,
        ) from e


def check_reference_payload(record: Record, field: str = "record") -> payloads.TranscriptReference:
    """A history reference decodes as exactly one typed object naming a run and a record id."""
    reference = decode_payload(record, payloads.TranscriptReference, field)
    require_id(f"{field}.payload.run_id", reference.run_id)
    if record_number(reference.through) is None:
        raise ValidationError(
            field=f"{field}.payload.through",
            expected="a record id of the source run (a decimal from 1)",
            got=reference.through,
        )
    return reference


def check_window_payload(record: Record, field: str = "record") -> payloads.TranscriptWindow:
    """A window decodes as exactly one typed object whose start names a run, a record id
    and a message of that record's array."""
    window = decode_payload(record, payloads.TranscriptWindow, field)
    start = window.start
    require_id(f"{field}.payload.start.run_id", start.run_id)
    if record_number(start.record) is None:
        raise ValidationError(
            field=f"{field}.payload.start.record",
            expected="a record id (a decimal from 1)",
            got=start.record,
        )
    if start.message < 0:
        raise ValidationError(
            field=f"{field}.payload.start.message", expected=">= 0", got=start.message
        )
    return window


def check_stored_record(record: Record) -> None:
    """A stored record must still be one a store would accept; a misfit is corruption [J1].

    Read paths that compare a stored record (exact retries, repairs) call this
    before calling a difference a conflict.
    """
    try:
        validate_record(msgspec.structs.replace(record, id=""))
    except ValidationError as e:
        raise stored_record_error(record, e) from e


def stored_record_error(record: Record, error: ValidationError) -> CorruptRecordError:
    """What a write-side check's ``error`` means for a record already stored: corruption,
    naming the record and what the check found [J1].

    The one mapping from a checker's :class:`~agentledger.errors.ValidationError` to
    :class:`~agentledger.errors.CorruptRecordError` (checks run on a ``Record``
    name their fields ``record.<field>``; the prefix is dropped).
    """
    field = error.field.removeprefix("record.")
    return CorruptRecordError(
        run_id=str(record.run_id),
        record_id=str(record.id),
        reason=f"{record.type}: {field}: expected {error.expected}, found {error.got!r}",
    )


def check_stored_payload(record: Record, check: Callable[[Record, str], _T]) -> _T:
    """Decode a stored record's payload with the very check a write runs on it
    (for example :func:`check_reference_payload`), so what a store accepts and what a
    reader accepts cannot drift; a misfit is corruption [J1].

    Raises:
        CorruptRecordError: the check refused the stored record.
    """
    try:
        return check(record, "record")
    except ValidationError as e:
        raise stored_record_error(record, e) from e


def normalize_record(record: Record, record_id: str) -> Record:
    """The record as stored: its assigned id and a ``UTC`` timestamp object.

    The record was checked by :func:`validate_record` already.
    """
    at = record.timestamp
    return msgspec.structs.replace(
        record, id=record_id, timestamp=at if at.tzinfo is UTC else at.replace(tzinfo=UTC)
    )


def validate_run_start(run: object) -> RunStart:
    """Check the identity of a run being started (shape only, not its relations)."""
    if not isinstance(run, RunStart):
        raise ValidationError(field="run", expected="a RunStart", got=type(run).__name__)
    require_id("run.run_id", run.run_id)
    require_id("run.agent_id", run.agent_id)
    for name in ("session_id", "parent_run_id", "predecessor_run_id"):
        _require_str(f"run.{name}", getattr(run, name))
    if run.parent_run_id == run.run_id:
        raise ValidationError(
            field="run.parent_run_id", expected="another run's id", got=run.parent_run_id
        )
    if run.predecessor_run_id == run.run_id:
        raise ValidationError(
            field="run.predecessor_run_id", expected="another run's id", got=run.run_id
        )
    check_timestamp("run.started_at", run.started_at)
    if not isinstance(run.labels, dict):
        raise ValidationError(field="run.labels", expected="a dict of str to str", got=run.labels)
    check_labels("run.labels", run.labels)
    return run


def decode_payload(record: Record, cls: type[_P], field: str) -> _P:
    """Decode a command's lifecycle payload strictly, after checking its type [J1]."""
    if record.type != cls.record_type:
        raise ValidationError(field=f"{field}.type", expected=cls.record_type, got=record.type)
    try:
        return cls.decode(record.payload)
    except ValidationError as e:
        raise ValidationError(field=f"{field}.payload", expected=e.expected, got=e.got) from e


def decode_stored_payload(record: Record, cls: type[_P]) -> _P:
    """Decode a stored lifecycle payload; a misfit is corruption, never skipped [J1]."""
    if record.type != cls.record_type:
        raise CorruptRecordError(
            run_id=record.run_id,
            record_id=record.id,
            reason=f"expected type {cls.record_type!r}, found {record.type!r}",
        )
    try:  # every listing decodes its lifecycle records: straight to the decoder
        return cls.decode(record.payload)
    except ValidationError:
        pass  # decoded again by the write's own check, for the error that names the problem
    return check_stored_payload(record, lambda r, field: decode_payload(r, cls, field))


COMPARED_FIELDS = (
    "run_id",
    "agent_id",
    "session_id",
    "turn_id",
    "event_key",
    "type",
    "timestamp",
    "payload",
)
"""The fields an exact retry must repeat [X1] (the id is assigned by the store)."""


def record_difference(stored: Record, given: Record) -> str:
    """The first field in which two records differ (ignoring the id), or ""."""
    for name in COMPARED_FIELDS:
        if getattr(stored, name) != getattr(given, name):
            return name
    return ""
