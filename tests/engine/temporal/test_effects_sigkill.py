"""A tool's worker SIGKILLed after the tool acted and before its result was saved.

Real worker processes (``agentledger worker``); the tool does its side effect
(a line in a counter file outside the store, and a POST with the call's
idempotency key to a loopback stub server that deduplicates on the
``Idempotency-Key`` header), then kills its own process on the call's first
attempt. Temporal retries the lost attempt on the next worker:

* ``once``: the retry does not call the tool again; the run suspends with the
  call in doubt, and ``ToolHappened`` completes it. One effect.
* ``retry``: the tool runs again, with the same key, as attempt 2. Two effects.
* ``keyed``: the tool runs again with the same key; the stub server sees two
  requests and makes one effect of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from agentledger.runtime import ToolHappened, idempotency_key, user_message
from agentledger.storage import RunStatus
from agentledger.storage.protocol import Store
from tests.engine.temporal import crashing
from tests.runtime.support import records, valid_transcript

HANG_GUARD = 240.0
"""Seconds a run may take before the test calls it hung (it takes a few)."""


@pytest.fixture
def stub() -> Iterator[crashing.StubEffects]:
    server = crashing.StubEffects()
    try:
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("store_kind", ["sqlite"])
async def test_a_once_tool_killed_after_acting_is_in_doubt_and_acted_once(
    temporal_address: str,
    temporal_client: Client,
    store: Store,
    worker_db: str,
    tmp_path: Path,
    stub: crashing.StubEffects,
) -> None:
    """The side effect happened exactly once; the run waits in doubt; ToolHappened
    completes it with the host's result."""
    env = {crashing.STUB_ENV: stub.url}
    async with crashing.crashing_workers(
        temporal_address, temporal_client, store, worker_db, tmp_path, env
    ) as s:
        s.mode.write_text("after")
        client = s.client_for["effect_once"]
        handle = await client.start(s.session, [user_message("go")])
        out = await asyncio.wait_for(handle.wait(), HANG_GUARD)
        key = idempotency_key(handle.run_id, "c1")
        assert out.status is RunStatus.SUSPENDED, out.failure
        assert out.awaiting is not None
        assert out.awaiting.kind == "in_doubt"
        assert out.awaiting.in_doubt is not None
        assert (out.awaiting.in_doubt.tool_call_id, out.awaiting.in_doubt.key) == ("c1", key)
        assert crashing.effects(s.counter) == [(key, 1)]  # acted once, never called again
        assert stub.posts == [key]

        done = await asyncio.wait_for(
            client.resume(s.session, handle.run_id, ToolHappened(result="sent", by="ops")),
            HANG_GUARD,
        )
        assert done.status is RunStatus.COMPLETED, done.failure
        assert done.text == "sent"
        assert crashing.effects(s.counter) == [(key, 1)]
        kinds = [r.type for r in await records(store, done.run_id)]
        assert kinds.count("tool_call_answered") == 1
        await valid_transcript(store, done.run_id)


@pytest.mark.parametrize("store_kind", ["sqlite"])
@pytest.mark.parametrize("effect", ["retry", "keyed"])
async def test_a_retry_or_keyed_tool_killed_after_acting_runs_again_with_its_key(
    effect: str,
    temporal_address: str,
    temporal_client: Client,
    store: Store,
    worker_db: str,
    tmp_path: Path,
    stub: crashing.StubEffects,
) -> None:
    """The tool runs twice with the same key, attempt 1 then 2, and the run completes;
    the stub server, deduplicating on the key, made one effect of the two requests."""
    env = {crashing.STUB_ENV: stub.url}
    async with crashing.crashing_workers(
        temporal_address, temporal_client, store, worker_db, tmp_path, env
    ) as s:
        s.mode.write_text("after")
        client = s.client_for[f"effect_{effect}"]
        handle = await client.start(s.session, [user_message("go")])
        done = await asyncio.wait_for(handle.wait(), HANG_GUARD)
        assert done.status is RunStatus.COMPLETED, done.failure
        assert done.text == "x happened"
        key = idempotency_key(handle.run_id, "c1")
        assert crashing.effects(s.counter) == [(key, 1), (key, 2)]
        assert stub.posts == [key, key]
        assert stub.effects == {key: "x"}  # the keyed system acted once
        await valid_transcript(store, done.run_id)


@pytest.mark.parametrize("store_kind", ["sqlite"])
@pytest.mark.parametrize("effect", ["once", "retry"])
async def test_a_later_call_killed_after_acting_keeps_its_effect_class(
    effect: str,
    temporal_address: str,
    temporal_client: Client,
    store: Store,
    worker_db: str,
    tmp_path: Path,
    stub: crashing.StubEffects,
) -> None:
    """Turn 2's lone call, run in an activity with the turn after it, killed after acting:
    ``once`` is in doubt (acted once, the turn after it not started), ``retry`` runs again
    with the same key as attempt 2 and the run completes."""
    env = {crashing.STUB_ENV: stub.url}
    async with crashing.crashing_workers(
        temporal_address, temporal_client, store, worker_db, tmp_path, env
    ) as s:
        s.mode.write_text("after")
        client = s.client_for[f"effect_{effect}_later"]
        handle = await client.start(s.session, [user_message("go")])
        out = await asyncio.wait_for(handle.wait(), HANG_GUARD)
        key = idempotency_key(handle.run_id, "c2")
        if effect == "once":
            assert out.status is RunStatus.SUSPENDED, out.failure
            assert out.awaiting is not None
            assert out.awaiting.kind == "in_doubt"
            assert out.awaiting.in_doubt is not None
            assert (out.awaiting.in_doubt.tool_call_id, out.awaiting.in_doubt.key) == ("c2", key)
            assert crashing.effects(s.counter) == [(key, 1)]
            out = await asyncio.wait_for(
                client.resume(s.session, handle.run_id, ToolHappened(result="sent", by="ops")),
                HANG_GUARD,
            )
            assert out.text == "sent"
        else:
            assert crashing.effects(s.counter) == [(key, 1), (key, 2)]
            assert out.text == "x happened"
        assert out.status is RunStatus.COMPLETED, out.failure
        messages = await valid_transcript(store, out.run_id)
        assert messages[-1].role == "assistant"
