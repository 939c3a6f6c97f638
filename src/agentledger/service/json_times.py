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
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _times(value: Any) -> Any:
    if isinstance(value, datetime):
        return json_time(value)
    if isinstance(value, dict):
        return {k: _times(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_times(v) for v in value]
    return value


def encode_json(value: Any) -> bytes:
    """``value`` as the service's JSON: what msgspec writes, times in milliseconds."""
    return _ENCODER.encode(_times(msgspec.to_builtins(value, builtin_types=(datetime,))))
