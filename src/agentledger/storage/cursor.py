"""Opaque page cursors: a position the store made, handed back unchanged [L9].

A cursor names its scope (one run's log, one session's, or a filtered
listing) and the last position returned: a sequence number, or the sort key
of the last item for keyset paging. It carries a checksum so that a forged or mangled cursor is
a :class:`~agentledger.errors.ValidationError`, not a silent jump.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

from agentledger.errors import ValidationError

__all__ = ["decode_cursor", "decode_key_cursor", "encode_cursor", "encode_key_cursor"]

_KEY = b"agentledger.cursor.v1"


def _tag(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=8, key=_KEY).digest()


def _seal(*fields: str) -> str:
    body = "\x00".join(fields).encode()
    return base64.urlsafe_b64encode(body + _tag(body)).decode("ascii").rstrip("=")


def _unseal(cursor: object, count: int) -> list[str]:
    """The ``count`` fields of a cursor this store issued, or a ValidationError."""
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
    if len(raw) <= 8 or _tag(body) != tag or len(parts) != count:
        raise ValidationError(field="cursor", expected="a cursor issued by this store", got=cursor)
    return [p.decode("utf-8", "replace") for p in parts]


def _check_scope(got_scope: str, got_id: str, scope: str, scope_id: str) -> None:
    if (got_scope, got_id) != (scope, scope_id):
        raise ValidationError(
            field="cursor",
            expected=f"a cursor of {scope} {scope_id!r}",
            got=f"a cursor of {got_scope} {got_id!r}",
        )


def encode_cursor(scope: str, scope_id: str, position: int) -> str:
    """The cursor after ``position`` in the ``scope`` (``"run"``/``"session"``) of ``scope_id``."""
    return _seal(scope, scope_id, str(position))


def decode_cursor(cursor: str, scope: str, scope_id: str, newest: int) -> int:
    """The position a cursor names, checked against its scope and the newest position.

    An empty cursor is the start (0). A cursor past ``newest`` was never issued
    for this scope, so it is rejected like any forged one.
    """
    if cursor == "":
        return 0
    got_scope, got_id, got_position = _unseal(cursor, 3)
    _check_scope(got_scope, got_id, scope, scope_id)
    if not got_position.isdigit() or int(got_position) > newest:
        raise ValidationError(field="cursor", expected="a position this store issued", got=cursor)
    return int(got_position)


def encode_key_cursor(scope: str, scope_id: str, key: tuple[str, ...]) -> str:
    """The cursor after the item whose sort key is ``key`` (keyset paging).

    Key fields must not contain NUL (ids never do: they are printable).
    """
    return _seal(scope, scope_id, *key)


def decode_key_cursor(cursor: str, scope: str, scope_id: str, width: int) -> tuple[str, ...]:
    """The ``width`` key fields a keyset cursor names, checked against its scope.

    The empty cursor is the start and gives ``()``; the caller parses the
    fields and treats a field it cannot parse like a forged cursor.
    """
    if cursor == "":
        return ()
    got_scope, got_id, *key = _unseal(cursor, 2 + width)
    _check_scope(got_scope, got_id, scope, scope_id)
    return tuple(key)
