"""Fixtures for the SQLite backend's own tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentledger.storage.conformance import World
from agentledger.storage.sqlite import SQLiteStore


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A fresh database path in its own directory."""
    return tmp_path / "ledger.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    """An open store on ``db_path``, closed after the test."""
    async with await SQLiteStore.open(db_path) as opened:
        yield opened


@pytest.fixture
def world(store: SQLiteStore) -> World:
    """Ids, a clock and command builders on ``store``."""
    return World(store)
