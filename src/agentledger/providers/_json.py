"""Exact JSON for provider payloads: numbers survive as written, bytes travel as base64.

Tool inputs and results hold `JsonNumber`\\ s ([T4]); a provider payload must
carry them as the same literal, and a provider's JSON must read back into the
same numbers. `loads` decodes with the transcript's number rule and `dumps`
writes a `JsonNumber` back verbatim.
"""

from __future__ import annotations

import base64
from decimal import Decimal
from typing import Any

import msgspec

from agentledger.transcript import JsonNumber

__all__ = ["b64decode", "b64encode", "dumps", "loads", "to_plain"]


def _float_hook(literal: str) -> JsonNumber:
    """Keep a fractional or exponent number as its exact literal."""
    return JsonNumber(literal)


def _enc_hook(value: Any) -> Any:
    """Write a `JsonNumber` as its literal; refuse anything else msgspec cannot write."""
    if isinstance(value, JsonNumber):
        return msgspec.Raw(value.literal.encode("ascii"))
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook, decimal_format="number")
_DECODER = msgspec.json.Decoder(float_hook=_float_hook)


def loads(data: bytes | str) -> Any:
    """Decode one JSON value, fractional numbers as exact `JsonNumber`\\ s.

    Raises:
        msgspec.DecodeError: ``data`` is not one valid JSON value.
    """
    return _DECODER.decode(data)


def dumps(value: Any) -> str:
    """Encode ``value`` as compact JSON text, `JsonNumber`\\ s as their literals."""
    return _ENCODER.encode(value).decode("utf-8")


def b64encode(data: bytes) -> str:
    """Standard base64 text of ``data``."""
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str) -> bytes:
    """Bytes of standard base64 ``text`` (strict: invalid characters are an error).

    Raises:
        binascii.Error: ``text`` is not valid base64.
    """
    return base64.b64decode(text, validate=True)


def to_plain(value: Any) -> Any:
    """Deep-copy JSON with every `Decimal` turned into the float of the same value.

    For SDKs that serialise with the standard ``json`` module (boto3), which
    cannot write a ``Decimal``. The caller checks exactness first.
    """
    if isinstance(value, dict):
        return {key: to_plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [to_plain(item) for item in value]
    if isinstance(value, Decimal):
        return float(value)
    return value
