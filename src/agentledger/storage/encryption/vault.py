"""The data-key vault: per-session data keys, wrapped, in a small file outside the database.

Data keys live outside the database on purpose: a key stored (even wrapped)
beside the records would survive in every backup of the database file, and
destroying it could never erase those backups. The vault is one SQLite file
with ``secure_delete`` on and a rollback journal, so an erased key leaves no
bytes behind in it; an erased key keeps a marker row, so reads say "erased",
not "missing".

Each data key is wrapped with AES-256-GCM under the keyring's current key,
with the vault id, the key's scope and the KEK id as associated data: a
wrapped key copied to another scope or another vault does not unwrap.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator
from enum import Enum

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from agentledger.errors import CorruptRecordError, TransientError, ValidationError
from agentledger.storage.encryption.keyring import KEY_BYTES, Keyring
from agentledger.storage.file_mode import create_private

__all__ = ["ERASED", "Erased", "KeyVault"]

_NONCE = 12
_BUSY_TIMEOUT = 10.0
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS vault (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "vault_id TEXT NOT NULL) STRICT",
    "CREATE TABLE IF NOT EXISTS data_keys (scope TEXT PRIMARY KEY, kek_id TEXT, wrapped BLOB, "
    "erased_at INTEGER, CHECK ((wrapped IS NULL) = (erased_at IS NOT NULL)), "
    "CHECK ((wrapped IS NULL) = (kek_id IS NULL))) STRICT",
)


class Erased(Enum):
    """The answer for a scope whose data key was destroyed."""

    ERASED = "erased"


ERASED = Erased.ERASED


def _aad(vault_id: str, scope: str, kek_id: str) -> bytes:
    return f"agentledger data key\x00{vault_id}\x00{scope}\x00{kek_id}".encode()


class KeyVault:
    """Wrapped data keys by scope (``"session:<id>"`` or ``"run:<id>"``) in one SQLite file.

    Every call opens its own short connection, so a vault is safe to share
    between threads and processes; concurrent creators of one scope's key
    agree on the first one committed.
    """

    __slots__ = ("path", "vault_id")

    def __init__(self, path: str, vault_id: str) -> None:
        """Use :meth:`open`."""
        self.path = path
        self.vault_id = vault_id
        """Random id of this vault, recorded in the databases it serves."""

    @classmethod
    def open(cls, path: str | os.PathLike[str], keyring: Keyring, *, create: bool) -> KeyVault:
        """Open (or, with ``create``, create) the vault at ``path``; check ``keyring`` against it.

        Raises:
            ValidationError: no vault there (without ``create``), not a vault, or a
                keyring that lacks a key still wrapping data keys.
        """
        name = os.fspath(path)
        if not create and not os.path.exists(name):
            raise ValidationError(field="vault", expected="an existing vault file", got=name)
        try:
            if create:
                create_private(name)  # its journal takes its mode
            with _connect(name) as conn:
                conn.execute("BEGIN IMMEDIATE")
                for statement in _SCHEMA:
                    conn.execute(statement)
                row = conn.execute("SELECT vault_id FROM vault").fetchone()
                if row is None:
                    vault_id = secrets.token_hex(16)
                    conn.execute("INSERT INTO vault (id, vault_id) VALUES (1, ?)", (vault_id,))
                else:
                    vault_id = str(row[0])
                used = {
                    str(kek_id)
                    for (kek_id,) in conn.execute(
                        "SELECT DISTINCT kek_id FROM data_keys WHERE kek_id IS NOT NULL"
                    )
                }
                conn.execute("COMMIT")
        except sqlite3.DatabaseError as e:
            raise ValidationError(field="vault", expected="a key vault file", got=name) from e
        missing = sorted(used - keyring.ids)
        if missing:
            raise ValidationError(
                field="keyring",
                expected=f"every key that still wraps data keys in vault {name!r}",
                got=f"missing {missing}",
            )
        return cls(name, vault_id)

    def data_key(self, scope: str, keyring: Keyring, *, create: bool) -> bytes | Erased | None:
        """The scope's data key (made and stored first if ``create``), ERASED, or None if absent."""
        with self._connection("read a data key") as conn:
            found = self._load(conn, scope, keyring)
            if found is not None or not create:
                return found
            conn.execute("BEGIN IMMEDIATE")
            try:
                found = self._load(conn, scope, keyring)  # another writer may have won
                if found is None:
                    key = secrets.token_bytes(KEY_BYTES)
                    kek_id = keyring.current_id
                    conn.execute(
                        "INSERT INTO data_keys (scope, kek_id, wrapped) VALUES (?, ?, ?)",
                        (scope, kek_id, self._wrap(scope, keyring, kek_id, key)),
                    )
                    found = key
                conn.execute("COMMIT")
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            return found

    def erase(self, scope: str) -> bool:
        """Destroy the scope's data key, keeping an erasure marker; False if it was erased before.

        A scope that never had a key gets the marker too, so no key can be made for it later.
        """
        with self._connection("erase a data key") as conn:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute(
                "SELECT erased_at FROM data_keys WHERE scope = ?", (scope,)
            ).fetchone()
            if row is not None and row[0] is not None:
                conn.execute("ROLLBACK")
                return False
            # DELETE then INSERT: secure_delete zeroes the freed cell holding the wrapped key.
            conn.execute("DELETE FROM data_keys WHERE scope = ?", (scope,))
            conn.execute(
                "INSERT INTO data_keys (scope, erased_at) VALUES (?, ?)",
                (scope, int(time.time() * 1000)),
            )
            # The erasure count lives in the file header (``user_version``), committed with
            # the erasure itself: sealers read it to forget their keys only when one happened.
            (count,) = conn.execute("PRAGMA user_version").fetchone()
            conn.execute(f"PRAGMA user_version = {int(count) + 1}")
            conn.execute("COMMIT")
            return True

    def rotate(self, keyring: Keyring) -> int:
        """Rewrap every data key under the current KEK; how many needed it."""
        with self._connection("rotate data keys") as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                rows = conn.execute(
                    "SELECT scope, kek_id, wrapped FROM data_keys "
                    "WHERE wrapped IS NOT NULL AND kek_id != ?",
                    (keyring.current_id,),
                ).fetchall()
                for scope, kek_id, wrapped in rows:
                    key = self._unwrap(scope, keyring, kek_id, wrapped)
                    conn.execute(
                        "UPDATE data_keys SET kek_id = ?, wrapped = ? WHERE scope = ?",
                        (
                            keyring.current_id,
                            self._wrap(scope, keyring, keyring.current_id, key),
                            scope,
                        ),
                    )
                conn.execute("COMMIT")
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            return len(rows)

    # ------------------------------------------------------------------ inside

    def _load(
        self, conn: sqlite3.Connection, scope: str, keyring: Keyring
    ) -> bytes | Erased | None:
        row = conn.execute(
            "SELECT kek_id, wrapped FROM data_keys WHERE scope = ?", (scope,)
        ).fetchone()
        if row is None:
            return None
        kek_id, wrapped = row
        if wrapped is None:
            return ERASED
        return self._unwrap(scope, keyring, str(kek_id), bytes(wrapped))

    def _wrap(self, scope: str, keyring: Keyring, kek_id: str, key: bytes) -> bytes:
        nonce = secrets.token_bytes(_NONCE)
        aad = _aad(self.vault_id, scope, kek_id)
        return nonce + AESGCM(keyring.key(kek_id)).encrypt(nonce, key, aad)

    def _unwrap(self, scope: str, keyring: Keyring, kek_id: str, wrapped: bytes) -> bytes:
        aad = _aad(self.vault_id, scope, kek_id)
        try:
            return AESGCM(keyring.key(kek_id)).decrypt(wrapped[:_NONCE], wrapped[_NONCE:], aad)
        except (InvalidTag, ValueError) as e:
            raise CorruptRecordError(
                run_id="", record_id="", reason=f"the wrapped data key of {scope!r} does not unwrap"
            ) from e

    @contextlib.contextmanager
    def _connection(self, operation: str) -> Iterator[sqlite3.Connection]:
        try:
            with _connect(self.path) as conn:
                yield conn
        except sqlite3.OperationalError as e:
            raise TransientError(f"key vault {self.path!r}: {e}", operation=operation) from e


@contextlib.contextmanager
def _connect(path: str) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(path, timeout=_BUSY_TIMEOUT, isolation_level=None)
    try:
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute("PRAGMA journal_mode = DELETE")
        # EXTRA, not FULL: a commit in DELETE mode is the journal's unlink, and only EXTRA
        # syncs the directory after it. Else a power loss can bring the journal back and
        # roll a committed data key out of the vault, leaving its records unreadable.
        conn.execute("PRAGMA synchronous = EXTRA")
        yield conn
    finally:
        conn.close()
