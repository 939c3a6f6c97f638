"""Fixtures for end-to-end runtime tests: each scenario runs on MemoryStore and SQLiteStore."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentledger.storage import MemoryStore
from agentledger.storage.sqlite import SQLiteStore
from tests.runtime.support import AnyStore, now_ms


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AnyStore]:
    """A fresh store of each backend (SQLite in a temporary file)."""
    if request.param == "memory":
        yield MemoryStore()
        return
    sqlite = await SQLiteStore.open(tmp_path / "runtime.db", durability="normal")
    try:
        yield sqlite
    finally:
        await sqlite.close()


@pytest.fixture
async def session(store: AnyStore) -> str:
    """An active session in ``store``."""
    await store.create_session("s1", created_at=now_ms())
    return "s1"
