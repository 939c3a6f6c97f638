"""Typed errors on the wire: any :mod:`agentledger.errors` class, its fields intact [S2].

One codec for the whole tree: an error travels as its class name, its message
and its instance attributes, each value tagged with its Python type (bytes,
datetimes, enums, tuples, msgspec Structs of agentledger) so the client
rebuilds the same class with equal fields, the way pickling does, without
ever unpickling what a server sent.
"""

from __future__ import annotations

import base64
import importlib
from datetime import datetime
from enum import Enum
from typing import Any

import msgspec

from agentledger import errors
from agentledger.errors import (
    AccessDeniedError,
    AgentledgerError,
    ConflictError,
    CorruptArchiveError,
    CorruptRecordError,
    NotFoundError,
    SessionKeyErasedError,
    SessionPurgedError,
    TransientError,
    ValidationError,
)

__all__ = ["ErrorBody", "ErrorDetail", "decode_error", "encode_error", "http_status"]


class ErrorDetail(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A typed error: class name, message and its fields (values tagged by type)."""

    type: str
    message: str
    fields: dict[str, Any]


class ErrorBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The body of every refusal."""

    error: ErrorDetail


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(ErrorBody)


def http_status(error: AgentledgerError) -> int:
    """The HTTP status an error is answered with: 4xx for refusals, 503 for transient trouble."""
    if isinstance(error, TransientError):
        return 503
    if isinstance(error, CorruptArchiveError):  # a file the caller sent, not the store's data
        return 422
    if isinstance(error, CorruptRecordError):
        return 500
    if isinstance(error, SessionPurgedError | SessionKeyErasedError):
        return 410
    if isinstance(error, NotFoundError):
        return 404
    if isinstance(error, ValidationError):
        return 422
    if isinstance(error, ConflictError):
        return 409
    if isinstance(error, AccessDeniedError):
        return error.status
    return 409  # every other refusal: the store's state does not allow the call


def encode_error(error: AgentledgerError) -> bytes:
    """The JSON body that carries ``error``: class name, message and every field."""
    fields = {k: _pack(v) for k, v in error.__dict__.items() if k != "message"}
    body = ErrorBody(ErrorDetail(type(error).__name__, error.message, fields))
    return _ENCODER.encode(body)


def decode_error(body: bytes) -> AgentledgerError | None:
    """The error a body carries, rebuilt as its own class; None if it carries none."""
    try:
        wire = _DECODER.decode(body).error
    except msgspec.DecodeError:
        return None
    cls = getattr(errors, wire.type, None)
    if not (isinstance(cls, type) and issubclass(cls, AgentledgerError)):
        return None
    error = cls.__new__(cls)
    Exception.__init__(error, wire.message)
    error.message = wire.message
    error.__dict__.update({k: _unpack(v) for k, v in wire.fields.items()})
    return error


# ------------------------------------------------------------------ values


def _name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _pack(value: Any) -> Any:
    """A JSON value that :func:`_unpack` turns back into ``value``."""
    if isinstance(value, Enum):
        return {"$enum": _name(type(value)), "value": value.value}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, tuple):
        return {"$tuple": [_pack(v) for v in value]}
    if isinstance(value, list):
        return [_pack(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"$dict": {k: _pack(v) for k, v in value.items()}}
    if isinstance(value, msgspec.Struct):
        fields = {f: _pack(getattr(value, f)) for f in value.__struct_fields__}
        return {"$struct": _name(type(value)), "fields": fields}
    return {"$repr": repr(value)}


def _agentledger_class(name: str, base: type) -> type | None:
    """The agentledger class called ``module:qualname``, if it is a ``base``."""
    module_name, _, qualname = name.partition(":")
    if module_name != "agentledger" and not module_name.startswith("agentledger."):
        return None
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError:
        return None
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found if isinstance(found, type) and issubclass(found, base) else None


def _unpack(value: Any) -> Any:
    if isinstance(value, list):
        return [_unpack(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "$bytes" in value:
        return base64.b64decode(value["$bytes"])
    if "$datetime" in value:
        return datetime.fromisoformat(value["$datetime"])
    if "$tuple" in value:
        return tuple(_unpack(v) for v in value["$tuple"])
    if "$dict" in value:
        return {k: _unpack(v) for k, v in value["$dict"].items()}
    if "$enum" in value:
        enum = _agentledger_class(value["$enum"], Enum)
        return value["value"] if enum is None else enum(value["value"])
    if "$struct" in value:
        fields = {k: _unpack(v) for k, v in value["fields"].items()}
        struct = _agentledger_class(value["$struct"], msgspec.Struct)
        return fields if struct is None else struct(**fields)
    if "$repr" in value:
        return value["$repr"]
    return value
