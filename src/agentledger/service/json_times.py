"""The service's JSON answers: every time in UTC with milliseconds and ``Z``.

msgspec writes a time with microseconds (``.559000Z``), or with no fraction at
all when it has none; the store keeps times to the millisecond, and the CLI's
JSON prints them as ``2026-12-03T07:07:42.559Z``. The service answers in that
one form too, in call answers and in follow streams' events, so a client sees
the same text for the same time wherever it reads it. (MessagePack answers
carry times as MessagePack timestamps.)
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

__all__ = ["TIME_FORMAT", "encode_json", "json_time"]

TIME_FORMAT = "UTC with milliseconds and Z (2026-12-03T07:07:42.559Z)"
"""How answers write times, in words (the OpenAPI document and the docs say it)."""

_ENCODER = msgspec.json.Encoder()


def json_time(value: datetime) -> str:
    """``value`` as ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    return value.isoformat(timespec="milliseconds")[:-6] + "Z"  # less its "+00:00"


_NESTED = (dict, list, tuple)


def _times(value: Any) -> Any:
    """``value`` (what :func:`msgspec.to_builtins` made) with its times as text; its
    dicts are changed in place (they are its own)."""
    if type(value) is dict:
        for key, item in value.items():
            kind = type(item)
            if kind is datetime:
                value[key] = json_time(item)
            elif kind in _NESTED:
                value[key] = _times(item)
        return value
    if type(value) in (list, tuple):
        return [
            json_time(item)
            if type(item) is datetime
            else (_times(item) if type(item) in _NESTED else item)
            for item in value
        ]
    return value


def encode_json(value: Any) -> bytes:
    """``value`` as the service's JSON: what msgspec writes, times in milliseconds."""
    built = msgspec.to_builtins(value, builtin_types=(datetime,))
    return _ENCODER.encode(json_time(built) if type(built) is datetime else _times(built))
