"""What both directions of the pydantic-ai conversion share: the keys agentledger-only and
pydantic-ai-only data ride under, the media tables, the errors naming a part one side has
no place for, and pydantic-ai's own fields compared and restored exactly."""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, TypeAlias

import msgspec
import pydantic
from pydantic_ai import messages as pai

from agentledger.errors import TranscriptError
from agentledger.providers._json import loads
from agentledger.transcript import (
    CacheCheckpointPart,
    DocumentPart,
    ImagePart,
    JsonNumber,
    Part,
    TextPart,
)

__all__ = [
    "CARRIED",
    "CARRIED_IN_META",
    "DETAILS",
    "DOCUMENT_FORMATS",
    "DOCUMENT_TYPES",
    "FAILED_OUTCOMES",
    "FOREIGN",
    "IMAGE_FORMATS",
    "IMAGE_TYPES",
    "JSON_ADAPTER",
    "META",
    "REQUEST_PART",
    "STAMPED",
    "USER_CONTENT",
    "ModelMessage",
    "cannot_convert",
    "computed_identifier",
    "field_adapters",
    "field_differences",
    "message_metadata",
    "our_kind",
    "ours_unconvertible",
    "parse_tool_args",
    "plain_numbers",
    "restore_fields",
    "split_provider_details",
    "theirs_unconvertible",
    "with_provider_details",
]


META = "pydantic_ai"
"""The key of ``Message.meta`` holding what only pydantic-ai has."""
FOREIGN = "agentledger_meta"
"""The key of a pydantic-ai message's ``metadata`` holding the rest of ``Message.meta``."""
STAMPED = "agentledger_stamped"
"""The key of a pydantic-ai message's ``metadata`` holding the time ``to_pydantic_ai``
stamped on it (ISO 8601): a field with that time was never in the transcript."""
DETAILS = "agentledger"
"""The key of a pydantic-ai part's ``provider_details`` holding what only agentledger has."""

ModelMessage: TypeAlias = pai.ModelRequest | pai.ModelResponse
IMAGE_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}
IMAGE_FORMATS = {media: fmt for fmt, media in IMAGE_TYPES.items()}
DOCUMENT_TYPES = {
    "pdf": "application/pdf",
    "txt": "text/plain",
    "csv": "text/csv",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "html": "text/html",
    "md": "text/markdown",
    "doc": "application/msword",
    "xls": "application/vnd.ms-excel",
}
DOCUMENT_FORMATS = {media: fmt for fmt, media in DOCUMENT_TYPES.items()}
FAILED_OUTCOMES = frozenset(pai.ERROR_OUTCOMES)
USER_CONTENT = (TextPart, ImagePart, DocumentPart, CacheCheckpointPart)
JSON_ADAPTER: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Any)
CARRIED_IN_META = (pai.ToolAvailabilityDeltaPart,)
CARRIED = "carried"
"""Request parts with no transcript part and nothing for a model to read: kept in ``meta``."""
REQUEST_PART: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(pai.ModelRequestPart)


def our_kind(part: Part) -> str:
    return str(part.__struct_config__.tag)


def cannot_convert(
    where: str, got: str, why: str, message_index: int, part_index: int
) -> TranscriptError:
    return TranscriptError(
        field=where,
        expected="a part the other side can carry",
        got=got,
        message=why,
        message_index=message_index,
        part_index=part_index,
    )


def ours_unconvertible(
    message_index: int, part_index: int, part: Part, why: str
) -> TranscriptError:
    """An agentledger part pydantic-ai cannot carry."""
    return cannot_convert(
        f"messages[{message_index}].parts[{part_index}]",
        our_kind(part),
        f"pydantic-ai cannot carry a {our_kind(part)} part: {why}",
        message_index,
        part_index,
    )


def theirs_unconvertible(
    message_index: int, part_index: int, kind: str, why: str
) -> TranscriptError:
    """A pydantic-ai part agentledger cannot carry."""
    return cannot_convert(
        f"model_messages[{message_index}].parts[{part_index}]",
        kind,
        f"agentledger cannot carry a pydantic-ai {kind} part: {why}",
        message_index,
        part_index,
    )


# ----------------------------------------------------------------- pydantic-ai's own fields


_FIELDS: dict[str, dict[str, pydantic.TypeAdapter[Any]]] = {}


def field_adapters(cls: Any) -> dict[str, pydantic.TypeAdapter[Any]]:
    """A dataclass's constructor fields and the adapter that writes each as JSON (cached)."""
    key = f"{cls.__module__}.{cls.__qualname__}"
    fields = _FIELDS.get(key)
    if fields is None:
        hints = typing.get_type_hints(cls)
        fields = _FIELDS[key] = {
            f.name: pydantic.TypeAdapter(hints[f.name])
            for f in dataclasses.fields(cls)
            if f.init and not f.name.startswith("_") and f.name not in ("part_kind", "kind")
        }
    return fields


def field_differences(
    actual: Any, baseline: Any, skip: Iterable[str], timestamps: bool, stamp: datetime | None
) -> dict[str, Any]:
    """The fields of ``actual`` that the rebuilt ``baseline`` does not have, as JSON
    (a timestamp equal to ``stamp``, which ``to_pydantic_ai`` made up, is not one)."""
    out: dict[str, Any] = {}
    for name, adapter in field_adapters(type(actual)).items():
        if name in skip:
            continue
        value = getattr(actual, name)
        if name == "timestamp":
            if timestamps and value is not None and value != stamp:
                out[name] = adapter.dump_python(value, mode="json")
        elif value != getattr(baseline, name):
            out[name] = adapter.dump_python(value, mode="json")
    return out


def restore_fields(obj: Any, saved: Mapping[str, Any], where: str) -> Any:
    """``obj`` with the fields ``saved`` by `field_differences` put back."""
    if not saved:
        return obj
    fields = field_adapters(type(obj))
    changes: dict[str, Any] = {}
    for name, value in saved.items():
        adapter = fields.get(name)
        if adapter is None:
            raise TranscriptError(
                field=f"{where}.{name}", expected=f"a field of {type(obj).__name__}", got=name
            )
        try:
            changes[name] = adapter.validate_python(value)
        except pydantic.ValidationError as e:
            raise TranscriptError(
                field=f"{where}.{name}", expected=f"a valid {name}", got=value
            ) from e
    return dataclasses.replace(obj, **changes)


def with_provider_details(part: Any, ours: Mapping[str, Any]) -> dict[str, Any] | None:
    """``provider_details`` carrying agentledger-only fields (``ours``) next to the provider's."""
    details = dict(part.provider_details or {})
    if ours:
        details[DETAILS] = dict(ours)
    return details or None


def split_provider_details(part: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The agentledger-only fields in ``provider_details`` and the provider's own rest."""
    details = dict(part.provider_details or {})
    ours = details.pop(DETAILS, None) or {}
    return ours, details or None


def message_metadata(foreign: Mapping[str, Any], stamp: str | None = None) -> dict[str, Any] | None:
    metadata: dict[str, Any] = {FOREIGN: dict(foreign)} if foreign else {}
    if stamp is not None:
        metadata[STAMPED] = stamp
    return metadata or None


def computed_identifier(item: Any) -> str:
    """The identifier pydantic-ai computes for a file given none."""
    if isinstance(item, pai.BinaryContent):
        return pai.BinaryContent(item.data, media_type=item.media_type).identifier
    return str(type(item)(item.url).identifier)


def parse_tool_args(args: Any) -> dict[str, Any]:
    """A tool call's arguments as a JSON object with exact numbers (text is parsed)."""
    if args is None:
        return {}
    if isinstance(args, str):
        try:
            value = loads(args) if args.strip() else {}
        except msgspec.DecodeError:
            value = None
        if not isinstance(value, dict):
            raise ValueError("tool-call arguments are not a JSON object")
        return value
    return dict(args)


def plain_numbers(value: Any) -> Any:
    """``value`` with every `JsonNumber` a float is written as a float, in fresh dicts and lists.

    A stored transcript hands fractional numbers back as ``JsonNumber`` (exact
    text); pydantic-ai, like the model it feeds, expects the float it had (it
    would send a ``Decimal`` as a string). A number no float writes the same
    way (``1e400``, ``2.50``) stays a ``JsonNumber``, so nothing changes value.
    """
    if isinstance(value, JsonNumber):
        number = float(value.literal)
        exact = math.isfinite(number) and msgspec.json.encode(number) == value.literal.encode()
        return number if exact else value
    if isinstance(value, dict):
        return {key: plain_numbers(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(plain_numbers(item) for item in value)
    return value
