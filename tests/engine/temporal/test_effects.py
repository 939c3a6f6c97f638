"""Tool effects on the Temporal engine: a keyed tool's retry keeps its key (Temporal's
activity attempt is the call's attempt); a once call whose result's write was lost is in
doubt, never run again by the retry, and the host's answer continues the run."""

from __future__ import annotations

from temporalio.client import Client

from agentledger.runtime import (
    Agent,
    ModelPlanner,
    Runtime,
    ToolHappened,
    ToolRetry,
    idempotency_key,
)
from agentledger.storage import RunStatus
from agentledger.storage.protocol import Store
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.engine.temporal.harness import temporal_runtime
from tests.runtime.support import records, valid_transcript
from tests.runtime.test_effects import Ledger, LoseWrite


async def test_keyed_and_once_tools_on_temporal(
    temporal_client: Client, store: Store, session: str
) -> None:
    keyed, once = Ledger(), Ledger()
    lossy = LoseWrite(store, "turn:2:tool:o1:result")

    def setup(runtime: Runtime) -> None:
        runtime.register_model(
            "m",
            ScriptedModel(
                [
                    tool_calls(("k1", "book", {"to": "a"})),
                    tool_calls(("o1", "send", {"to": "b"})),
                    reply("Done."),
                ]
            ),
        )
        tools = [keyed.tool("keyed", name="book", fail_first=True), once.tool("once")]
        runtime.register_agent(Agent("chat", ModelPlanner("m"), tools=tools))

    async with temporal_runtime(temporal_client, lossy, setup) as runtime:
        client = runtime.agent_client("chat")
        first = await client.run(session, "Book, then send", run_id=f"t-{session}")
        assert first.status is RunStatus.SUSPENDED, first.failure
        assert first.awaiting is not None
        assert first.awaiting.in_doubt is not None
        assert first.awaiting.in_doubt.tool_call_id == "o1"
        run_key = idempotency_key(first.run_id, "k1")
        assert keyed.calls == [(run_key, 1, "a"), (run_key, 2, "a")]
        assert len(once.calls) == 1  # the retried activity did not run it again
        done = await client.resume(session, first.run_id, ToolRetry(by="ops"))
    assert done.status is RunStatus.COMPLETED, done.failure
    send_key = idempotency_key(first.run_id, "o1")
    assert once.calls == [(send_key, 1, "b"), (send_key, 2, "b")]
    kinds = [r.type for r in await records(store, done.run_id)]
    assert kinds.count("tool_call_answered") == kinds.count("tool_call_started") == 1
    await valid_transcript(store, done.run_id)


async def test_a_child_in_doubt_on_temporal(
    temporal_client: Client, store: Store, session: str
) -> None:
    """A child workflow's once call in doubt suspends the parent workflow; the decision,
    given to the parent, reaches the child."""
    once = Ledger()
    lossy = LoseWrite(store, "turn:1:tool:c1:result")

    def setup(runtime: Runtime) -> None:
        runtime.register_model(
            "boss", ScriptedModel([tool_calls(("p1", "mailer", {"request": "go"})), reply("Ok.")])
        )
        runtime.register_model(
            "worker", ScriptedModel([tool_calls(("c1", "send", {"to": "x"})), reply("Mailed.")])
        )
        mailer = Agent("mailer", ModelPlanner("worker"), tools=[once.tool("once")])
        runtime.register_agent(mailer)
        runtime.register_agent(Agent("chat", ModelPlanner("boss"), agents=["mailer"]))

    async with temporal_runtime(temporal_client, lossy, setup) as runtime:
        client = runtime.agent_client("chat")
        first = await client.run(session, "Mail", run_id=f"tc-{session}")
        assert first.status is RunStatus.SUSPENDED, first.failure
        assert first.awaiting is not None
        assert first.awaiting.kind == "in_doubt"
        assert first.awaiting.run_id == f"tc-{session}.p1"
        done = await client.resume(session, first.run_id, ToolHappened("mailed"))
    assert done.status is RunStatus.COMPLETED, done.failure
    assert done.text == "Ok."
    assert len(once.calls) == 1
