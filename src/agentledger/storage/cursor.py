"""Opaque page cursors: a position the store made, handed back unchanged [L9].

A cursor names its scope (one run's log or one session's) and the last
position returned. It carries a checksum so that a forged or mangled cursor is
a :class:`~agentledger.errors.ValidationError`, not a silent jump.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

from agentledger.errors import ValidationError

__all__ = ["decode_cursor", "encode_cursor"]

_KEY = b"agentledger.cursor.v1"


def _tag(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=8, key=_KEY).digest()


def encode_cursor(scope: str, scope_id: str, position: int) -> str:
    """The cursor after ``position`` in the ``scope`` (``"run"``/``"session"``) of ``scope_id``."""
    body = f"{scope}\x00{scope_id}\x00{position}".encode()
    return base64.urlsafe_b64encode(body + _tag(body)).decode("ascii").rstrip("=")


def decode_cursor(cursor: str, scope: str, scope_id: str, newest: int) -> int:
    """The position a cursor names, checked against its scope and the newest position.

    An empty cursor is the start (0). A cursor past ``newest`` was never issued
    for this scope, so it is rejected like any forged one.
    """
    if cursor == "":
        return 0
    if not isinstance(cursor, str):
        raise ValidationError(field="cursor", expected="a cursor string", got=cursor)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError) as e:
        raise ValidationError(
            field="cursor", expected="a cursor issued by this store", got=cursor
        ) from e
    # base64 decoding skips stray characters and ignores unused bits, so many
    # spellings decode alike; only the exact string the store issued is a cursor.
    if base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=") != cursor:
        raise ValidationError(field="cursor", expected="a cursor issued by this store", got=cursor)
    body, tag = raw[:-8], raw[-8:]
    parts = body.split(b"\x00")
    if len(raw) <= 8 or _tag(body) != tag or len(parts) != 3:
        raise ValidationError(field="cursor", expected="a cursor issued by this store", got=cursor)
    got_scope, got_id, got_position = (p.decode("utf-8", "replace") for p in parts)
    if (got_scope, got_id) != (scope, scope_id):
        raise ValidationError(
            field="cursor",
            expected=f"a cursor of {scope} {scope_id!r}",
            got=f"a cursor of {got_scope} {got_id!r}",
        )
    if not got_position.isdigit() or int(got_position) > newest:
        raise ValidationError(field="cursor", expected="a position this store issued", got=cursor)
    return int(got_position)
