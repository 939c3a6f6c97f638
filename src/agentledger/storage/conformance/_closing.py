"""Conformance: a closed store refuses every call with one typed error.

Whatever the backend, a call on a handle after ``close()`` raises
``StoreClosedError`` (a permanent refusal: engines do not retry it), and
closing twice is a no-op.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from agentledger.errors import StoreClosedError
from agentledger.storage.conformance._base import ConformanceBase, StoreFactory
from agentledger.storage.conformance._world import AdminStore, World

__all__ = ["ClosingConformance"]


class ClosingConformance(ConformanceBase):
    """A handle used after ``close()``: StoreClosedError on reads and writes alike."""

    async def test_a_closed_store_refuses_every_call_the_same_way(
        self, store_factory: StoreFactory, world: World
    ) -> None:
        session = await world.session("open")
        handle = await store_factory()
        await handle.close()
        await handle.close()  # a second close is a no-op
        calls: list[Callable[[AdminStore], Awaitable[object]]] = [
            lambda s: s.load_session(session),
            lambda s: s.list_sessions(),
            lambda s: s.list_runs_by_session(session),
            lambda s: s.load_run(world.id("no-run")),
            lambda s: s.list_run_records(world.id("no-run")),
            lambda s: s.create_session(world.id("after-close"), created_at=world.now()),
            lambda s: s.end_session(session, ended_at=world.now()),
        ]
        backends = set()
        for call in calls:
            with pytest.raises(StoreClosedError) as refused:
                await call(handle)
            assert refused.value.backend, refused.value  # names the backend
            backends.add(refused.value.backend)
        assert len(backends) == 1, backends
