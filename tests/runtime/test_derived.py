"""[G2] A fork into another session copies its history and names where it came from; the
store lists the copy for the source session, on every backend and through the service."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from agentledger.runtime import Agent, Compaction, ModelPlanner, Runtime
from agentledger.storage import RunStatus, payloads
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


async def test_a_compaction_of_a_copied_history_is_listed_with_the_copy(
    every_store: Any, every_session: str
) -> None:
    """[G2] after a fork into another session, a compaction there that summarises the copied
    turns is listed for the source session with the copy, naming its window record; a
    cascade purge takes both with the holding session."""
    runtime = Runtime(every_store)
    runtime.register_model("m", ScriptedModel([reply("y" * 200) for _ in range(8)]))
    runtime.register_model("summariser", ScriptedModel([reply(f"sum {i}") for i in range(8)]))
    policy = Compaction("summariser", threshold_tokens=300, keep_tokens=120)
    runtime.register_agent(Agent("chat", ModelPlanner("m", system="Answer."), history=policy))
    client = runtime.agent_client("chat")
    first = await client.run(every_session, "one")
    assert first.status is RunStatus.COMPLETED, first.failure
    other = f"s-{uuid.uuid4().hex}"
    await every_store.create_session(other, created_at=now_ms())
    previous = (await client.fork(first.run_id, "two", session_id=other)).run_id
    copy = (await every_store.list_derived_copies(every_session))[0]
    for i in range(4):
        out = await client.run(other, f"more {i}", after=previous)
        assert out.status is RunStatus.COMPLETED, out.failure
        previous = out.run_id
    listed = await every_store.list_derived_copies(every_session)
    summaries = listed[1:]
    assert listed[0] == copy
    assert summaries, listed
    for summary in summaries:
        (window,) = [
            r for r in await records(every_store, summary.run_id) if r.id == summary.summary
        ]
        body = payloads.TranscriptWindow.decode(window.payload)
        assert body.summary
        assert copy.run_id in [r.run_id for r in body.replaces]
        assert (summary.session_id, summary.source) == (other, copy.source)
    for sid in (every_session, other):
        await every_store.end_session(sid, ended_at=now_ms())
    receipt = await every_store.purge_session(every_session, cascade=True)
    assert (receipt.cascaded, receipt.derived) == ([other], [])
    assert await every_store.list_derived_copies(every_session) == []
