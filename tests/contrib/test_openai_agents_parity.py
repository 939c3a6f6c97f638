"""MemorySession at parity with the SDK's own sessions: what the SDK's session suite checks.

The OpenAI Agents SDK's tests of ``SQLiteSession`` (``tests/memory/test_session.py``
and ``test_session_limit.py``) check behaviours any session must have; these
tests check the same behaviours of `MemorySession` on every product-memory
backend, written here (the SDK's code is not copied). Its tests of
``SQLiteSession``'s own connections, locks and tables have no counterpart.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from collections import Counter
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, SQLiteSession, set_tracing_disabled
from agents.memory import SessionSettings
from agents.testing import ScriptedModel
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from agentledger.contrib.openai_agents import MemorySession
from agentledger.errors import ValidationError
from agentledger.memory import InMemoryMemory
from tests.contrib.conftest import Backend


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    """The SDK exports traces to OpenAI unless told not to: never leave loopback."""
    set_tracing_disabled(True)


def fresh_id() -> str:
    return f"chat-{uuid.uuid4().hex[:12]}"


def answer(words: str) -> ResponseOutputMessage:
    """A model's text answer, as the Responses API gives it."""
    return ResponseOutputMessage(
        id=f"msg_{uuid.uuid4().hex[:8]}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=words, annotations=[])],
    )


def _run_sync(agent: Agent[Any], given: Any, **kwargs: Any) -> Any:
    """``Runner.run_sync`` on this thread's own event loop, closed afterwards."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return Runner.run_sync(agent, given, **kwargs)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


async def run(method: str, agent: Agent[Any], given: Any, **kwargs: Any) -> Any:
    """One turn by ``Runner.run``, ``run_sync`` (another thread and loop) or ``run_streamed``."""
    if method == "run":
        return await Runner.run(agent, given, **kwargs)
    if method == "run_sync":
        return await asyncio.to_thread(_run_sync, agent, given, **kwargs)
    streamed = Runner.run_streamed(agent, given, **kwargs)
    async for _ in streamed.stream_events():
        pass
    return streamed


RUNNERS = ["run", "run_sync", "run_streamed"]


# ------------------------------------------------------------------ a Runner on the session


@pytest.mark.parametrize("method", RUNNERS)
async def test_every_runner_method_keeps_history(memory: Any, method: str) -> None:
    """Each turn sees the ones before it, whichever way the Runner is called."""
    session = MemorySession(fresh_id(), memory)
    other = MemorySession(fresh_id(), memory)
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    model.enqueue([answer("San Francisco")])
    first = await run(method, agent, "Where is the Golden Gate?", session=session)
    assert first.final_output == "San Francisco"
    model.enqueue([answer("elsewhere")])
    await run(method, agent, "Unrelated", session=other)
    model.enqueue([answer("California")])
    await run(method, agent, "Which state?", session=session)
    sent = model.calls[-1].input
    assert [item.get("content") for item in sent if item.get("role") == "user"] == [
        "Where is the Golden Gate?",
        "Which state?",
    ]
    assert len(await session.get_items()) == 4
    assert len(await other.get_items()) == 2


@pytest.mark.parametrize("method", RUNNERS)
async def test_list_input_and_input_callbacks(memory: Any, method: str) -> None:
    """List input is appended to history; a callback shapes what the model sees, and
    history it repeats is not stored twice."""
    session = MemorySession(fresh_id(), memory)
    history = [
        {"role": "user", "content": "Earlier"},
        {"role": "assistant", "content": "Saved reply"},
    ]
    await session.add_items(history)
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    model.enqueue([answer("one")])
    await run(method, agent, [{"role": "user", "content": "Now"}], session=session)
    assert model.calls[-1].input == [*history, {"role": "user", "content": "Now"}]

    def users_only(old: list[Any], new: list[Any]) -> list[Any]:
        return [item for item in old if item.get("role") == "user"] + new

    model.enqueue([answer("two")])
    config = RunConfig(session_input_callback=users_only)
    await run(method, agent, "Again", session=session, run_config=config)
    assert [item.get("content") for item in model.calls[-1].input] == ["Earlier", "Now", "Again"]

    def repeat_first(old: list[Any], new: list[Any]) -> list[Any]:
        return [*old, old[0], *new]

    model.enqueue([answer("three")])
    config = RunConfig(session_input_callback=repeat_first)
    await run(method, agent, "Last", session=session, run_config=config)
    stored = await session.get_items()
    assert [i.get("content") for i in stored if i.get("role") == "user"] == [
        "Earlier",
        "Now",
        "Again",
        "Last",
    ]
    assert len(stored) == 8


@pytest.mark.parametrize("method", RUNNERS)
async def test_limits_reach_the_model(memory: Any, method: str) -> None:
    """A RunConfig limit, the session's own limit, 0, None and a limit past the history."""
    session = MemorySession(fresh_id(), memory, session_settings=SessionSettings(limit=100))
    await session.add_items([{"role": "user", "content": f"Turn {i}"} for i in range(10)])
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    expected = {2: ["Turn 8", "Turn 9"], 0: [], None: [f"Turn {i}" for i in range(10)]}
    for limit, seen in expected.items():
        model.enqueue([answer("ok")])
        config = RunConfig(session_settings=SessionSettings(limit=limit))
        await run(method, agent, "New", session=session, run_config=config)
        contents = [item.get("content") for item in model.calls[-1].input]
        assert contents[:-1][: len(seen)] == seen
        assert contents[-1] == "New"
        if limit is not None:
            assert len(contents) == len(seen) + 1
    session.session_settings = {"limit": 1}
    model.enqueue([answer("ok")])
    await run(method, agent, "Once more", session=session)
    assert len(model.calls[-1].input) == 2  # the session's own limit: one item of history


async def test_a_limit_never_splits_a_call_from_its_output(memory: Any) -> None:
    """A limit that cuts between a function call and its output drops the orphaned output,
    as the SDK does with its own sessions."""
    history = [
        {"role": "user", "content": "Weather?"},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"role": "assistant", "content": "Sunny."},
    ]
    inputs = []
    for session in (MemorySession(fresh_id(), memory), SQLiteSession("reference")):
        await session.add_items(history)
        model = ScriptedModel()
        model.enqueue([answer("ok")])
        config = RunConfig(session_settings=SessionSettings(limit=2))
        await Runner.run(Agent(name="t", model=model), "Next", session=session, run_config=config)
        inputs.append(model.calls[-1].input)
        session.close()
    assert inputs[0] == inputs[1]
    assert all(item.get("type") != "function_call_output" for item in inputs[0])


# ------------------------------------------------------------------ close


async def test_close_ends_the_session_and_leaves_the_memory_open(memory: Any) -> None:
    """After close() every call is refused, an empty add included (a RuntimeError, as the SDK's
    sessions raise); closing twice is fine, and the memory still serves other sessions."""
    session = MemorySession(fresh_id(), memory)
    await session.add_items([{"role": "user", "content": "kept"}])
    assert not session.closed
    session.close()
    session.close()
    assert session.closed
    calls = (
        session.add_items([]),
        session.add_items([{"role": "user", "content": "late"}]),
        session.get_items(),
        session.pop_item(),
        session.clear_session(),
    )
    for call in calls:
        with pytest.raises(RuntimeError, match="MemorySession is closed") as caught:
            await call
        assert isinstance(caught.value, ValidationError)
        assert caught.value.field == "session"
    reopened = MemorySession(session.session_id, memory)
    assert await reopened.get_items() == [{"role": "user", "content": "kept"}]


# ------------------------------------------------------------------ settings


async def test_settings_default_to_the_sdks_and_dicts_are_converted(memory: Any) -> None:
    """No settings is ``SessionSettings()``; a dict becomes SessionSettings, as in the SDK."""
    plain = MemorySession(fresh_id(), memory)
    reference = SQLiteSession("reference")
    assert plain.session_settings == reference.session_settings
    reference.close()
    assert isinstance(plain.session_settings, SessionSettings)
    assert plain.session_settings.limit is None
    given = MemorySession(fresh_id(), memory, session_settings={"limit": 0})
    assert isinstance(given.session_settings, SessionSettings)
    assert given.session_settings.resolve({"limit": 4}).limit == 4
    await given.add_items([{"role": "user", "content": f"{i}"} for i in range(3)])
    assert await given.get_items() == []
    given.session_settings = {"limit": 2}
    assert [i["content"] for i in await given.get_items()] == ["1", "2"]
    assert [i["content"] for i in await given.get_items(limit=1)] == ["2"]
    given.session_settings = None
    assert given.session_settings == SessionSettings()


@pytest.mark.parametrize(
    ("settings", "sdk_error"),
    [({"limitt": 1}, TypeError), (3, TypeError), ({"limit": "many"}, ValueError)],
)
def test_settings_the_sdk_refuses_are_refused(settings: Any, sdk_error: type[Exception]) -> None:
    """The SDK's own words and exception type, inside agentledger's ValidationError."""
    with pytest.raises(sdk_error) as theirs:
        SQLiteSession("reference", session_settings=settings)
    with pytest.raises(sdk_error) as ours:
        MemorySession("chat", InMemoryMemory(), session_settings=settings)
    assert isinstance(ours.value, ValidationError)
    assert ours.value.field == "session_settings"
    assert str(theirs.value).splitlines()[0] in str(ours.value)
    session = MemorySession("chat", InMemoryMemory())
    with pytest.raises(sdk_error):
        session.session_settings = settings
    assert session.session_settings == SessionSettings()


# ------------------------------------------------------------------ items


def _cycle() -> dict[str, Any]:
    item: dict[str, Any] = {"role": "user"}
    item["content"] = [item]
    return item


@pytest.mark.parametrize(
    "bad",
    [
        {"role": "user", "content": object()},
        {"role": "user", "content": {1, 2}},
        {"role": "user", "content": b"bytes"},
        _cycle(),
    ],
    ids=["object", "set", "bytes", "cycle"],
)
async def test_an_item_the_sdk_cannot_store_raises_what_the_sdk_raises(
    memory: Any, bad: dict[str, Any]
) -> None:
    """The SDK's exception type (TypeError, or ValueError for a cycle), as a ValidationError;
    nothing of that call is stored, and the session still works."""
    reference = SQLiteSession("reference")
    try:
        with pytest.raises((TypeError, ValueError)) as theirs:
            await reference.add_items([bad])
    finally:
        reference.close()
    session = MemorySession(fresh_id(), memory)
    with pytest.raises(type(theirs.value)) as ours:
        await session.add_items([{"role": "user", "content": "first"}, bad])
    assert isinstance(ours.value, ValidationError)
    assert ours.value.field == "items[1]"
    assert await session.get_items() == []
    await session.add_items([{"role": "user", "content": "after"}])
    assert await session.get_items() == [{"role": "user", "content": "after"}]


async def test_awkward_text_is_stored_as_written(memory: Any) -> None:
    """Quotes, SQL, unicode and control characters come back exactly."""
    texts = [
        "O'Reilly",
        "DROP TABLE sessions;",
        '"SELECT * FROM users WHERE name = "admin";"',
        "Robert'); DROP TABLE students;--",
        "こんにちは 😊👍 Привет",
        "nul \x00 and \u2028",
    ]
    session = MemorySession(fresh_id(), memory)
    await session.add_items([{"role": "user", "content": t} for t in texts])
    assert [item["content"] for item in await session.get_items()] == texts


async def test_a_failed_write_leaves_nothing_behind(backend: Backend) -> None:
    """A refused add stores nothing and holds no lock: another handle writes at once."""
    memory, close = await backend.open()
    other, close_other = await backend.open()
    try:
        session = MemorySession(fresh_id(), memory)
        with pytest.raises(TypeError):
            await session.add_items([{"role": "user", "content": object()}])
        if backend.name == "sqlite":
            probe = sqlite3.connect(backend.where, timeout=0)  # no wait: a held lock fails now
            try:
                probe.execute("BEGIN IMMEDIATE")
                probe.execute("ROLLBACK")
            finally:
                probe.close()
        second = MemorySession(session.session_id, other)
        await second.add_items([{"role": "user", "content": "from another handle"}])
        assert await session.get_items() == [{"role": "user", "content": "from another handle"}]
    finally:
        await close_other()
        await close()


# ------------------------------------------------------------------ threads and loops

THREADS = 5


def test_one_memory_and_one_session_shared_by_threads(backend: Backend) -> None:
    """One memory handle and one session object, used at once from threads that each run
    their own event loop (as ``Runner.run_sync`` does): nothing lost, nothing hangs."""
    memory, close = asyncio.run(backend.open())
    session = MemorySession(fresh_id(), memory)
    start = threading.Barrier(THREADS, timeout=60)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        async def turns() -> None:
            start.wait()
            for i in range(4):
                await session.add_items([{"role": "user", "content": f"{n}-{i}"}])
                await session.get_items(limit=2)

        try:
            asyncio.run(turns())
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n,), daemon=True) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    try:
        assert not [t for t in threads if t.is_alive()], "a thread hung"
        assert errors == []
        items = asyncio.run(session.get_items())
        assert Counter(item["content"] for item in items) == Counter(
            f"{n}-{i}" for n in range(THREADS) for i in range(4)
        )
    finally:
        asyncio.run(close())
