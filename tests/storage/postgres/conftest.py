"""Fixtures of the PostgreSQL store tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from agentledger.storage.postgres import PostgresStore


@pytest.fixture
async def pair(postgres_dsn: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two handles on one database, each with a pool of four connections."""
    first = await PostgresStore.open(postgres_dsn, min_size=1, max_size=4)
    second = await PostgresStore.open(postgres_dsn, min_size=1, max_size=4)
    try:
        yield first, second
    finally:
        await asyncio.gather(first.close(), second.close())
