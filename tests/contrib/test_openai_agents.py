"""OpenAI Agents SDK sessions on product memory: a real Runner, the SDK's semantics, races.

Every test runs on each product-memory backend (in memory, an SQLite file, a
real PostgreSQL server). The SDK's own ``SQLiteSession`` is the reference: the
same scripted conversation must leave the same items in both, and any sequence
of session operations must give the same answers.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from agents import (
    Agent,
    RunConfig,
    Runner,
    SQLiteSession,
    function_tool,
    set_tracing_disabled,
)
from agents.memory import SessionSettings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentledger.contrib.openai_agents import FRAMEWORK, MemorySession, items_to_messages
from agentledger.errors import CorruptRecordError, TranscriptError, ValidationError
from agentledger.memory import FrameworkItem, InMemoryMemory, UserMessage
from agentledger.transcript import (
    Message,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    validate_planner_transcript,
)
from tests.contrib._agents_support import ScriptedModel, call, reasoning, text
from tests.contrib._session_workers import churn_in_process, churn_in_thread
from tests.contrib.conftest import Backend


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    """The SDK exports traces to OpenAI unless told not to: never leave loopback."""
    set_tracing_disabled(True)


def fresh_id() -> str:
    return f"chat-{uuid.uuid4().hex[:12]}"


# ------------------------------------------------------------------ a real Runner


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@function_tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


def script() -> list[list[Any]]:
    """Three turns: two tools in parallel, a plain answer, then one more tool call."""
    return [
        [
            reasoning("rs_1", "weather and sum"),
            call("call_1", "get_weather", {"city": "Paris"}),
            call("call_2", "add", {"a": 2, "b": 3.25}),
        ],
        [text("msg_1", "Sunny in Paris; 2 + 3.25 = 5.25.")],
        [text("msg_2", "You're welcome.")],
        [call("call_3", "get_weather", {"city": "Oslo"})],
        [text("msg_3", "Sunny in Oslo too.")],
    ]


TURNS = ("Weather in Paris, and 2 + 3.25?", "Thanks!", "And Oslo?")


async def converse(session: Any) -> ScriptedModel:
    """Run the three scripted turns through a real Runner on ``session``."""
    model = ScriptedModel(script())
    agent = Agent(name="helper", instructions="Be brief.", model=model, tools=[get_weather, add])
    config = RunConfig(tracing_disabled=True)
    for turn in TURNS:
        await Runner.run(agent, turn, session=session, run_config=config)
    assert model.script == []
    return model


async def test_runner_history_matches_the_sdk_session(memory: Any) -> None:
    """A real Runner over three turns with tools stores what the SDK's own session stores."""
    ours = MemorySession(fresh_id(), memory)
    model = await converse(ours)
    reference = SQLiteSession("reference")
    try:
        reference_model = await converse(reference)
        expected = await reference.get_items()
    finally:
        reference.close()
    items = await ours.get_items()
    assert items == expected
    assert model.inputs == reference_model.inputs
    # the session fed the model: the third turn's first call saw the whole history before it
    third = model.inputs[3]
    assert third[: len(items) - 4] == items[: len(items) - 4]
    assert [i.get("type", "message") for i in items] == [
        "message", "reasoning", "function_call", "function_call", "function_call_output",
        "function_call_output", "message",
        "message", "message",
        "message", "function_call", "function_call_output", "message",
    ]  # fmt: skip
    outputs = [i["output"] for i in items if i.get("type") == "function_call_output"]
    assert outputs == ["sunny in Paris", "5.25", "sunny in Oslo"]


async def test_transcript_view_passes_the_planner_validator(memory: Any) -> None:
    """The stored items read back as a valid transcript with the calls and results paired."""
    session = MemorySession(fresh_id(), memory)
    await converse(session)
    messages = await session.messages()
    validate_planner_transcript(messages)
    assert [m.role for m in messages] == [
        "user", "assistant", "user", "assistant", "user", "assistant", "user", "assistant",
        "user", "assistant",
    ]  # fmt: skip
    assert messages[0] == Message(role="user", parts=(TextPart(text=TURNS[0]),))
    thinking, first, second = messages[1].parts
    assert isinstance(thinking, ThinkingPart)
    assert thinking.text == "weather and sum"
    assert first == ToolUsePart(id="call_1", name="get_weather", input={"city": "Paris"})
    assert isinstance(second, ToolUsePart)
    assert second.input == {"a": 2, "b": 3.25}
    assert messages[2].parts == (
        ToolResultPart(tool_use_id="call_1", content="sunny in Paris"),
        ToolResultPart(tool_use_id="call_2", content="5.25"),
    )
    assert messages[-1].parts == (TextPart(text="Sunny in Oslo too."),)


def test_transcript_view_refuses_items_it_has_no_part_for() -> None:
    """A hosted-tool item is a TranscriptError naming the item, not a silent gap."""
    items = [
        {"role": "user", "content": "search"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
    ]
    with pytest.raises(TranscriptError) as caught:
        items_to_messages(items)
    assert caught.value.field == "items[1].type"
    assert caught.value.got == "web_search_call"
    messages = items_to_messages(
        [
            {"role": "developer", "content": "be kind"},
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"role": "assistant", "content": "hello"},
        ]
    )
    assert [m.role for m in messages] == ["system", "user", "assistant"]
    assert messages[2].parts == (TextPart(text="hello"),)


# ------------------------------------------------------------------ SDK semantics

ITEMS = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=4)}
    ),
    max_size=3,
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), ITEMS),
        st.tuples(st.just("get"), st.sampled_from([None, -1, 0, 1, 2, 5])),
        st.tuples(st.just("pop"), st.none()),
        st.tuples(st.just("clear"), st.none()),
    ),
    max_size=12,
)


async def _apply(session: Any, op: str, arg: Any) -> Any:
    if op == "add":
        return await session.add_items(arg)
    if op == "get":
        return await session.get_items(arg)
    if op == "pop":
        return await session.pop_item()
    return await session.clear_session()


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, default_limit=st.sampled_from([None, 2]))
async def test_every_operation_answers_as_the_sdk_session(
    memory: Any, ops: list[tuple[str, Any]], default_limit: int | None
) -> None:
    """Order, limits (latest N in order; 0 none; negative all), pop and clear as SQLiteSession."""
    limits = SessionSettings(limit=default_limit)
    ours = MemorySession(fresh_id(), memory, session_settings=limits)
    reference = SQLiteSession("reference", session_settings=limits)
    try:
        for op, arg in [*ops, ("get", None), ("get", -1)]:
            assert await _apply(ours, op, arg) == await _apply(reference, op, arg), (op, arg)
    finally:
        reference.close()


async def test_sessions_are_separate_and_clear_empties(memory: Any) -> None:
    """Two sessions on one memory never see each other's items; clear empties only its own."""
    one, two = MemorySession(fresh_id(), memory), MemorySession(fresh_id(), memory)
    await one.add_items([{"role": "user", "content": "a"}])
    await two.add_items([{"role": "user", "content": "b"}])
    await one.clear_session()
    assert await one.get_items() == []
    assert await one.pop_item() is None
    assert await two.get_items() == [{"role": "user", "content": "b"}]


async def test_items_come_back_exactly_and_bad_items_change_nothing(memory: Any) -> None:
    """Floats, big ints, unicode and nesting read back equal and of the same types."""
    session = MemorySession(fresh_id(), memory)
    item = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": 'é中😀\u2028"\\', "annotations": []}],
        "logprobs": [0.1, -1e-300, 1.7976931348623157e308, 0.0],
        "big": 2**70,
        "flags": [True, False, None],
    }
    await session.add_items([item])
    (back,) = await session.get_items()
    assert back == item
    assert [type(x) for x in back["logprobs"]] == [float] * 4
    back["content"].clear()  # a returned item is a copy: changing it changes nothing stored
    assert await session.get_items() == [item]
    for bad in ({"n": float("nan")}, {"t": (1, 2)}, {1: "int key"}, {"o": object()}, "text"):
        with pytest.raises(ValidationError) as caught:
            await session.add_items([{"role": "user", "content": "ok"}, bad])
        assert caught.value.field == "items[1]"
    assert await session.get_items() == [item]
    assert await session.pop_item() == item


async def test_a_foreign_event_in_the_session_is_reported(memory: Any) -> None:
    """An event the session did not write is a CorruptRecordError, never skipped."""
    session = MemorySession(fresh_id(), memory)
    from datetime import UTC, datetime

    stranger = UserMessage(key="x", timestamp=datetime.now(UTC), text="hi")
    await memory.append_events(session.agent_id, session.session_id, stranger)
    with pytest.raises(CorruptRecordError) as caught:
        await session.get_items()
    assert caught.value.record_id == "x"
    stored = (await memory.load_run(session.agent_id, session.session_id)).events
    await session.add_items([{"role": "user", "content": "hi"}])
    ours = (await memory.load_run(session.agent_id, session.session_id)).events
    assert ours[: len(stored)] == stored
    assert isinstance(ours[-1], FrameworkItem)
    assert ours[-1].framework == FRAMEWORK


def test_it_is_an_agents_sdk_session() -> None:
    """The SDK's runtime-checkable Session protocol recognises it."""
    from agents.memory import Session

    assert isinstance(MemorySession("chat", InMemoryMemory()), Session)


async def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValidationError):
        MemorySession("", InMemoryMemory())
    with pytest.raises(ValidationError) as caught:
        await MemorySession("chat", InMemoryMemory()).get_items("3")  # type: ignore[arg-type]
    assert caught.value.field == "limit"


# ------------------------------------------------------------------ concurrent writers

WRITERS = 4
ROUNDS = 20


async def _check_churn(backend: Backend, session_id: str, popped: dict[int, list[Any]]) -> None:
    """Nothing lost, nothing duplicated, no item popped twice, each writer's order kept."""
    memory, close = await backend.open()
    try:
        left = await MemorySession(session_id, memory).get_items()
    finally:
        await close()
    taken = [item for items in popped.values() for item in items]
    assert None not in taken  # every pop found an item: each writer added before popping
    counts = Counter((i["w"], i["i"]) for i in [*left, *taken])
    assert counts == Counter((w, i) for w in range(WRITERS) for i in range(2 * ROUNDS))
    for writer in range(WRITERS):
        order = [i["i"] for i in left if i["w"] == writer]
        assert order == sorted(order)


def test_concurrent_threads_on_one_session(backend: Backend) -> None:
    """Threads, each with its own event loop (and its own handle on a database), churn."""
    session_id = fresh_id()
    start = threading.Barrier(WRITERS, timeout=60)
    with ThreadPoolExecutor(WRITERS) as pool:
        futures = [
            pool.submit(churn_in_thread, backend.open, session_id, w, ROUNDS, start)
            for w in range(WRITERS)
        ]
        popped = {w: f.result(timeout=120) for w, f in enumerate(futures)}
    asyncio.run(_check_churn(backend, session_id, popped))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_concurrent_processes_on_one_session(backend: Backend) -> None:
    """Spawned processes, each with its own handle, churn on one session."""
    session_id = fresh_id()
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    start = ctx.Barrier(WRITERS, timeout=120)
    workers = [
        ctx.Process(
            target=churn_in_process,
            args=(backend.name, backend.where, session_id, w, ROUNDS, start, results),
        )
        for w in range(WRITERS)
    ]
    for worker in workers:
        worker.start()
    popped: dict[int, list[Any]] = {}
    try:
        for _ in workers:
            writer, outcome = results.get(timeout=120)
            assert isinstance(outcome, list), outcome
            popped[writer] = outcome
    except queue.Empty:  # pragma: no cover - reported as a failure
        pytest.fail("a worker process did not report")
    finally:
        for worker in workers:
            worker.join(timeout=30)
    asyncio.run(_check_churn(backend, session_id, popped))
