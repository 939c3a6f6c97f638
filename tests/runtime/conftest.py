"""Fixtures for end-to-end runtime tests: each scenario runs on MemoryStore and SQLiteStore."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A real ``agentledger serve`` over an SQLite file: its URL and a host token."""
    from tests.service.process import ServiceProcess, Tokens

    where = tmp_path_factory.mktemp("runtime-service")
    tokens = Tokens(where / "tokens.json")
    with ServiceProcess(str(where / "served.db"), tokens.path) as process:
        yield process.url, tokens.host


@pytest.fixture(params=["memory", "sqlite", "postgres", "service"])
async def every_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """A store of every backend, the store service's client included (shared servers:
    use :func:`every_session` for a fresh session id)."""
    from agentledger.service import StoreClient
    from agentledger.storage.postgres import PostgresStore

    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "sqlite":
        async with await SQLiteStore.open(tmp_path / "every.db", durability="normal") as lite:
            yield lite
    elif request.param == "postgres":
        async with await PostgresStore.open(request.getfixturevalue("postgres_dsn")) as pg:
            yield pg
    else:
        url, token = request.getfixturevalue("served")
        async with StoreClient(url, token=token) as client:
            yield client


@pytest.fixture
async def every_session(every_store: Any) -> str:
    """A fresh active session in ``every_store``."""
    session_id = f"s-{uuid.uuid4().hex}"
    await every_store.create_session(session_id, created_at=now_ms())
    return session_id
