"""``agentledger keys add|retire|rotate|erase``: encryption at rest [A2] and crypto-erasure.

``add`` and ``retire`` edit a keyring file; ``rotate`` and ``erase`` open the
database (a SQLite file or PostgreSQL DSN, never a service URL: run them on the
host that owns the vault) with its keyring and vault.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from agentledger.cli.app import STORE_HELP, Settings, run, settings_options
from agentledger.cli.complete import session_ids
from agentledger.errors import ValidationError

if TYPE_CHECKING:
    from agentledger.storage.encryption import Keyring

__all__ = ["keys"]

_KEYRING = click.option(
    "--keyring", metavar="FILE", default=None,
    help="the keyring file (default: $AGENTLEDGER_KEYRING_FILE, or JSON in $AGENTLEDGER_KEYRING)",
)  # fmt: skip
_VAULT = click.option(
    "--vault", metavar="FILE", default=None, help="the vault file (default: $AGENTLEDGER_VAULT)"
)
_KEYRING_FILE = click.option(
    "--keyring", metavar="FILE", required=True, help="the keyring file to edit"
)


@click.group(short_help="encryption keys: add, retire, rotate, erase a session's key")
def keys() -> None:
    """Manage encryption at rest: key-encryption keys in a keyring file, the data keys
    in the vault (rotate them, or erase a session's so its data is unreadable everywhere)."""


@keys.command(short_help="add a new random key to a keyring file and make it current")
@click.argument("key_id")
@_KEYRING_FILE
def add(key_id: str, keyring: str) -> None:
    """Add KEY_ID (32 random bytes) to the keyring FILE, created if missing (mode 0600),
    and make it the current key: new data keys are wrapped by it; run `keys rotate` to
    rewrap the existing ones."""
    from agentledger.cli.output import echo
    from agentledger.storage.encryption import Keyring

    if os.path.exists(keyring):
        ring = Keyring.from_file(keyring).with_key(key_id)
    else:
        ring = Keyring.generate(key_id)
    _write(keyring, ring)
    echo(f"keyring {keyring}: {key_id} added, current")


@keys.command(short_help="remove a key that no longer wraps any data key")
@click.argument("key_id")
@_KEYRING_FILE
def retire(key_id: str, keyring: str) -> None:
    """Remove KEY_ID from the keyring FILE (not the current key). Run `keys rotate`
    first: a store refuses a keyring that lacks a key still wrapping data keys."""
    from agentledger.cli.output import echo
    from agentledger.storage.encryption import Keyring

    _write(keyring, Keyring.from_file(keyring).without(key_id))
    echo(f"keyring {keyring}: {key_id} retired")


@keys.command(short_help="rewrap every data key under the current key")
@_KEYRING
@_VAULT
@settings_options(target_help=STORE_HELP)
def rotate(settings: Settings, keyring: str | None, vault: str | None) -> None:
    """Rewrap every session's data key under the keyring's current key; no record is
    rewritten. Afterwards the old key can be retired."""
    from agentledger.cli.output import echo, echo_json

    async def rotate_all() -> int:
        store = await _open(settings, keyring, vault)
        try:
            rewrapped: int = await store.rotate_keys()
            return rewrapped
        finally:
            await store.close()

    count = run(rotate_all())
    if settings.json:
        echo_json({"rewrapped": count})
    else:
        echo(f"{count} data keys rewrapped")


@keys.command(short_help="destroy a session's data key (crypto-erasure)")
@click.argument("session_id", shell_complete=session_ids)
@_KEYRING
@_VAULT
@settings_options(target_help=STORE_HELP)
def erase(settings: Settings, session_id: str, keyring: str | None, vault: str | None) -> None:
    """Destroy SESSION_ID's data key: its records and checkpoints become unreadable in
    the database, in backups of it and in archives made before. Cannot be undone."""
    from agentledger.cli.output import echo, echo_json

    async def erase_one() -> bool:
        store = await _open(settings, keyring, vault)
        try:
            erased: bool = await store.erase_session_keys(session_id)
            return erased
        finally:
            await store.close()

    erased = run(erase_one())
    if settings.json:
        echo_json({"id": session_id, "erased": True, "already": not erased})
    else:
        echo(f"session {session_id}: data key {'erased' if erased else 'was already erased'}")


async def _open(settings: Settings, keyring: str | None, vault: str | None) -> Any:
    from agentledger.cli.target import open_store

    if settings.target.kind == "service":
        raise ValidationError(
            field="--db",
            expected="the SQLite file or PostgreSQL DSN (run keys where the vault is)",
            got=str(settings.target),
        )
    store = await open_store(settings.target, read_only=False, keyring=keyring, vault=vault)
    if getattr(store, "encryption", None) is None:
        await store.close()
        raise ValidationError(
            field="--keyring", expected="a keyring and vault for an encrypted store", got=None
        )
    return store


def _write(path: str, ring: Keyring) -> None:
    """Replace the keyring file atomically and durably, readable by its owner only."""
    from agentledger.storage.file_mode import sync_directory

    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(ring.to_json())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    sync_directory(os.path.dirname(os.path.abspath(path)))  # the new name survives power loss
