"""A message while a run is busy, on Temporal: queue and interrupt, and messages at once."""

from __future__ import annotations

import asyncio

from temporalio.client import Client

from agentledger.runtime import Agent, Runtime
from agentledger.runtime.busy import interruption_reason
from agentledger.storage import MessageFate, RunStatus
from agentledger.storage.protocol import Store
from agentledger.transcript import decode_message
from tests.engine.temporal.harness import temporal_runtime
from tests.runtime.test_busy import Echo, _text

_WITHIN = 60


async def test_queue_and_interrupt(temporal_client: Client, store: Store, session: str) -> None:
    planner = Echo()

    def setup(runtime: Runtime) -> None:
        runtime.register_agent(Agent("chat", planner, if_busy="queue"))

    async with temporal_runtime(temporal_client, store, setup) as runtime:
        client = runtime.agent_client("chat")
        first = await client.start(session, "please wait")
        await asyncio.wait_for(planner.holding.wait(), _WITHIN)
        queued = await client.start(session, "two")
        stop = await client.start(session, "stop", if_busy="interrupt")
        assert (queued.message.fate, stop.message.fate) == (
            MessageFate.QUEUED, MessageFate.INTERRUPTING
        )  # fmt: skip
        ended = await asyncio.wait_for(first.wait(), _WITHIN)
        assert ended.status is RunStatus.CANCELED
        assert ended.cancellation_reason == interruption_reason(stop.run_id)
        assert (await asyncio.wait_for(queued.wait(), _WITHIN)).text == "re: two (2 user messages)"
        assert (await asyncio.wait_for(stop.wait(), _WITHIN)).text == "re: stop (3 user messages)"
        assert await store.load_pending_messages(session) == []


async def test_messages_at_once(temporal_client: Client, store: Store, session: str) -> None:
    planner = Echo()

    def setup(runtime: Runtime) -> None:
        runtime.register_agent(Agent("chat", planner, if_busy="queue"))

    async with temporal_runtime(temporal_client, store, setup) as runtime:
        client = runtime.agent_client("chat")
        handles = await asyncio.gather(*(client.start(session, f"m{i}") for i in range(6)))
        outputs = await asyncio.wait_for(asyncio.gather(*(h.wait() for h in handles)), _WITHIN)
        pairs = zip(handles, outputs, strict=True)
        by_position = sorted(pairs, key=lambda p: p[0].message.position)
        for i, (handle, out) in enumerate(by_position):
            said = _text(decode_message(handle.message.message))
            assert out.text == f"re: {said} ({i + 1} user messages)"
