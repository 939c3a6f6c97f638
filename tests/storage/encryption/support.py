"""Openers for encrypted stores that travel to spawned processes as JSON (StoreOpener)."""

from __future__ import annotations

from agentledger.storage.encryption import Encryption, Keyring
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.sqlite.connection import Durability


def encryption(keyring_file: str, vault: str) -> Encryption:
    """The Encryption of a keyring file and a vault path."""
    return Encryption(Keyring.from_file(keyring_file), vault)


async def open_sqlite(
    path: str, keyring_file: str, vault: str, durability: Durability = "normal"
) -> SQLiteStore:
    """An encrypted SQLiteStore handle, as a spawned racer opens it."""
    return await SQLiteStore.open(
        path, durability=durability, encryption=encryption(keyring_file, vault)
    )


async def open_postgres(dsn: str, keyring_file: str, vault: str) -> PostgresStore:
    """An encrypted PostgresStore handle, as a spawned racer opens it."""
    return await PostgresStore.open(
        dsn, min_size=1, max_size=1, encryption=encryption(keyring_file, vault)
    )
