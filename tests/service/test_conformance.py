"""[S2] The whole conformance suite on StoreClient, over a real service process on loopback.

Each handle is its own StoreClient (its own connection pool), so the race
tests race two clients through one service into one database.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentledger.service import StoreClient
from agentledger.storage.conformance import StoreConformance, StoreFactory, StoreOpener
from tests.service.process import ServiceProcess, Tokens


def _opener(service: ServiceProcess, token: str) -> StoreOpener:
    """Racing processes reach the store the way workers do: a StoreClient each."""
    return StoreOpener("agentledger.service:StoreClient", service.url, token=token)


def _factory(service: ServiceProcess, token: str) -> tuple[StoreFactory, list[StoreClient]]:
    handles: list[StoreClient] = []

    async def open_store() -> StoreClient:
        handles.append(StoreClient(service.url, token=token))
        return handles[-1]

    return open_store, handles


class TestStoreClientOverSQLite(StoreConformance):
    """StoreClient -> agentledger serve -> SQLiteStore (durability full).

    Every stateful step reads the whole model back over HTTP: a few random
    sequences keep the class within its time budget.
    """

    stateful_examples = 4

    @pytest.fixture
    async def store_factory(
        self, sqlite_service: ServiceProcess, tokens: Tokens
    ) -> AsyncIterator[StoreFactory]:
        open_store, handles = _factory(sqlite_service, tokens.host)
        yield open_store
        for handle in handles:
            await handle.close()

    @pytest.fixture
    def store_opener(self, sqlite_service: ServiceProcess, tokens: Tokens) -> StoreOpener:
        return _opener(sqlite_service, tokens.host)


class TestStoreClientOverPostgres(StoreConformance):
    """StoreClient -> agentledger serve -> PostgresStore."""

    stateful_examples = 3

    @pytest.fixture
    async def store_factory(
        self, postgres_service: ServiceProcess, tokens: Tokens
    ) -> AsyncIterator[StoreFactory]:
        open_store, handles = _factory(postgres_service, tokens.host)
        yield open_store
        for handle in handles:
            await handle.close()

    @pytest.fixture
    def store_opener(self, postgres_service: ServiceProcess, tokens: Tokens) -> StoreOpener:
        return _opener(postgres_service, tokens.host)
