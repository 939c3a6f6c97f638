"""[G2] A fork into another session on the Temporal engine names its source, as in process."""

from __future__ import annotations

import uuid

from temporalio.client import Client

from agentledger.runtime import Agent, ModelPlanner, Runtime
from agentledger.storage import CopiedFrom, DerivedCopy, RunStatus
from agentledger.storage.protocol import AdminStore
from agentledger.testing import ScriptedModel, reply
from tests.engine.temporal.harness import temporal_runtime
from tests.runtime.support import now_ms


async def test_a_fork_into_another_session_names_its_source_on_temporal(
    temporal_client: Client, store: AdminStore, session: str
) -> None:
    def setup(runtime: Runtime) -> None:
        runtime.register_model("m", ScriptedModel([reply("Paris."), reply("Lyon.")]))
        runtime.register_agent(Agent("chat", ModelPlanner("m", system="Answer.")))

    other = f"s-{uuid.uuid4().hex}"
    await store.create_session(other, created_at=now_ms())
    async with temporal_runtime(temporal_client, store, setup) as runtime:
        client = runtime.agent_client("chat")
        first = await client.run(session, "Where?")
        fork = await client.fork(first.run_id, "And else?", session_id=other)
    assert first.status is RunStatus.COMPLETED, first.failure
    assert fork.status is RunStatus.COMPLETED, fork.failure
    through = (await store.load_run(first.run_id)).last_record_id
    source = CopiedFrom(session_id=session, run_id=first.run_id, through=through)
    assert await store.list_derived_copies(session) == [
        DerivedCopy(session_id=other, run_id=fork.run_id, source=source)
    ]
