"""The model's view of a planner turn is rebuilt from the log: exactly the messages the model
got (system prompt first, after the history policy), its answer and usage, and what changed
since the previous turn's request, a history policy's cut included. Memory and SQLite."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentledger.errors import CorruptRecordError, RunNotFoundError, ValidationError
from agentledger.providers import anthropic, openai_chat
from agentledger.providers._options import options_for
from agentledger.runtime import Agent, LastTurns, ModelPlanner, QueueSink, Runtime, tool
from agentledger.storage import MemoryStore
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply, tool_calls
from agentledger.transcript import TextPart, ToolResultPart, ToolUsePart
from agentledger.views.model_view import NOT_RECORDED, model_turn, model_turns
from tests.runtime.support import now_ms


@tool
async def weather(city: str) -> str:
    """The weather."""
    return f"{city}: 21C"


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield MemoryStore()
        return
    opened = await SQLiteStore.open(tmp_path / "views.db")
    try:
        yield opened
    finally:
        await opened.close()


def _runtime(store: Any, model: ScriptedModel, **agent: Any) -> Runtime:
    runtime = Runtime(store, stream=QueueSink())
    runtime.register_model("m", model)
    planner = ModelPlanner("m", system="Be brief.", model="model-x")
    runtime.register_agent(Agent("chat", planner, tools=[weather], **agent))
    return runtime


async def test_each_turn_is_what_the_model_got_and_answered(store: Any) -> None:
    await store.create_session("s", created_at=now_ms())
    model = ScriptedModel([tool_calls(("c1", "weather", {"city": "Oslo"})), reply("Mild.")])
    out = await _runtime(store, model).agent_client("chat").run("s", "Weather in Oslo?")
    run_id = out.run_id
    assert await model_turns(store, run_id) == (1, 2)
    for n, asked in enumerate(model.requests, start=1):
        view = await model_turn(store, run_id, n)
        assert view.request.sent == asked.messages  # system prompt first, then the history
        assert (view.request.system, view.request.model) == ("Be brief.", "model-x")
        assert view.request.not_recorded == NOT_RECORDED
        assert view.turns == (1, 2)
        options = options_for(asked)
        # the adapters encode the rebuilt request exactly as they encoded the real one
        for module in (anthropic, openai_chat):
            got = view.provider_request(
                module.__name__.rsplit(".", 1)[-1].replace("_", "-"),
                tools=asked.tools,
                parameters={"max_tokens": asked.max_tokens},
            )
            assert got == module.encode(asked.messages, asked.tools, options)
    first, second = [await model_turn(store, run_id, n) for n in (1, 2)]
    assert first.phase == "planning"
    assert second.phase == "synthesizing"
    assert first.response.message is not None
    assert isinstance(first.response.message.parts[0], ToolUsePart)
    assert first.response.stop_reason == "tool_use"
    assert first.response.usage[0].input_tokens == 10
    assert second.response.message is not None
    assert second.response.message.parts == (TextPart(text="Mild."),)
    assert second.response.stop_reason == "end_turn"
    assert "not recorded" in second.response.stop_reason_note
    # the first turn had nothing before it; the second added the answer and its results
    assert first.diff.previous == ""
    assert len(first.diff.added) == 1
    assert second.diff.previous == f"{run_id} turn 1"
    added = [m.role for m, _ in second.diff.added]
    assert added == ["assistant", "user"]
    assert isinstance(second.diff.added[1][0].parts[0], ToolResultPart)
    assert second.diff.cut == ()
    assert second.diff.policy == ""


async def test_a_history_policy_cut_shows_in_the_diff(store: Any) -> None:
    await store.create_session("s", created_at=now_ms())
    model = ScriptedModel([reply("first answer"), reply("second answer")])
    client = _runtime(store, model, history=LastTurns(1)).agent_client("chat")
    one = await client.run("s", "question one")
    two = await client.run("s", "question two", after=one.run_id)
    view = await model_turn(store, two.run_id, 1)
    assert view.request.sent == model.requests[1].messages
    assert [m.role for m in view.request.messages] == ["user"]
    assert view.request.window_policy == "last_turns:1"
    diff = view.diff
    assert diff.previous == f"{one.run_id} turn 1"  # the run its history follows
    assert diff.policy == "last_turns:1"
    cut = [(m.role, m.parts[0]) for m, _ in diff.cut]
    assert cut == [("user", TextPart(text="question one"))]
    # the first run's answer was never sent to the model before, so it is not "cut"
    assert [m.parts[0] for m, _ in diff.added] == [TextPart(text="question two")]
    assert all(o.run_id == one.run_id for _, o in diff.cut)


async def test_bad_input_is_refused_and_damage_is_reported(store: Any) -> None:
    await store.create_session("s", created_at=now_ms())
    model = ScriptedModel([reply("hi")])
    out = await _runtime(store, model).agent_client("chat").run("s", "hello")
    with pytest.raises(ValidationError, match="its turns: 1"):
        await model_turn(store, out.run_id, 7)
    with pytest.raises(RunNotFoundError):
        await model_turn(store, "no-such-run", 1)
    view = await model_turn(store, out.run_id, 1)
    with pytest.raises(ValidationError, match="provider"):
        view.provider_request("gemini")


async def test_bedrock_without_the_tools_the_log_lacks_says_so(store: Any) -> None:
    await store.create_session("s", created_at=now_ms())
    model = ScriptedModel([tool_calls(("c1", "weather", {"city": "Oslo"})), reply("Mild.")])
    out = await _runtime(store, model).agent_client("chat").run("s", "Weather?")
    view = await model_turn(store, out.run_id, 2)
    with pytest.raises(ValidationError, match="which the run log does not hold"):
        view.provider_request("bedrock")
    body = view.provider_request("bedrock", tools=model.requests[1].tools)
    assert body["toolConfig"]["tools"][0]["toolSpec"]["name"] == "weather"


async def test_a_damaged_answer_is_a_corrupt_record(tmp_path: Path) -> None:
    """Stores refuse a damaged record on write, so the test damages one in the file."""
    store = await SQLiteStore.open(tmp_path / "damaged.db")
    try:
        await store.create_session("s", created_at=now_ms())
        model = ScriptedModel([reply("hi")])
        out = await _runtime(store, model).agent_client("chat").run("s", "hello")
        with sqlite3.connect(store.path) as conn:
            query = "UPDATE records SET payload = ? WHERE run_id = ? AND event_key = ?"
            damage = (b'[{"role":"nobody"}]', out.run_id, "turn:1:final:messages")
            assert conn.execute(query, damage).rowcount == 1
        conn.close()
        with pytest.raises(CorruptRecordError):
            await model_turn(store, out.run_id, 1)
    finally:
        await store.close()


async def test_a_compaction_shows_its_summary_and_what_it_replaced(store: Any) -> None:
    from agentledger.runtime import Compaction

    await store.create_session("s", created_at=now_ms())
    model = ScriptedModel([reply("x" * 200) for _ in range(3)])
    policy = Compaction("sum", threshold_tokens=100, keep_tokens=40)
    runtime = _runtime(store, model, history=policy)
    runtime.register_model("sum", ScriptedModel([reply("They talked about x.")] * 3))
    client = runtime.agent_client("chat")
    runs = []
    for i in range(3):
        out = await client.run("s", f"question {i}", after=runs[-1] if runs else None)
        runs.append(out.run_id)
    views = [await model_turn(store, run_id, 1) for run_id in runs]
    for view, asked in zip(views, model.requests, strict=True):
        assert view.request.sent == asked.messages
    compacted = next(v for v in views if v.diff.summary)
    assert compacted.request.window_summary.endswith("They talked about x.")
    assert compacted.response.summariser is not None
    assert compacted.diff.policy.startswith("compaction")
    assert compacted.diff.cut  # what the summary replaced is no longer sent
    first = compacted.request.messages[0]
    assert first.parts[0] == TextPart(text=compacted.request.window_summary)
