"""[G2] A fork into another session copies its history and names where it came from; the
store lists the copy for the source session, on every backend and through the service."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from agentledger.runtime import Agent, ModelPlanner, Runtime
from agentledger.storage import RunStatus
from agentledger.storage.derivation import HISTORY_COPIED, CopiedFrom, DerivedCopy
from agentledger.testing import ScriptedModel, reply
from tests.runtime.support import now_ms, records


def _runtime(store: Any) -> Runtime:
    runtime = Runtime(store)
    runtime.register_model(
        "m", ScriptedModel([reply("Paris."), reply("Lyon too."), reply("Nice.")])
    )
    runtime.register_agent(Agent("chat", ModelPlanner("m", system="Answer.")))
    return runtime


async def test_a_fork_into_another_session_names_its_source(
    every_store: Any, every_session: str
) -> None:
    client = _runtime(every_store).agent_client("chat")
    first = await client.run(every_session, "Where?")
    assert first.status is RunStatus.COMPLETED, first.failure
    through = (await every_store.load_run(first.run_id)).last_record_id
    other = f"s-{uuid.uuid4().hex}"
    await every_store.create_session(other, created_at=now_ms())
    fork = await client.fork(first.run_id, "And else?", session_id=other)
    assert fork.status is RunStatus.COMPLETED, fork.failure
    source = CopiedFrom(session_id=every_session, run_id=first.run_id, through=through)
    stored = [r for r in await records(every_store, fork.run_id) if r.type == HISTORY_COPIED]
    assert [msgspec.json.decode(r.payload, type=CopiedFrom) for r in stored] == [source]
    assert await every_store.list_derived_copies(every_session) == [
        DerivedCopy(session_id=other, run_id=fork.run_id, source=source)
    ]
    same = await client.fork(first.run_id, "Or?")  # in its own session: a reference, no copy
    assert same.status is RunStatus.COMPLETED, same.failure
    assert len(await every_store.list_derived_copies(every_session)) == 1
