"""Fixtures every conformance capability shares."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeAlias

import pytest

from agentledger.storage.conformance._world import AdminStore, World

__all__ = ["ConformanceBase", "StoreFactory"]

StoreFactory: TypeAlias = Callable[[], Awaitable[AdminStore]]
"""Opens a handle on the test's database; every call must reach the same data."""


class ConformanceBase:
    """Fixtures of the suite. Subclasses provide an async ``store_factory`` fixture.

    ``store_factory`` yields a callable that opens a new handle on one
    database; the suite opens a second handle for races. Tests namespace
    their ids, so the database may be shared between tests.
    """

    race_writers: ClassVar[int] = 8
    """How many concurrent writers the race tests use."""

    @pytest.fixture
    def store_factory(self) -> Any:
        raise NotImplementedError(
            "a StoreConformance subclass must define an async `store_factory` fixture"
        )

    @pytest.fixture
    async def store(self, store_factory: StoreFactory) -> AdminStore:
        return await store_factory()

    @pytest.fixture
    async def other_store(self, store_factory: StoreFactory) -> AdminStore:
        """A second handle on the same database."""
        return await store_factory()

    @pytest.fixture
    def world(self, store: AdminStore) -> World:
        return World(store)
