"""Run the conformance suite against every backend that ships with agentledger."""

from __future__ import annotations

import pytest

from agentledger.storage import MemoryStore
from agentledger.storage.conformance import StoreConformance, StoreFactory


class TestMemoryStore(StoreConformance):
    @pytest.fixture
    async def store_factory(self) -> StoreFactory:
        shared = MemoryStore()

        async def open_store() -> MemoryStore:
            return shared

        return open_store
