"""End to end: the standard tool loop, its records, its stream and its memory."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentledger.memory import InMemoryMemory
from agentledger.runtime import (
    Agent,
    PlanInput,
    PlanResult,
    PlanResumeInput,
    QueueSink,
    Runtime,
    ToolCall,
    ToolContext,
    events,
    tool,
    user_message,
)
from agentledger.storage import RunStatus
from agentledger.testing import ScriptedModel, reply, tool_calls
from agentledger.transcript import JsonNumber, ToolResultPart, ToolUsePart
from tests.runtime.support import ONE_CALL, AnyStore, chat_runtime, records, types, valid_transcript

TOOL_LOOP = [
    "run_started",
    "prompt_rendered",
    "transcript_messages_appended",
    "phase:prompted",
    "phase:planning",
    "model_usage",
    "transcript_messages_appended",
    "phase:executing_tools",
    "tool_call_scheduled",
    "tool_call_scheduled",
    "tool_result_received",
    "tool_result_received",
    "transcript_messages_appended",
    "phase:synthesizing",
    "model_usage",
    "transcript_messages_appended",
    "run_completed",
]


@tool
async def weather(city: str, unit: str = "c") -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "temp": 21, "unit": unit}


async def test_two_parallel_tool_calls_then_an_answer(store: AnyStore, session: str) -> None:
    """[R1] [T5] the tool loop writes every step as a record, in order, and the log rebuilds it."""
    model = ScriptedModel(
        [
            tool_calls(("c1", "weather", {"city": "Paris"}), ("c2", "weather", {"city": "Tokyo"})),
            reply("Paris 21C, Tokyo 21C."),
        ]
    )
    runtime = chat_runtime(store, model, tools=[weather])
    out = await runtime.agent_client("chat").run(session, [user_message("Weather?")])
    assert out.status is RunStatus.COMPLETED
    assert out.text == "Paris 21C, Tokyo 21C."
    assert await types(store, out.run_id) == TOOL_LOOP
    messages = await valid_transcript(store, out.run_id)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    results = [p for p in messages[2].parts if isinstance(p, ToolResultPart)]
    assert [r.content["city"] for r in results] == ["Paris", "Tokyo"]
    assert not any(r.is_error for r in results)


async def test_the_model_sees_the_whole_transcript_each_turn(store: AnyStore, session: str) -> None:
    """[R3] each model call gets the system prompt and the whole transcript, last = new delta."""
    model = ScriptedModel([tool_calls(("c1", "weather", {"city": "Oslo"})), reply("Cold.")])
    runtime = chat_runtime(store, model, tools=[weather])
    history = [user_message("hi"), *[reply("hello").message]]
    out = await runtime.agent_client("chat").run(session, [*history, user_message("Oslo?")])
    first, second = model.requests
    assert first.messages[0].role == "system"
    assert [m.role for m in first.messages[1:]] == ["user", "assistant", "user"]
    assert len(second.messages) == len(first.messages) + 2
    assert isinstance(second.messages[-1].parts[0], ToolResultPart)
    assert [t.name for t in first.tools] == ["weather"]
    kinds = await types(store, out.run_id)
    assert kinds[2] == "transcript_messages_seeded"  # [R1] the history, before the new message
    transcript = await valid_transcript(store, out.run_id)
    assert transcript[:3] == [*history, user_message("Oslo?")]


async def test_invalid_tool_input_becomes_an_error_result(store: AnyStore, session: str) -> None:
    """A model-produced input that breaks the schema gets an is_error result naming the problem."""
    model = ScriptedModel([tool_calls(("c1", "weather", {"city": 3, "extra": 1})), reply("Sorry.")])
    runtime = chat_runtime(store, model, tools=[weather])
    out = await runtime.agent_client("chat").run(session, [user_message("Weather?")])
    assert out.status is RunStatus.COMPLETED
    result = (await valid_transcript(store, out.run_id))[2].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.is_error
    assert "invalid input for tool weather" in result.content
    assert "$.city" in result.content or "extra" in result.content


async def test_a_tool_that_raises_gets_an_error_result_and_the_loop_goes_on(
    store: AnyStore, session: str
) -> None:
    """A failing tool is an error tool_result; the planner sees it and answers."""

    @tool
    async def explode(x: int) -> int:
        raise RuntimeError(f"boom {x}")

    model = ScriptedModel([tool_calls(("c1", "explode", {"x": 7})), reply("It failed.")])
    runtime = chat_runtime(store, model, tools=[explode])
    out = await runtime.agent_client("chat").run(session, [user_message("go")])
    assert out.status is RunStatus.COMPLETED
    assert await types(store, out.run_id) == ONE_CALL
    result = (await valid_transcript(store, out.run_id))[2].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.is_error
    assert result.content == "RuntimeError: boom 7"


async def test_unknown_tool_and_non_json_results_are_error_results(
    store: AnyStore, session: str
) -> None:
    """A call to no tool, and a tool returning something JSON cannot hold, are error results."""

    @tool
    async def odd() -> object:
        return object()

    model = ScriptedModel(
        [tool_calls(("c1", "nope", {}), ("c2", "odd", {})), reply("Both failed.")]
    )
    runtime = chat_runtime(store, model, tools=[odd])
    out = await runtime.agent_client("chat").run(session, [user_message("go")])
    first, second = (await valid_transcript(store, out.run_id))[2].parts
    assert isinstance(first, ToolResultPart)
    assert first.is_error
    assert "unknown tool 'nope'" in first.content
    assert isinstance(second, ToolResultPart)
    assert second.is_error
    assert "not JSON" in second.content


async def test_exact_numbers_survive_tool_input_and_output(store: AnyStore, session: str) -> None:
    """[T4] numbers the model wrote reach the tool and the log without float rounding."""
    seen: list[Any] = []

    @tool
    async def echo(value: dict[str, Any]) -> dict[str, Any]:
        seen.append(value)
        return value

    big = JsonNumber("1e400")
    model = ScriptedModel(
        [tool_calls(("c1", "echo", {"value": {"x": big, "n": 10**30}})), reply("ok")]
    )
    runtime = chat_runtime(store, model, tools=[echo])
    out = await runtime.agent_client("chat").run(session, [user_message("go")])
    assert seen == [{"x": big, "n": 10**30}]
    stored = [r for r in await records(store, out.run_id) if r.type == "tool_result_received"]
    assert b'"x":1e400' in stored[0].payload
    assert b"1000000000000000000000000000000" in stored[0].payload


async def test_stream_events_mirror_records_with_stable_keys(store: AnyStore, session: str) -> None:
    """Every published event but model_delta derives from a stored record and carries
    ``run_id/event_key``."""
    sink = QueueSink()
    model = ScriptedModel([tool_calls(("c1", "weather", {"city": "Rome"})), reply("Warm.")])
    runtime = chat_runtime(store, model, tools=[weather], stream=sink)
    out = await runtime.agent_client("chat").run(session, [user_message("Rome?")])
    stored = await records(store, out.run_id)
    published = [e for e in sink.for_run(out.run_id) if not isinstance(e, events.ModelDelta)]
    assert [e.key for e in published] == [f"{r.run_id}/{r.event_key}" for r in stored]
    assert isinstance(published[0], events.RunStarted)
    assert isinstance(published[-1], events.RunCompleted)
    assert published[-1].phase == "completed"
    phases = [e.phase for e in published if isinstance(e, events.PhaseChanged)]
    assert phases == ["prompted", "planning", "executing_tools", "synthesizing"]


async def test_product_memory_gets_the_transcript_events(store: AnyStore, session: str) -> None:
    """Section 6: the runtime feeds product memory with user/assistant/tool events."""
    memory = InMemoryMemory()
    model = ScriptedModel(
        [tool_calls(("c1", "weather", {"city": "Lima"}), text="Checking."), reply("Mild.")]
    )
    runtime = Runtime(store, memory=memory, stream=QueueSink())
    runtime.register_model("m", model)
    from agentledger.runtime import ModelPlanner

    runtime.register_agent(Agent("chat", ModelPlanner("m"), tools=[weather]))
    out = await runtime.agent_client("chat").run(session, [user_message("Lima?")])
    snapshot = await memory.load_run("chat", out.run_id)
    kinds = [type(e).__name__ for e in snapshot.events]
    assert kinds == [
        "UserMessage",
        "AssistantMessage",
        "ToolCall",
        "ToolResult",
        "AssistantMessage",
    ]
    assert snapshot.events[-1].text == "Mild."  # type: ignore[union-attr]


def _plan_input(load: Any) -> PlanInput:
    from agentledger.runtime import RunContext

    run = RunContext(run_id="r", agent_id="a", session_id="s", turn_id="t")
    return PlanInput(run=run, tools=(), prompt=None, load_messages=load, models=_no_model)


def _no_model(model_id: str) -> Any:
    raise AssertionError(model_id)


async def test_prepare_messages_loads_once_and_survives_a_canceled_caller() -> None:
    """[R3] concurrent calls share one load; a call canceled while it loads cancels only
    itself (a call waiting on it loads again and gets the transcript); an error is kept."""
    gate, loading = asyncio.Event(), asyncio.Event()
    loads = 0
    messages = (user_message("hi"),)

    async def load() -> tuple[Any, ...]:
        nonlocal loads
        loads += 1
        loading.set()
        await gate.wait()
        return messages

    plan = _plan_input(load)
    first = asyncio.ensure_future(plan.prepare_messages())
    second = asyncio.ensure_future(plan.prepare_messages())
    await loading.wait()
    first.cancel()
    for _ in range(5):
        await asyncio.sleep(0)
    gate.set()
    assert await second is messages
    assert first.cancelled()
    assert await plan.prepare_messages() is messages
    assert loads <= 2

    async def broken() -> tuple[Any, ...]:
        nonlocal loads
        loads += 1
        raise ValueError("unreadable")

    failing, loads = _plan_input(broken), 0
    for _ in range(2):
        with pytest.raises(ValueError, match="unreadable"):
            await failing.prepare_messages()
    assert loads == 1


async def test_prepare_messages_is_memoised_and_tool_context_is_passed(
    store: AnyStore, session: str
) -> None:
    """[R3] prepare_messages returns the same object on every call; tools see their context."""
    seen: list[Any] = []

    @tool
    async def whoami(ctx: ToolContext) -> str:
        seen.append(ctx)
        return ctx.tool_call_id

    class Twice:
        async def plan_start(self, input: PlanInput) -> PlanResult:
            a, b = await asyncio.gather(input.prepare_messages(), input.prepare_messages())
            assert a is b
            assert a is await input.prepare_messages()
            return PlanResult.call(ToolCall(id="k1", name="whoami"))

        async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
            assert [r.content for r in input.tool_results] == ["k1"]
            messages = await input.prepare_messages()
            assert isinstance(messages[-2].parts[0], ToolUsePart)
            return PlanResult.answer("done")

    runtime = Runtime(store, stream=QueueSink())
    runtime.register_agent(Agent("chat", Twice(), tools=[whoami]))
    out = await runtime.agent_client("chat").run(session, [user_message("who?")], turn_id="t1")
    assert out.status is RunStatus.COMPLETED, out.failure
    assert seen[0].run_id == out.run_id
    assert seen[0].turn_id == "t1"
    assert seen[0].session_id == session
    kinds = await types(store, out.run_id)
    assert "prompt_rendered" not in kinds  # a planner that renders no prompt records none
    assert all(r.turn_id == "t1" for r in await records(store, out.run_id))


async def test_one_shot_run_has_no_session(store: AnyStore) -> None:
    """[L3] a one-shot run works without any session."""
    runtime = chat_runtime(store, ScriptedModel([reply("hi")]))
    out = await runtime.agent_client("chat").run_one_shot([user_message("hello")])
    assert out.status is RunStatus.COMPLETED
    assert out.session_id == ""
    meta = await store.load_run(out.run_id)
    assert meta.session_id == ""
    assert meta.status is RunStatus.COMPLETED
    await valid_transcript(store, out.run_id)


async def test_planner_notes_are_recorded_and_remembered(store: AnyStore, session: str) -> None:
    """Planner notes become planner_note records, stream events and memory events."""
    from agentledger.runtime import Note

    class Noting:
        async def plan_start(self, input: PlanInput) -> PlanResult:
            return PlanResult.answer("ok", notes=(Note(text="easy one", labels={"k": "v"}),))

        async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
            raise AssertionError("unreachable")

    sink, memory = QueueSink(), InMemoryMemory()
    runtime = Runtime(store, stream=sink, memory=memory)
    runtime.register_agent(Agent("chat", Noting()))
    out = await runtime.agent_client("chat").run(session, [user_message("hi")])
    assert (await types(store, out.run_id))[-3:] == [
        "planner_note",
        "transcript_messages_appended",
        "run_completed",
    ]
    noted = [e for e in sink.events if isinstance(e, events.PlannerNoted)]
    assert [(e.text, e.labels) for e in noted] == [("easy one", {"k": "v"})]
    remembered = (await memory.load_run("chat", out.run_id)).events
    assert [type(e).__name__ for e in remembered] == [
        "UserMessage",
        "PlannerNote",
        "AssistantMessage",
    ]


async def test_model_planner_can_stream(store: AnyStore, session: str) -> None:
    """ModelPlanner(stream=True) assembles the streamed response (StreamEnd) into the turn."""
    from agentledger.runtime import ModelPlanner

    model = ScriptedModel(
        [tool_calls(("c1", "weather", {"city": "Nice"})), reply("Sunny in Nice.")]
    )
    runtime = Runtime(store, stream=QueueSink())
    runtime.register_model("m", model)
    runtime.register_agent(Agent("chat", ModelPlanner("m", stream=True), tools=[weather]))
    out = await runtime.agent_client("chat").run(session, [user_message("Nice?")])
    assert out.text == "Sunny in Nice."
    assert model.remaining == 0
    await valid_transcript(store, out.run_id)
