"""The keyring: key-encryption keys (KEKs) by id, and which one wraps new data keys.

A keyring is JSON, read from a file or an environment variable::

    {"current": "2026-12", "keys": {"2026-11": "<base64 of 32 bytes>", "2026-12": "..."}}

It never enters the database or the vault: whoever holds the database (or a
backup of it) without the keyring reads no payload.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import secrets
from collections.abc import Mapping

from agentledger.errors import ValidationError

__all__ = ["KEYRING_ENV", "KEY_BYTES", "Keyring"]

KEY_BYTES = 32
"""Every key is 256 bits: AES-256."""

KEYRING_ENV = "AGENTLEDGER_KEYRING"
"""The environment variable that may hold the keyring's JSON text."""


def _bad(expected: str, got: object) -> ValidationError:
    return ValidationError(field="keyring", expected=expected, got=got)


class Keyring:
    """Key-encryption keys by id; :attr:`current_id` wraps every new or rotated data key.

    Rotation: add a new key and make it current (:meth:`with_key`), then call the
    store's ``rotate_keys()``; once that returned, the old key may be retired
    (:meth:`without`) because no data key is wrapped by it any more.
    """

    __slots__ = ("_keys", "current_id")

    def __init__(self, keys: Mapping[str, bytes], current_id: str) -> None:
        if not keys:
            raise _bad("at least one key", "{}")
        for key_id, key in keys.items():
            if not isinstance(key_id, str) or not key_id:
                raise _bad("non-empty key ids", key_id)
            if not isinstance(key, bytes) or len(key) != KEY_BYTES:
                raise _bad(f"{KEY_BYTES}-byte keys", f"key {key_id!r}")
        if current_id not in keys:
            raise _bad("a current key id that names one of the keys", current_id)
        self._keys = dict(keys)
        self.current_id = current_id
        """The id of the key that wraps new and rotated data keys."""

    def __repr__(self) -> str:  # never shows key bytes
        return f"<Keyring current={self.current_id!r} ids={sorted(self._keys)!r}>"

    @property
    def ids(self) -> frozenset[str]:
        """Every key id of this keyring."""
        return frozenset(self._keys)

    def key(self, key_id: str) -> bytes:
        """The key with this id; a ``ValidationError`` if the keyring lacks it."""
        try:
            return self._keys[key_id]
        except KeyError:
            known = sorted(self._keys)
            raise _bad(f"a key with id {key_id!r} (retired too early?)", known) from None

    @classmethod
    def generate(cls, key_id: str = "k1") -> Keyring:
        """A keyring of one fresh random key."""
        return cls({key_id: secrets.token_bytes(KEY_BYTES)}, key_id)

    def with_key(self, key_id: str, key: bytes | None = None) -> Keyring:
        """This keyring plus ``key_id`` (fresh random bytes if ``key`` is None), made current."""
        if key_id in self._keys:
            raise _bad("a new key id", key_id)
        new = secrets.token_bytes(KEY_BYTES) if key is None else key
        return Keyring({**self._keys, key_id: new}, key_id)

    def without(self, key_id: str) -> Keyring:
        """This keyring with ``key_id`` retired; the current key cannot be retired."""
        if key_id == self.current_id:
            raise _bad("a key other than the current one", key_id)
        self.key(key_id)
        return Keyring({k: v for k, v in self._keys.items() if k != key_id}, self.current_id)

    # JSON --------------------------------------------------------------------

    def to_json(self) -> str:
        """The documented JSON text (it holds the keys: store it like a password)."""
        keys = {k: base64.b64encode(v).decode("ascii") for k, v in sorted(self._keys.items())}
        return json.dumps({"current": self.current_id, "keys": keys}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Keyring:
        """Parse the documented JSON; anything else is a ``ValidationError`` (keys never shown)."""
        try:
            data = json.loads(text)
        except ValueError:
            raise _bad("keyring JSON", "text that is not JSON") from None
        if not isinstance(data, dict) or set(data) != {"current", "keys"}:
            raise _bad('an object {"current": ID, "keys": {ID: BASE64}}', "another shape")
        current, encoded = data["current"], data["keys"]
        if not isinstance(current, str) or not isinstance(encoded, dict):
            raise _bad('"current" a string and "keys" an object', "another shape")
        keys: dict[str, bytes] = {}
        for key_id, value in encoded.items():
            if not isinstance(value, str):
                raise _bad("base64 text for every key", f"key {key_id!r}")
            try:
                keys[key_id] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise _bad("base64 text for every key", f"key {key_id!r}") from None
        return cls(keys, current)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Keyring:
        """Read the keyring JSON from a file."""
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ValidationError(
                field="keyring", expected="a readable keyring file", got=f"{path}: {e.strerror}"
            ) from e
        return cls.from_json(text)

    @classmethod
    def from_env(cls, name: str = KEYRING_ENV) -> Keyring | None:
        """The keyring in environment variable ``name``; None if it is unset or empty."""
        text = os.environ.get(name, "")
        return cls.from_json(text) if text else None
