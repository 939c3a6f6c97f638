"""The runtime's end-to-end scenarios on the Temporal engine, on SQLite and PostgreSQL.

Each test runs a real worker against the session's dev server on a task
queue of its own; the records, transcripts and stream must be exactly what
the in-process engine produces (the sequences come from ``tests/runtime``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from agentledger.errors import SessionNotFoundError, TransientError, ValidationError
from agentledger.runtime import (
    Agent,
    AwaitClarification,
    ModelPlanner,
    PlanInput,
    PlanResult,
    PlanResumeInput,
    Runtime,
    events,
    tool,
    user_message,
)
from agentledger.runtime.completion import check_lifecycle
from agentledger.storage import RunStatus
from agentledger.storage.payloads import ENGINE_CANCELED, SESSION_ENDED
from agentledger.storage.protocol import Store
from agentledger.testing import ScriptedModel, reply, tool_calls
from agentledger.transcript import ToolResultPart
from tests.engine.temporal.harness import now_ms, temporal_runtime
from tests.runtime.support import records, types, valid_transcript
from tests.runtime.test_tool_loop import TOOL_LOOP, weather


def chat(model: ScriptedModel, *, tools: Any = (), **agent: Any) -> Any:
    """A setup registering one ModelPlanner agent ``chat`` over ``model``."""

    def setup(runtime: Runtime) -> None:
        runtime.register_model("m", model)
        runtime.register_agent(
            Agent("chat", ModelPlanner("m", system="Be brief."), tools=tools, **agent)
        )

    return setup


class Gate:
    """A slow tool's switch: the test sees it start, and whether it was interrupted."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.interrupted = asyncio.Event()

    def tool(self) -> Any:
        @tool
        async def slow(seconds: int) -> str:
            """Take a long time."""
            self.started.set()
            try:
                await asyncio.sleep(seconds)
            except asyncio.CancelledError:
                self.interrupted.set()
                raise
            return "done"

        return slow


def slow_chat(gate: Gate) -> Any:
    return chat(
        ScriptedModel([tool_calls(("c1", "slow", {"seconds": 60})), reply("never")]),
        tools=[gate.tool()],
    )


async def test_tool_loop(temporal_client: Client, store: Store, session: str) -> None:
    """[R1] [T5] two parallel tool calls then an answer: the in-process record sequence."""
    model = ScriptedModel(
        [
            tool_calls(("c1", "weather", {"city": "Paris"}), ("c2", "weather", {"city": "Tokyo"})),
            reply("Paris 21C, Tokyo 21C."),
        ]
    )
    async with temporal_runtime(temporal_client, store, chat(model, tools=[weather])) as runtime:
        out = await runtime.agent_client("chat").run(session, [user_message("Weather?")])
        assert out.status is RunStatus.COMPLETED
        assert out.text == "Paris 21C, Tokyo 21C."
        assert await types(store, out.run_id) == TOOL_LOOP
        messages = await valid_transcript(store, out.run_id)
        assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
        stored = await records(store, out.run_id)
        published = [
            e
            for e in runtime.stream.for_run(out.run_id)  # type: ignore[union-attr]
            if not isinstance(e, events.ModelDelta)  # live model output has no record
        ]
        assert [e.key for e in published] == [f"{r.run_id}/{r.event_key}" for r in stored]
        assert isinstance(published[-1], events.RunCompleted)
        info = await runtime.engine.describe(out.run_id)
        assert info is not None
        assert info.status == "completed"
        assert info.closed_at is not None
        assert not info.cancel_requested


async def test_child_runs_are_child_workflows(
    temporal_client: Client, store: Store, session: str
) -> None:
    """[L2] [O2] an agent used as a tool runs as a child workflow whose id is the child run id."""
    boss = ScriptedModel(
        [tool_calls(("c1", "helper", {"request": "What is 6*7?"})), reply("It is 42.")]
    )
    helper = ScriptedModel([reply("42")])

    def setup(runtime: Runtime) -> None:
        runtime.register_model("boss", boss)
        runtime.register_model("helper", helper)
        runtime.register_agent(Agent("helper", ModelPlanner("helper"), description="Does maths."))
        runtime.register_agent(Agent("boss", ModelPlanner("boss"), agents=["helper"]))

    async with temporal_runtime(temporal_client, store, setup) as runtime:
        out = await runtime.agent_client("boss").run(session, [user_message("6*7?")])
    assert out.status is RunStatus.COMPLETED
    assert out.text == "It is 42."
    child_id = f"{out.run_id}.c1"
    assert "child_run_linked" in await types(store, out.run_id)
    child = await store.load_run(child_id)
    assert child.parent_run_id == out.run_id
    assert child.status is RunStatus.COMPLETED
    assert (await types(store, child_id))[0] == "run_started"
    result = (await valid_transcript(store, out.run_id))[2].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.content == "42"
    described = await temporal_client.get_workflow_handle(child_id).describe()
    assert described.parent_id == out.run_id
    assert described.status is WorkflowExecutionStatus.COMPLETED


class AskFirst:
    """Asks a clarifying question, then answers with what it was told."""

    async def plan_start(self, input: PlanInput) -> PlanResult:
        return PlanResult(await_=AwaitClarification(question="Which city?"))

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        assert input.answer is not None
        return PlanResult.answer(f"Sunny in {input.answer.text}.")


async def test_suspension_then_resume_in_a_new_workflow(
    temporal_client: Client, store: Store, session: str
) -> None:
    """[L6] [K1] the workflow ends with the checkpoint stored; resume is a new workflow."""

    def setup(runtime: Runtime) -> None:
        runtime.register_agent(Agent("ask", AskFirst()))

    async with temporal_runtime(temporal_client, store, setup) as runtime:
        client = runtime.agent_client("ask")
        first = await client.run(session, [user_message("Weather?")])
        assert first.status is RunStatus.SUSPENDED
        assert first.awaiting is not None
        assert first.awaiting.question == "Which city?"
        assert (await types(store, first.run_id))[-1] == "run_suspended"
        assert (await store.load_run(first.run_id)).status is RunStatus.SUSPENDED
        closed = await temporal_client.get_workflow_handle(first.run_id).describe()
        assert closed.status is WorkflowExecutionStatus.COMPLETED
        second = await client.resume(session, first.run_id, "Oslo")
    assert second.status is RunStatus.COMPLETED
    assert second.text == "Sunny in Oslo."
    assert (await store.load_run(first.run_id)).successor_run_id == second.run_id
    started = (await records(store, second.run_id))[0]
    assert first.run_id.encode() in started.payload  # [K2] the predecessor is in run_started
    messages = await valid_transcript(store, second.run_id)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert (await temporal_client.get_workflow_handle(second.run_id).describe()).status is (
        WorkflowExecutionStatus.COMPLETED
    )


async def test_cancel_with_a_reason(temporal_client: Client, store: Store, session: str) -> None:
    """[C1] RunHandle.cancel records the reason, then Temporal cancels the tool in flight."""
    gate = Gate()
    async with temporal_runtime(temporal_client, store, slow_chat(gate)) as runtime:
        handle = await runtime.agent_client("chat").start(session, [user_message("go")])
        await asyncio.wait_for(gate.started.wait(), 30)
        await handle.cancel("user pressed stop")
        out = await asyncio.wait_for(handle.wait(), 30)
        await asyncio.wait_for(gate.interrupted.wait(), 30)
    assert out.status is RunStatus.CANCELED
    assert out.cancellation_reason == "user pressed stop"
    kinds = await types(store, handle.run_id)
    assert kinds.count("runtime.cancellation_intent") == 1
    assert kinds[-3:] == ["tool_result_received", "transcript_messages_appended", "run_completed"]
    meta = await store.load_run(handle.run_id)
    assert meta.cancellation_reason == "user pressed stop"
    final = check_lifecycle(meta, await records(store, handle.run_id))
    assert b"user pressed stop" in final.payload
    result = (await valid_transcript(store, handle.run_id))[-1].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.is_error


async def test_engine_cancel_without_a_reason(
    temporal_client: Client, store: Store, session: str
) -> None:
    """[C3] a cancel sent straight to Temporal ends the run engine_canceled, no intent."""
    gate = Gate()
    async with temporal_runtime(temporal_client, store, slow_chat(gate)) as runtime:
        handle = await runtime.agent_client("chat").start(session, [user_message("go")])
        await asyncio.wait_for(gate.started.wait(), 30)
        await temporal_client.get_workflow_handle(handle.run_id).cancel()
        out = await asyncio.wait_for(handle.wait(), 30)
        info = await runtime.engine.describe(handle.run_id)
    assert out.status is RunStatus.CANCELED
    assert out.cancellation_reason == ENGINE_CANCELED
    assert info is not None
    assert info.cancel_requested
    assert info.status == "completed"
    assert "runtime.cancellation_intent" not in await types(store, handle.run_id)
    meta = await store.load_run(handle.run_id)
    assert meta.cancellation_reason == ""
    check_lifecycle(meta, await records(store, handle.run_id))
    await valid_transcript(store, handle.run_id)


async def test_ended_session_stops_before_any_work(
    temporal_client: Client, store: Store, session: str
) -> None:
    """[C2] a run on an ended session: run_started, a canceled run_completed, no planner call."""
    model = ScriptedModel([])
    await store.end_session(session, ended_at=now_ms())  # type: ignore[attr-defined]
    async with temporal_runtime(temporal_client, store, chat(model)) as runtime:
        out = await runtime.agent_client("chat").run(session, [user_message("hi")])
    assert out.status is RunStatus.CANCELED
    assert out.cancellation_reason == SESSION_ENDED
    assert await types(store, out.run_id) == ["run_started", "run_completed"]
    assert model.requests == []


async def test_planner_failure_fails_the_run(
    temporal_client: Client, store: Store, session: str
) -> None:
    """A planner that raises fails the run with a planner_error, recorded once."""

    class Broken:
        async def plan_start(self, input: PlanInput) -> PlanResult:
            raise RuntimeError("model offline")

        async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
            raise AssertionError("not reached")

    def setup(runtime: Runtime) -> None:
        runtime.register_agent(Agent("broken", Broken()))

    async with temporal_runtime(temporal_client, store, setup) as runtime:
        out = await runtime.agent_client("broken").run(session, [user_message("hi")])
    assert out.status is RunStatus.FAILED
    assert out.failure is not None
    assert out.failure.kind == "planner_error"
    assert "model offline" in out.failure.message
    kinds = await types(store, out.run_id)
    assert kinds[-1] == "run_completed"
    assert kinds.count("run_completed") == 1


async def test_a_failed_start_raises_the_store_error(temporal_client: Client, store: Store) -> None:
    """[O1] the engine accepts the workflow; the start activity's ContractError reaches wait()."""
    async with temporal_runtime(temporal_client, store, chat(ScriptedModel([]))) as runtime:
        handle = await runtime.agent_client("chat").start("no-such-session", [user_message("hi")])
        with pytest.raises(SessionNotFoundError) as caught:
            await handle.wait()
    assert caught.value.id == "no-such-session"


async def test_transient_tool_errors_are_retried_by_temporal(
    temporal_client: Client, store: Store, session: str
) -> None:
    """A TransientError is retried with the retry policy; the record is written once [X1]."""
    attempts: list[int] = []

    @tool
    async def flaky() -> str:
        """Fails twice, then works."""
        attempts.append(1)
        if len(attempts) < 3:
            raise TransientError("try again", operation="flaky")
        return "ok"

    model = ScriptedModel([tool_calls(("c1", "flaky", {})), reply("fine")])
    async with temporal_runtime(temporal_client, store, chat(model, tools=[flaky])) as runtime:
        out = await runtime.agent_client("chat").run(session, [user_message("go")])
    assert out.status is RunStatus.COMPLETED
    assert len(attempts) == 3
    assert (await types(store, out.run_id)).count("tool_result_received") == 1
    result = (await valid_transcript(store, out.run_id))[2].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.content == "ok"
    assert not result.is_error


async def test_a_run_id_is_started_once(
    temporal_client: Client, store: Store, session: str
) -> None:
    """One workflow per run id: starting the same id again is refused, nothing is written."""
    model = ScriptedModel([reply("one")])
    async with temporal_runtime(temporal_client, store, chat(model)) as runtime:
        client = runtime.agent_client("chat")
        out = await client.run(session, [user_message("hi")], run_id="run-once-" + session)
        with pytest.raises(ValidationError):
            await client.start(session, [user_message("again")], run_id=out.run_id)
    assert (await types(store, out.run_id)).count("run_started") == 1
