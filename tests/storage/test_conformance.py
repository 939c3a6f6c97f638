"""Run the conformance suite against every backend that ships with agentledger."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agentledger.storage import MemoryStore
from agentledger.storage.conformance import StoreConformance, StoreFactory, StoreOpener
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.sqlite import SQLiteStore


class TestMemoryStore(StoreConformance):
    process_races = False  # a MemoryStore lives in one process

    @pytest.fixture
    async def store_factory(self) -> StoreFactory:
        shared = MemoryStore()

        async def open_store() -> MemoryStore:
            return shared.handle()  # each closes on its own, as a file's handles do

        return open_store


@pytest.fixture(scope="module")
def sqlite_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One database file for the SQLite class, held open by a keeper handle."""
    path = tmp_path_factory.mktemp("sqlite") / "conformance.db"
    keeper = asyncio.run(SQLiteStore.open(path, durability="normal"))
    yield path
    asyncio.run(keeper.close())


class TestSQLiteStore(StoreConformance):
    """Two handles on one database file: what two worker processes would hold.

    The suite namespaces its ids, so one file serves the whole class, as one
    database serves many workers; a keeper handle holds it open between tests so
    that closing a test's handles does not checkpoint the file each time.
    ``durability="normal"`` keeps the suite fast: the contract does not depend
    on when commits reach the disk (the crash and race tests use ``full``).
    Every stateful step reads the whole world back through the executor, so
    fewer random sequences keep the SQLite run within its time budget.
    """

    stateful_examples = 20

    @pytest.fixture
    async def store_factory(self, sqlite_path: Path) -> AsyncIterator[StoreFactory]:
        handles: list[SQLiteStore] = []

        async def open_store() -> SQLiteStore:
            handles.append(await SQLiteStore.open(sqlite_path, durability="normal"))
            return handles[-1]

        yield open_store
        for handle in handles:
            await handle.close()

    @pytest.fixture
    def store_opener(self, sqlite_path: Path) -> StoreOpener:
        return StoreOpener("agentledger.storage.sqlite:SQLiteStore.open", str(sqlite_path))


class TestPostgresStore(StoreConformance):
    """Every handle is its own connection pool on the session's database."""

    # Each stateful step re-reads the whole model (~30 round trips); 10 sequences
    # keep the class within the PostgreSQL test budget on two cores.
    stateful_examples = 10

    @pytest.fixture
    async def store_factory(self, postgres_dsn: str) -> AsyncIterator[StoreFactory]:
        handles: list[PostgresStore] = []

        async def open_store() -> PostgresStore:
            handles.append(await PostgresStore.open(postgres_dsn, min_size=1, max_size=4))
            return handles[-1]

        yield open_store
        for handle in handles:
            await handle.close()

    @pytest.fixture
    def store_opener(self, postgres_dsn: str) -> StoreOpener:
        return StoreOpener(
            "agentledger.storage.postgres:PostgresStore.open", postgres_dsn, min_size=1, max_size=1
        )
