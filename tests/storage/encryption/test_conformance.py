"""[A2] the whole conformance suite on encrypted stores: sealing changes no behaviour."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agentledger.storage.conformance import StoreConformance, StoreFactory, StoreOpener
from agentledger.storage.encryption import Encryption, Keyring
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.sqlite import SQLiteStore
from tests.storage.postgres.server import create_database, drop_database


@pytest.fixture(scope="module")
def keyring_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "keyring.json"
    path.write_text(Keyring.generate().to_json())
    return path


@pytest.fixture(scope="module")
def encrypted_sqlite(
    tmp_path_factory: pytest.TempPathFactory, keyring_file: Path
) -> Iterator[tuple[Path, Path]]:
    """One encrypted database file and its vault, held open by a keeper handle."""
    folder = tmp_path_factory.mktemp("encrypted-sqlite")
    path, vault = folder / "conformance.db", folder / "keys.vault"
    shared = Encryption(Keyring.from_file(keyring_file), vault)
    keeper = asyncio.run(SQLiteStore.open(path, durability="normal", encryption=shared))
    yield path, vault
    asyncio.run(keeper.close())


class TestEncryptedSQLiteStore(StoreConformance):
    """Two handles (one Encryption) on one encrypted file; racers open their own."""

    stateful_examples = 10

    @pytest.fixture
    async def store_factory(
        self, encrypted_sqlite: tuple[Path, Path], keyring_file: Path
    ) -> AsyncIterator[StoreFactory]:
        path, vault = encrypted_sqlite
        shared = Encryption(Keyring.from_file(keyring_file), vault)
        handles: list[SQLiteStore] = []

        async def open_store() -> SQLiteStore:
            handles.append(await SQLiteStore.open(path, durability="normal", encryption=shared))
            return handles[-1]

        yield open_store
        for handle in handles:
            await handle.close()

    @pytest.fixture
    def store_opener(self, encrypted_sqlite: tuple[Path, Path], keyring_file: Path) -> StoreOpener:
        path, vault = encrypted_sqlite
        return StoreOpener(
            "tests.storage.encryption.support:open_sqlite", str(path), str(keyring_file), str(vault)
        )


@pytest.fixture(scope="module")
def encrypted_postgres(
    postgres_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """A database of its own (the shared one holds plaintext data) and its vault."""
    dsn = create_database(postgres_dsn, prefix="agentledger_encrypted")
    try:
        yield dsn, tmp_path_factory.mktemp("encrypted-postgres") / "keys.vault"
    finally:
        drop_database(dsn)


class TestEncryptedPostgresStore(StoreConformance):
    """Every handle is its own pool on the encrypted database; one Encryption per test."""

    stateful_examples = 5

    @pytest.fixture
    async def store_factory(
        self, encrypted_postgres: tuple[str, Path], keyring_file: Path
    ) -> AsyncIterator[StoreFactory]:
        dsn, vault = encrypted_postgres
        shared = Encryption(Keyring.from_file(keyring_file), vault)
        handles: list[PostgresStore] = []

        async def open_store() -> PostgresStore:
            handle = await PostgresStore.open(dsn, min_size=1, max_size=4, encryption=shared)
            handles.append(handle)
            return handle

        yield open_store
        for handle in handles:
            await handle.close()

    @pytest.fixture
    def store_opener(self, encrypted_postgres: tuple[str, Path], keyring_file: Path) -> StoreOpener:
        dsn, vault = encrypted_postgres
        return StoreOpener(
            "tests.storage.encryption.support:open_postgres", dsn, str(keyring_file), str(vault)
        )
