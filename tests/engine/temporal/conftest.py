"""Fixtures of the Temporal engine tests: one real dev server per session, stores per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import Client

from agentledger.engine.temporal import connect
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.sqlite import SQLiteStore
from tests.engine.temporal.harness import now_ms

# The dev server fixture, temporal_address, is in tests/conftest.py: one server per session.


@pytest.fixture
async def temporal_client(temporal_address: str) -> Client:
    """A client of the session's server, with agentledger's data converter."""
    return await connect(temporal_address)


@pytest.fixture(params=["sqlite", "postgres"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """Which store backend a scenario runs on."""
    kind: str = request.param
    return kind


@pytest.fixture
async def store(
    store_kind: str, tmp_path: os.PathLike[str], request: pytest.FixtureRequest
) -> AsyncIterator[SQLiteStore | PostgresStore]:
    """A fresh SQLiteStore file, or a PostgresStore on the session's database."""
    if store_kind == "sqlite":
        opened: SQLiteStore | PostgresStore = await SQLiteStore.open(
            os.path.join(tmp_path, "ledger.db")
        )
    else:
        dsn: str = request.getfixturevalue("postgres_dsn")
        opened = await PostgresStore.open(dsn)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def session(store: SQLiteStore | PostgresStore) -> str:
    """An active session of its own in ``store``."""
    session_id = f"s-{uuid.uuid4().hex}"
    await store.create_session(session_id, created_at=now_ms())
    return session_id


@pytest.fixture
def worker_db(store_kind: str, store: Any, request: pytest.FixtureRequest) -> str:
    """The ``--db`` of a worker process sharing ``store``."""
    if store_kind == "sqlite":
        path: str = store.path
        return path
    dsn: str = request.getfixturevalue("postgres_dsn")
    return dsn
