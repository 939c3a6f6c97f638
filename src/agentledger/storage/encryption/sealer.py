"""Sealing: record payloads and checkpoint data under their session's data key.

A sealed value is ``0x01 || nonce (12 bytes) || AES-256-GCM ciphertext and tag``.
Its associated data names its place (the run, the event key and type of a
record, or the checkpoint id, and the session), so a ciphertext copied to
another record or run does not open. Ids, types, keys, timestamps and labels
stay plaintext: listings, paging and lifecycle decisions need them.

Backends call :class:`Encryption` at their byte boundary only: they seal what
they write and open what they read, so every decision (exact retries, the
event JSON checks) sees plaintext and behaves as without encryption.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from agentledger.errors import CorruptRecordError, SessionKeyErasedError, ValidationError
from agentledger.storage.encryption.deferral import KeyNeeded, deferred
from agentledger.storage.encryption.keyring import Keyring
from agentledger.storage.encryption.vault import ERASED, Erased, KeyVault
from agentledger.storage.state import RunRow
from agentledger.storage.types import Checkpoint, Record

__all__ = ["Encryption", "Opener"]

_VERSION = b"\x01"
_VERSION_BYTE = _VERSION[0]
_NONCE = 12
_BODY = 1 + _NONCE
_OVERHEAD = _BODY + 16
_MOVED = "sealed bytes do not open: damaged, or moved from another record"
_replace = msgspec.structs.replace
_MISSING: Final = "missing"
_Known = AESGCM | Erased | Literal["missing"]
"""What the vault said about a scope: its key, erased, or no key (yet)."""

Opener = Callable[[Sequence[Any]], list[bytes]]
"""Opens the sealed payloads of one run's rows ``(seq, turn_id, event_key, type,
stamp, payload, checksum)``, in order; see :meth:`Encryption.run_opener`."""


def _scope(session_id: str, run_id: str) -> str:
    return f"session:{session_id}" if session_id else f"run:{run_id}"


def _record_prefix(session_id: str, run_id: str) -> str:
    """What a record's associated data shares with every record of its run."""
    return f"record\x00{session_id}\x00{run_id}\x00"


def _record_aad(record: Record) -> bytes:
    prefix = _record_prefix(record.session_id, record.run_id)
    return f"{prefix}{record.event_key}\x00{record.type}".encode()


def _checkpoint_aad(session_id: str, run_id: str, checkpoint_id: str) -> bytes:
    return f"checkpoint\x00{session_id}\x00{run_id}\x00{checkpoint_id}".encode()


def _tool_result_aad(session_id: str, run_id: str, call_key: str) -> bytes:
    return f"tool_result\x00{session_id}\x00{run_id}\x00{call_key}".encode()


def _archive_aad(session_id: str) -> bytes:
    return f"archive\x00{session_id}".encode()


class Encryption:
    """Encryption at rest [A2] for a store: a keyring and the path of its data-key vault.

    Pass it to ``SQLiteStore.open(..., encryption=...)`` or
    ``PostgresStore.open(..., encryption=...)``. Each session gets its own
    random data key (a one-shot run, which has no session, its own); the vault
    keeps it wrapped by the keyring's current key. One object may serve
    several handles of one process; data keys are kept in memory once used.
    """

    def __init__(self, keyring: Keyring, vault_path: str | os.PathLike[str]) -> None:
        if not isinstance(keyring, Keyring):
            raise ValidationError(field="keyring", expected="a Keyring", got=type(keyring).__name__)
        self.keyring = keyring
        self.vault_path = os.fspath(vault_path)
        self._vault: KeyVault | None = None
        self._keys: dict[str, AESGCM | Erased] = {}
        """Data keys (and erasures) read from the vault, kept until a vault erasure."""
        self._absent: set[str] = set()
        """Scopes the vault held no key for, kept until the vault changes at all."""
        self._erasures: tuple[int, int] | None = None
        self._changes = -1
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<Encryption vault={self.vault_path!r} {self.keyring!r}>"

    # For the backends ---------------------------------------------------------

    def attach(self, recorded_vault_id: str | None) -> str:
        """Open the vault for a database; returns the vault id the database must record.

        ``recorded_vault_id`` is what the database recorded (None: not yet
        encrypted); a database bound to another vault is refused.
        """
        with self._lock:
            if self._vault is None:
                self._vault = KeyVault.open(
                    self.vault_path, self.keyring, create=recorded_vault_id is None
                )
            vault = self._vault
        if recorded_vault_id is not None and recorded_vault_id != vault.vault_id:
            raise ValidationError(
                field="vault",
                expected=f"the vault this database was encrypted with (id {recorded_vault_id})",
                got=f"{self.vault_path} (id {vault.vault_id})",
            )
        return vault.vault_id

    def seal_record(self, record: Record) -> bytes:
        """The sealed bytes stored for ``record``'s payload."""
        self._refresh()
        key = self._key(record.session_id, record.run_id, create=True)
        return self._seal(key, record.payload, _record_aad(record))

    def open_record(self, record: Record) -> Record:
        """``record`` as read back (sealed payload) with its plaintext payload."""
        return self.open_records((record,))[0]

    def open_records(self, records: tuple[Record, ...]) -> tuple[Record, ...]:
        """Every record of a page opened (records of several runs: a session's page)."""
        self._refresh()
        opened: list[Record] = []
        append = opened.append
        run_id = session_id = ""
        key: AESGCM | None = None
        prefix = ""
        for record in records:
            if key is None or record.run_id != run_id or record.session_id != session_id:
                run_id, session_id = record.run_id, record.session_id
                key = self._key(session_id, run_id, create=False, record_id=record.id)
                prefix = _record_prefix(session_id, run_id)
            aad = f"{prefix}{record.event_key}\x00{record.type}".encode()
            plain = self._open(key, record.payload, aad, run_id, record.id)
            append(_replace(record, payload=plain))
        return tuple(opened)

    def run_opener(self, session_id: str, run_id: str, first_id: object) -> Opener:
        """What opens the sealed payloads of one run's rows, for a page being decoded.

        The hot path of a reload: one vault check, and the run's data key and
        associated-data prefix found once; the rows are opened in one tight loop,
        and only if one does not open are they opened again one by one, to name it.
        ``first_id`` (the page's first record) is named if the vault has no key.
        """
        self._refresh()
        key = self._key(session_id, run_id, create=False, record_id=str(first_id))
        decrypt = key.decrypt
        prefix = _record_prefix(session_id, run_id)

        def open_rows(rows: Sequence[Any]) -> list[bytes]:
            try:
                opened = [
                    decrypt(sealed[1:_BODY], sealed[_BODY:], f"{prefix}{key_}\x00{type_}".encode())
                    for _, _, key_, type_, _, sealed, _ in rows
                    if sealed[0] == _VERSION_BYTE
                ]
            except (InvalidTag, IndexError, TypeError, ValueError):
                opened = []
            if len(opened) == len(rows):
                return opened
            for seq, _, key_, type_, _, sealed, _ in rows:
                aad = f"{prefix}{key_}\x00{type_}".encode()
                self._open(key, sealed, aad, run_id, str(seq))  # raises for the first bad one
            raise AssertionError("every row opened one by one but not together")

        return open_rows

    def seal_checkpoint(self, session_id: str, run_id: str, checkpoint: Checkpoint) -> bytes:
        """The sealed bytes stored for a run's checkpoint data."""
        self._refresh()
        key = self._key(session_id, run_id, create=True)
        return self._seal(key, checkpoint.data, _checkpoint_aad(session_id, run_id, checkpoint.id))

    def open_checkpoint(self, session_id: str, run_id: str, checkpoint: Checkpoint) -> Checkpoint:
        """A checkpoint as read back (sealed data) with its plaintext data."""
        self._refresh()
        key = self._key(session_id, run_id, create=False, record_id="checkpoint")
        aad = _checkpoint_aad(session_id, run_id, checkpoint.id)
        return Checkpoint(
            id=checkpoint.id, data=self._open(key, checkpoint.data, aad, run_id, "checkpoint")
        )

    def seal_tool_result(self, session_id: str, run_id: str, call_key: str, data: bytes) -> bytes:
        """The sealed bytes stored for a tool call's saved result (private to its run)."""
        self._refresh()
        key = self._key(session_id, run_id, create=True)
        return self._seal(key, data, _tool_result_aad(session_id, run_id, call_key))

    def open_tool_result(self, session_id: str, run_id: str, call_key: str, sealed: bytes) -> bytes:
        """A saved tool result as read back (sealed) in plaintext."""
        self._refresh()
        key = self._key(session_id, run_id, create=False, record_id=f"tool_result:{call_key}")
        aad = _tool_result_aad(session_id, run_id, call_key)
        return self._open(key, sealed, aad, run_id, f"tool_result:{call_key}")

    def seal_archive(self, session_id: str, body: bytes) -> bytes:
        """An archive body sealed under the session's data key [A1]: erasure reaches it too."""
        self._refresh()
        key = self._key(session_id, "", create=True)
        return self._seal(key, body, _archive_aad(session_id))

    def open_archive(self, session_id: str, sealed: bytes) -> bytes:
        """An archive body :meth:`seal_archive` sealed; ``SessionKeyErasedError`` once erased."""
        self._refresh()
        key = self._key(session_id, "", create=False, record_id="archive")
        return self._open(key, sealed, _archive_aad(session_id), "", "archive")

    def open_contents(
        self, runs: list[RunRow], records: list[Record]
    ) -> tuple[list[RunRow], list[Record]]:
        """A session's whole contents opened, for its purge receipt [D7]; once its key is
        erased, the stored (sealed) bytes as they are, so an erased session can be purged."""
        try:
            opened = [
                run
                if run.checkpoint is None
                else _replace(
                    run, checkpoint=self.open_checkpoint(run.session_id, run.run_id, run.checkpoint)
                )
                for run in runs
            ]
            return opened, list(self.open_records(tuple(records)))
        except SessionKeyErasedError:
            return runs, records

    # Administration -----------------------------------------------------------

    def erase_session_keys(self, session_id: str) -> bool:
        """Destroy the session's data key; False if it was already erased."""
        if not isinstance(session_id, str) or not session_id:
            raise ValidationError(field="session_id", expected="a session id", got=session_id)
        scope = _scope(session_id, "")
        with self._lock:
            self._keys.pop(scope, None)
            self._absent.discard(scope)
        return self._opened().erase(scope)

    def rotate_keys(self) -> int:
        """Rewrap every data key under the keyring's current key; how many were rewrapped."""
        return self._opened().rotate(self.keyring)

    # Inside -------------------------------------------------------------------

    def _opened(self) -> KeyVault:
        """The vault: attached by a store, else opened as it is (never created here)."""
        with self._lock:
            if self._vault is None:
                self._vault = KeyVault.open(self.vault_path, self.keyring, create=False)
            return self._vault

    def _refresh(self) -> None:
        """Forget the data keys in memory once the vault recorded an erasure (one ``pread``).

        An erasure by another process (``agentledger keys erase`` beside a running
        ``serve``) thus holds here from the next operation on. Other vault changes
        (a key made for a new session by any process, a rotation, which leaves data
        keys as they are) keep the keys in memory and only forget scopes seen absent.
        """
        try:
            # The SQLite header: its file change counter moves with every vault commit,
            # and ``user_version`` counts erasures (committed with each). Plain os calls:
            # a Python file object would cost more than the read itself.
            fd = os.open(self.vault_path, os.O_RDONLY)
            try:
                header = os.pread(fd, 64, 0)
                inode = os.fstat(fd).st_ino
            finally:
                os.close(fd)
        except OSError:
            return  # reported by the vault itself on the next key lookup
        if len(header) < 64:
            erasures, changes = (-1, inode), -1
        else:
            erasures = (int.from_bytes(header[60:64], "big"), inode)
            changes = int.from_bytes(header[24:28], "big")
        if erasures != self._erasures:
            with self._lock:
                self._keys.clear()
                self._absent.clear()
                self._erasures, self._changes = erasures, changes
        elif changes != self._changes:
            with self._lock:
                self._absent.clear()
                self._changes = changes

    def _key(self, session_id: str, run_id: str, *, create: bool, record_id: str = "") -> AESGCM:
        scope = _scope(session_id, run_id)
        found: _Known | None = self._keys.get(scope)
        if found is None and not create and scope in self._absent:
            found = _MISSING
        if found is None:
            if deferred():
                raise KeyNeeded(scope=scope, create=create)
            found = self._load(scope, create)
        if found is ERASED:
            raise SessionKeyErasedError(session_id=session_id, run_id=run_id)
        if found is _MISSING:
            raise CorruptRecordError(
                run_id=run_id, record_id=record_id, reason=f"the vault has no data key for {scope}"
            )
        assert isinstance(found, AESGCM)
        return found

    def _load(self, scope: str, create: bool) -> _Known:
        """Read (or make) the scope's key in the vault and remember what was found."""
        found = self._opened().data_key(scope, self.keyring, create=create)
        if found is None:
            with self._lock:
                self._absent.add(scope)
            return _MISSING
        known = AESGCM(found) if isinstance(found, bytes) else found
        with self._lock:
            self._keys[scope] = known
        return known

    # For event loops ----------------------------------------------------------

    async def load_key(self, needed: KeyNeeded) -> None:
        """Read (or make) the key a deferred operation needed, in a worker thread
        (see :mod:`~agentledger.storage.encryption.deferral`)."""
        await asyncio.to_thread(self._load, needed.scope, needed.create)

    @staticmethod
    def _seal(key: AESGCM, plain: bytes, aad: bytes) -> bytes:
        nonce = secrets.token_bytes(_NONCE)
        return _VERSION + nonce + key.encrypt(nonce, plain, aad)

    @staticmethod
    def _open(key: AESGCM, sealed: bytes, aad: bytes, run_id: str, record_id: str) -> bytes:
        if len(sealed) < _OVERHEAD or sealed[0] != _VERSION_BYTE:
            raise CorruptRecordError(
                run_id=run_id, record_id=record_id, reason="stored bytes are not a sealed value"
            )
        try:
            return key.decrypt(sealed[1:_BODY], sealed[_BODY:], aad)
        except InvalidTag:
            raise CorruptRecordError(run_id=run_id, record_id=record_id, reason=_MOVED) from None
