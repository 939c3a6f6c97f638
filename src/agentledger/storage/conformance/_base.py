"""Fixtures every conformance capability shares."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeAlias

import pytest
import pytest_asyncio

from agentledger.storage.conformance._world import AdminStore, World

__all__ = ["ConformanceBase", "StoreFactory"]

StoreFactory: TypeAlias = Callable[[], Awaitable[AdminStore]]
"""Opens a handle on the test's database; every call must reach the same data."""

_ASYNCIO = pytest.mark.asyncio(loop_scope="function")


def _mark_async_tests(cls: type) -> None:
    """Give each async test defined on ``cls`` its own asyncio marker (strict mode needs it).

    Explicit markers, not ``asyncio_mode = "auto"``: the suite must run in a
    project whatever its pytest-asyncio mode. Sync tests stay unmarked.
    """
    for name, value in vars(cls).items():
        if not (name.startswith("test") and inspect.iscoroutinefunction(value)):
            continue
        if not any(mark.name == "asyncio" for mark in getattr(value, "pytestmark", ())):
            _ASYNCIO(value)


class ConformanceBase:
    """Fixtures of the suite. Subclasses provide an async ``store_factory`` fixture.

    ``store_factory`` yields a callable that opens a new handle on one
    database; the suite opens a second handle for races. Tests namespace
    their ids, so the database may be shared between tests.
    """

    race_writers: ClassVar[int] = 8
    """How many concurrent writers the race tests use."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _mark_async_tests(cls)

    @pytest.fixture
    def store_factory(self) -> Any:
        raise NotImplementedError(
            "a StoreConformance subclass must define a `store_factory` fixture "
            "(async: decorate it with @pytest_asyncio.fixture)"
        )

    @pytest_asyncio.fixture(loop_scope="function")
    async def store(self, store_factory: StoreFactory) -> AdminStore:
        return await store_factory()

    @pytest_asyncio.fixture(loop_scope="function")
    async def other_store(self, store_factory: StoreFactory) -> AdminStore:
        """A second handle on the same database."""
        return await store_factory()

    @pytest.fixture
    def world(self, store: AdminStore) -> World:
        return World(store)
