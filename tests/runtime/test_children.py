"""End to end: agents used as tools run as child runs ([L2] in a session, [L4] one-shot)."""

from __future__ import annotations

from agentledger.runtime import (
    Agent,
    ModelPlanner,
    QueueSink,
    Runtime,
    agent_tool,
    events,
    user_message,
)
from agentledger.storage import RunStatus, payloads
from agentledger.testing import ScriptedModel, reply, tool_calls
from agentledger.transcript import ToolResultPart
from tests.runtime.support import AnyStore, records, types, valid_transcript

PARENT = [
    "run_started",
    "prompt_rendered",
    "transcript_messages_appended",
    "phase:prompted",
    "phase:planning",
    "model_usage",
    "transcript_messages_appended",
    "phase:executing_tools",
    "tool_call_scheduled",
    "child_run_linked",
    "tool_result_received",
    "transcript_messages_appended",
    "phase:synthesizing",
    "model_usage",
    "transcript_messages_appended",
    "run_completed",
]
CHILD = [
    "run_started",
    "prompt_rendered",
    "transcript_messages_appended",
    "phase:prompted",
    "phase:planning",
    "model_usage",
    "transcript_messages_appended",
    "run_completed",
]


def _runtime(store: AnyStore, sink: QueueSink, research_answer: str = "Built in 1889.") -> Runtime:
    runtime = Runtime(store, stream=sink)
    runtime.register_model(
        "boss",
        ScriptedModel(
            [
                tool_calls(("d1", "research", {"request": "When was the Eiffel Tower built?"})),
                reply("The research agent says: built in 1889."),
            ]
        ),
    )
    runtime.register_model("helper", ScriptedModel([reply(research_answer)]))
    runtime.register_agent(
        Agent(
            "research", ModelPlanner("helper", system="Research."), description="Looks things up."
        )
    )
    runtime.register_agent(
        Agent("chat", ModelPlanner("boss", system="Delegate."), agents=["research"])
    )
    return runtime


async def _check_family(store: AnyStore, parent_id: str, session_id: str) -> str:
    assert await types(store, parent_id) == PARENT
    link = next(r for r in await records(store, parent_id) if r.type == payloads.CHILD_RUN_LINKED)
    linked = payloads.ChildRunLinked.decode(link.payload)
    assert (linked.tool_name, linked.tool_call_id, linked.child_agent_id) == (
        "research",
        "d1",
        "research",
    )
    child = await store.load_run(linked.child_run_id)
    assert child.parent_run_id == parent_id
    assert child.session_id == session_id
    assert child.status is RunStatus.COMPLETED
    assert await types(store, child.run_id) == CHILD
    parent_messages = await valid_transcript(store, parent_id)
    result = parent_messages[2].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.content == "Built in 1889."
    child_messages = await valid_transcript(store, child.run_id)
    assert child_messages[0].parts[0].text == "When was the Eiffel Tower built?"  # type: ignore[union-attr]
    return child.run_id


async def test_agent_as_tool_runs_a_child_run_in_the_session(store: AnyStore, session: str) -> None:
    """[L2] the call starts a child run in the same session; the parent's log shows the link."""
    sink = QueueSink()
    runtime = _runtime(store, sink)
    out = await runtime.agent_client("chat").run(session, [user_message("Eiffel Tower?")])
    assert out.status is RunStatus.COMPLETED
    child_id = await _check_family(store, out.run_id, session)
    runs = await store.list_runs_by_session(session)
    assert [r.run_id for r in runs] == [out.run_id, child_id]
    linked = [e for e in sink.events if isinstance(e, events.ChildRunLinked)]
    assert [e.child_run_id for e in linked] == [child_id]
    child_started = next(e for e in sink.for_run(child_id) if isinstance(e, events.RunStarted))
    assert child_started.parent_run_id == out.run_id


async def test_agent_as_tool_of_a_one_shot_parent(store: AnyStore) -> None:
    """[L4] a one-shot parent's child run is a sessionless child."""
    runtime = _runtime(store, QueueSink())
    out = await runtime.agent_client("chat").run_one_shot([user_message("Eiffel Tower?")])
    assert out.status is RunStatus.COMPLETED
    await _check_family(store, out.run_id, "")


async def test_a_failing_child_is_an_error_result_for_the_parent(
    store: AnyStore, session: str
) -> None:
    """A child run that fails answers the parent's call with an error tool_result."""
    runtime = Runtime(store, stream=QueueSink())
    runtime.register_model(
        "boss",
        ScriptedModel([tool_calls(("d1", "helper", {"request": "x"})), reply("It failed.")]),
    )
    runtime.register_model("empty", ScriptedModel([]))  # the child's model has nothing to say
    runtime.register_agent(Agent("helper", ModelPlanner("empty")))
    runtime.register_agent(Agent("chat", ModelPlanner("boss"), tools=[agent_tool("helper")]))
    out = await runtime.agent_client("chat").run(session, [user_message("go")])
    assert out.status is RunStatus.COMPLETED
    result = (await valid_transcript(store, out.run_id))[2].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.is_error
    assert "agent helper failed" in result.content
    assert "ScriptedModel" in result.content
    child = next(r for r in await store.list_runs_by_session(session) if r.parent_run_id)
    assert child.status is RunStatus.FAILED


async def test_canceling_the_parent_cancels_the_child(store: AnyStore, session: str) -> None:
    """[C1] [C3] [O2] the parent's cancellation reaches its child run, which ends
    engine_canceled; the parent's call gets an interrupted result; both transcripts hold."""
    import asyncio

    from agentledger.runtime import PlanInput, PlanResult, PlanResumeInput

    thinking = asyncio.Event()

    class Stuck:
        async def plan_start(self, input: PlanInput) -> PlanResult:
            thinking.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
            raise AssertionError("unreachable")

    runtime = Runtime(store, stream=QueueSink())
    runtime.register_model(
        "boss", ScriptedModel([tool_calls(("d1", "slowpoke", {"request": "?"}))])
    )
    runtime.register_agent(Agent("slowpoke", Stuck()))
    runtime.register_agent(Agent("chat", ModelPlanner("boss"), agents=["slowpoke"]))
    handle = await runtime.agent_client("chat").start(session, [user_message("go")])
    await asyncio.wait_for(thinking.wait(), 60)
    await handle.cancel("user left")
    out = await asyncio.wait_for(handle.wait(), 60)
    assert out.status is RunStatus.CANCELED
    assert out.cancellation_reason == "user left"
    child = next(r for r in await store.list_runs_by_session(session) if r.parent_run_id)
    assert child.status is RunStatus.CANCELED
    assert child.cancellation_reason == ""
    done = payloads.RunCompleted.decode((await records(store, child.run_id))[-1].payload)
    assert done.cancellation is not None
    assert done.cancellation.reason == payloads.ENGINE_CANCELED
    result = (await valid_transcript(store, out.run_id))[-1].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.is_error
    await valid_transcript(store, child.run_id)
