"""Bearer tokens for the store service: hashed at rest, looked up by their hash [S4].

The token file is JSON::

    {"tokens": [{"sha256": "<hex of the token>", "role": "host", "labels": {"tenant": "acme"}}]}

It never holds a token, only its SHA-256; ``labels`` (optional) scopes the
token to sessions whose labels include every one of them.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

import msgspec

from agentledger.errors import AccessDeniedError, ValidationError
from agentledger.service.wire import Role
from agentledger.storage.file_mode import sync_directory

__all__ = ["Principal", "TokenTable", "add_token", "new_token"]


class Principal(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One entry of the token file: a token's hash, its role and its label scope."""

    sha256: str
    role: Role
    labels: dict[str, str] = msgspec.field(default_factory=dict)

    def may_see(self, labels: Mapping[str, str]) -> bool:
        """Whether something carrying ``labels`` lies inside this token's scope."""
        return all(labels.get(k) == v for k, v in self.labels.items())


class _TokenFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tokens: list[Principal] = msgspec.field(default_factory=list)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class TokenTable:
    """The principals a service accepts, looked up by a presented bearer token."""

    def __init__(self, principals: list[Principal]) -> None:
        # Looked up by the presented token's digest: a lookup's timing can tell of the
        # digest, which does not lead back to a token.
        self._principals = {bytes.fromhex(p.sha256): p for p in principals}  # the last wins

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TokenTable:
        """Read a token file.

        Raises:
            ValidationError: the file is missing or is not a token file.
        """
        file = Path(path)
        if not file.is_file():
            raise ValidationError(
                field="tokens",
                expected="a token file (make one with `agentledger token new`)",
                got=str(file),
            )
        return cls(_read(file).tokens)

    def authenticate(self, authorization: str | None, operation: str) -> Principal:
        """The principal of an ``Authorization: Bearer ...`` header.

        Raises:
            AccessDeniedError: (401) no bearer token, or one that is not in the file.
        """
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AccessDeniedError(operation=operation, status=401, reason="no bearer token")
        found = self._principals.get(hashlib.sha256(token.strip().encode("utf-8")).digest())
        if found is None:
            raise AccessDeniedError(operation=operation, status=401, reason="unknown token")
        return found


def _read(path: Path) -> _TokenFile:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return _TokenFile()
    except OSError as e:
        raise ValidationError(
            field="tokens", expected="a readable token file", got=str(path)
        ) from e
    try:
        table = msgspec.json.decode(raw, type=_TokenFile)
    except msgspec.DecodeError as e:
        raise ValidationError(
            field="tokens", expected='{"tokens": [{"sha256", "role", "labels"?}]}', got=str(e)
        ) from e
    for p in table.tokens:
        if len(p.sha256) != 64 or any(c not in "0123456789abcdef" for c in p.sha256):
            raise ValidationError(field="tokens.sha256", expected="64 lowercase hex", got=p.sha256)
    return table


def new_token() -> str:
    """A fresh random bearer token (256 bits, URL-safe)."""
    return "alt_" + secrets.token_urlsafe(32)


def add_token(
    path: str | os.PathLike[str], role: Role | str, labels: Mapping[str, str] | None = None
) -> str:
    """Make a token, add its hash to the token file (created if missing) and return it.

    Raises:
        ValidationError: an unknown role, or a file that is not a token file.
    """
    try:
        role = Role(role)
    except ValueError:
        raise ValidationError(
            field="role", expected=f"one of {', '.join(Role)}", got=role
        ) from None
    file = Path(path)
    table = _read(file)
    token = new_token()
    entry = Principal(sha256=_digest(token), role=role, labels=dict(labels or {}))
    tokens = [*table.tokens, entry]
    text = json.dumps({"tokens": [msgspec.to_builtins(p) for p in tokens]}, indent=2) + "\n"
    tmp = file.with_name(file.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, file)
    sync_directory(file.absolute().parent)  # the new name survives power loss
    return token
