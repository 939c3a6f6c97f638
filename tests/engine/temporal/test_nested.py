"""Nested suspension on the Temporal engine: a grandchild's question suspends every level.

The same scenario as ``tests/runtime/test_nested.py``, through a real worker
and dev server: each run is a workflow (children as child workflows), and
one ``resume`` on the top run continues the chain from the bottom up.
"""

from __future__ import annotations

from temporalio.client import Client, WorkflowExecutionStatus

from agentledger.runtime import Agent, ModelPlanner, Runtime
from agentledger.storage import RunStatus
from agentledger.storage.protocol import Store
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.engine.temporal.harness import temporal_runtime
from tests.runtime.support import valid_transcript
from tests.runtime.test_nested import _Asker, _chain, _children


async def test_a_grandchild_question_suspends_every_level(
    temporal_client: Client, store: Store, session: str
) -> None:
    """top -> middle -> bottom; bottom asks twice: two resumes on the top unwind the
    chain, every run a workflow, every transcript valid."""

    def setup(runtime: Runtime) -> None:
        runtime.register_model(
            "top",
            ScriptedModel([tool_calls(("t1", "middle", {"request": "plan"})), reply("All set.")]),
        )
        runtime.register_model(
            "middle",
            ScriptedModel([tool_calls(("m1", "bottom", {"request": "ask"})), reply("Planned.")]),
        )
        runtime.register_agent(Agent("bottom", _Asker("Which city?", "Which month?")))
        runtime.register_agent(Agent("middle", ModelPlanner("middle"), agents=["bottom"]))
        runtime.register_agent(Agent("top", ModelPlanner("top"), agents=["middle"]))

    async with temporal_runtime(temporal_client, store, setup) as runtime:
        client = runtime.agent_client("top")
        first = await client.run(session, "Plan a trip")
        assert first.status is RunStatus.SUSPENDED
        assert first.awaiting is not None
        assert (first.awaiting.question, first.awaiting.agent_id) == ("Which city?", "bottom")
        second = await client.resume(session, first.run_id, "Rome")
        assert second.awaiting is not None
        assert second.awaiting.question == "Which month?"
        third = await client.resume(session, second.run_id, "May")
    assert third.status is RunStatus.COMPLETED
    assert third.text == "All set."
    tops = await _chain(store, first.run_id)
    assert tops == [first.run_id, second.run_id, third.run_id]
    middles = [c for r in tops for c in await _children(store, r)]
    bottoms = [c for r in middles for c in await _children(store, r)]
    assert (len(middles), len(bottoms)) == (3, 3)
    assert await _chain(store, bottoms[0]) == bottoms
    for run_id in [*tops, *middles, *bottoms]:
        await valid_transcript(store, run_id)
        described = await temporal_client.get_workflow_handle(run_id).describe()
        assert described.status is WorkflowExecutionStatus.COMPLETED
    last = await valid_transcript(store, bottoms[-1])
    assert last[-1].parts[0].text == "You said Rome and May."  # type: ignore[union-attr]
    for bottom, middle in zip(bottoms, middles, strict=True):
        assert (await store.load_run(bottom)).parent_run_id == middle
