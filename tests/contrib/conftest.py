"""Product-memory backends for the adapter tests: in memory, an SQLite file, PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agentledger.memory import InMemoryMemory, SQLiteMemory

Opener = Callable[[], Awaitable[tuple[Any, Callable[[], Awaitable[None]]]]]


class Backend:
    """One product-memory backend: an opener for extra handles, and where processes find it."""

    def __init__(self, name: str, opener: Opener, where: str) -> None:
        self.name = name
        self.open = opener
        self.where = where


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Each backend; every handle opened on it sees the same data."""
    if request.param == "memory":
        shared = InMemoryMemory()

        async def open_memory() -> tuple[Any, Callable[[], Awaitable[None]]]:
            async def close() -> None:
                return None

            return shared, close

        return Backend("memory", open_memory, "")
    if request.param == "sqlite":
        path = str(tmp_path / "memory.db")

        async def open_sqlite() -> tuple[Any, Callable[[], Awaitable[None]]]:
            memory = await SQLiteMemory.open(path)
            return memory, memory.close

        return Backend("sqlite", open_sqlite, path)
    from agentledger.memory.postgres import PostgresMemory

    dsn: str = request.getfixturevalue("postgres_dsn")

    async def open_postgres() -> tuple[Any, Callable[[], Awaitable[None]]]:
        memory = await PostgresMemory.open(dsn)
        return memory, memory.close

    return Backend("postgres", open_postgres, dsn)


@pytest.fixture
async def memory(backend: Backend) -> AsyncIterator[Any]:
    handle, close = await backend.open()
    try:
        yield handle
    finally:
        await close()
