"""A steering message on Temporal: the running run takes it at its next planner turn."""

from __future__ import annotations

import asyncio

from temporalio.client import Client

from agentledger.runtime import Agent, Runtime, tool
from agentledger.storage import MessageFate, RunStatus
from agentledger.storage.protocol import Store
from agentledger.transcript import validate_planner_transcript
from tests.engine.temporal.harness import temporal_runtime
from tests.runtime.test_busy_steer import Steerable

_WITHIN = 60


async def test_steer_joins_the_running_run(
    temporal_client: Client, store: Store, session: str
) -> None:
    planner = Steerable()
    started, release = asyncio.Event(), asyncio.Event()

    @tool
    async def slow() -> str:
        started.set()
        await release.wait()
        return "found"

    def setup(runtime: Runtime) -> None:
        runtime.register_agent(Agent("chat", planner, tools=[slow]))

    async with temporal_runtime(temporal_client, store, setup) as runtime:
        client = runtime.agent_client("chat")
        first = await client.start(session, "look it up", if_busy="queue")
        await asyncio.wait_for(started.wait(), _WITHIN)
        steer = await client.start(session, "also mention cats", if_busy="steer")
        assert steer.message.fate is MessageFate.STEERING
        release.set()
        out = await asyncio.wait_for(first.wait(), _WITHIN)
        assert out.status is RunStatus.COMPLETED
        assert planner.seen[-1] == ["look it up", "also mention cats"]
        assert out.text == "re: look it up / also mention cats"
        validate_planner_transcript(await runtime.transcript(first.run_id))
        joined = await asyncio.wait_for(steer.wait(), _WITHIN)
        assert joined.run_id == first.run_id
        stored = await store.list_session_messages(session)
        assert [m.fate for m in stored] == [MessageFate.START, MessageFate.STEERED]
        assert [r.run_id for r in await store.list_runs_by_session(session)] == [first.run_id]
