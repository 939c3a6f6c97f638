"""PydanticAIHistory: pydantic-ai agents over many turns, their history kept in a store.

Each backend (the in-memory store, SQLite, PostgreSQL, the store service through
``StoreClient``) must hand back exactly the history pydantic-ai itself holds
after the same turns: numbers as numbers, thinking, tool calls and retries.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai import messages as pai
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from agentledger.contrib.pydantic_ai import PydanticAIHistory
from agentledger.errors import SessionEndedError, TranscriptError, ValidationError
from agentledger.runtime.history import LastTurns
from agentledger.service.client import StoreClient
from agentledger.storage import MemoryStore
from agentledger.storage.payloads import (
    TRANSCRIPT_APPENDED,
    TRANSCRIPT_REFERENCED,
    TRANSCRIPT_SEEDED,
)
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.sqlite import SQLiteStore
from tests.service.process import ServiceProcess, Tokens


@pytest.fixture(params=["memory", "sqlite", "postgres", "service"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """Each kind of store, fresh."""
    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "sqlite":
        async with await SQLiteStore.open(tmp_path / "store.db") as sqlite:
            yield sqlite
    elif request.param == "postgres":
        postgres = await PostgresStore.open(
            request.getfixturevalue("postgres_dsn"), min_size=1, max_size=2
        )
        try:
            yield postgres
        finally:
            await postgres.close()
    else:
        tokens = Tokens(tmp_path / "tokens.json")
        with ServiceProcess(str(tmp_path / "served.db"), tokens.path) as service:
            async with StoreClient(service.url, token=tokens.host) as client:
                yield client


def _agent() -> Agent[None, str]:
    """Odd calls think and call a tool with a fractional argument (the first one badly,
    so pydantic-ai retries it); even calls answer."""
    calls = 0

    def scripted(messages: list[pai.ModelMessage], info: AgentInfo) -> pai.ModelResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            return pai.ModelResponse(parts=[pai.ToolCallPart("half", {"x": "nan?"}, "c-bad")])
        if calls % 2 == 0:
            x = calls + 0.25
            return pai.ModelResponse(
                parts=[
                    pai.ThinkingPart(f"halve {x}", signature=f"sig-{calls}"),
                    pai.ToolCallPart("half", {"x": x}, f"c-{calls}"),
                ]
            )
        return pai.ModelResponse(parts=[pai.TextPart(f"answer {calls}")])

    agent = Agent(FunctionModel(scripted), system_prompt="Halve things.")

    @agent.tool_plain
    def half(x: float) -> dict[str, Any]:
        """Half of x."""
        return {"half": x / 2, "parts": [x / 4, x / 4]}

    return agent


async def _converse(history: PydanticAIHistory, turns: int) -> list[pai.ModelMessage]:
    agent = _agent()
    kept: list[pai.ModelMessage] = []
    for i in range(turns):
        loaded = await history.load()
        assert loaded == kept
        result = await agent.run(f"question {i}", message_history=loaded)
        await history.save(result.new_messages())
        kept = result.all_messages()
    return kept


def _dumped(history: list[pai.ModelMessage]) -> bytes:
    return pai.ModelMessagesTypeAdapter.dump_json(history)


async def test_history_over_many_turns_equals_pydantic_ais_own(store: Any) -> None:
    session = f"chat-{uuid.uuid4().hex[:8]}"
    in_memory = await _converse(PydanticAIHistory(store, session), 5)
    loaded = await PydanticAIHistory(store, session).load()
    assert loaded == in_memory
    assert _dumped(loaded) == _dumped(in_memory)
    returns = [
        p.content
        for m in loaded
        for p in m.parts
        if isinstance(p, pai.ToolReturnPart) and isinstance(p.content, dict)
    ]
    assert returns
    assert all(type(v) is float for r in returns for v in (r["half"], *r["parts"]))
    calls = [p for m in loaded for p in m.parts if isinstance(p, pai.ToolCallPart)]
    assert any(type(c.args_as_dict().get("x")) is float for c in calls)


async def test_each_turn_is_a_run_that_references_the_one_before(store: Any) -> None:
    session = f"chat-{uuid.uuid4().hex[:8]}"
    history = PydanticAIHistory(store, session)
    await _converse(history, 3)
    runs = await store.list_runs_by_session(session)
    assert len(runs) == 3
    for previous, run in itertools.pairwise(runs):
        records = (await store.list_run_records(run.run_id)).records
        types = [r.type for r in records]
        assert TRANSCRIPT_REFERENCED in types
        assert types.count(TRANSCRIPT_APPENDED) == 1
        [reference] = [r for r in records if r.type == TRANSCRIPT_REFERENCED]
        assert previous.run_id.encode() in reference.payload
    assert history.last_run_id == runs[-1].run_id


async def test_a_test_model_agent_with_tools_over_turns() -> None:
    store = MemoryStore()
    agent = Agent(TestModel(), system_prompt="Use tools.")

    @agent.tool_plain
    def ratio(a: int, b: int) -> float:
        """a / b."""
        return a / (b or 1) + 0.5

    history = PydanticAIHistory(store, "test-model")
    kept: list[pai.ModelMessage] = []
    for i in range(4):
        result = await agent.run(f"turn {i}", message_history=await history.load())
        await history.save(result.new_messages())
        kept = result.all_messages()
    assert _dumped(await PydanticAIHistory(store, "test-model").load()) == _dumped(kept)


async def test_exclude_reasoning_and_a_policy_shape_what_is_loaded() -> None:
    store = MemoryStore()
    await _converse(PydanticAIHistory(store, "shaped"), 4)
    full = await PydanticAIHistory(store, "shaped").load()
    plain = await PydanticAIHistory(store, "shaped", exclude_reasoning=True).load()
    thinking = [p for m in full for p in m.parts if isinstance(p, pai.ThinkingPart)]
    assert thinking
    assert not [p for m in plain for p in m.parts if isinstance(p, pai.ThinkingPart)]
    last = await PydanticAIHistory(store, "shaped", policy=LastTurns(1)).load()
    prompts = [p for m in last for p in m.parts if isinstance(p, pai.UserPromptPart)]
    assert [p.content for p in prompts] == ["question 3"]
    assert isinstance(last[0].parts[0], pai.SystemPromptPart)
    # the stored turns are untouched
    transcript = await PydanticAIHistory(store, "shaped").transcript()
    assert len(transcript) >= len(full)


async def test_a_fork_branches_from_an_earlier_turn() -> None:
    store = MemoryStore()
    history = PydanticAIHistory(store, "forked")
    await _converse(history, 2)
    first = (await store.list_runs_by_session("forked"))[0].run_id
    branch = history.fork(first)
    agent = Agent(FunctionModel(lambda m, i: pai.ModelResponse(parts=[pai.TextPart("other")])))
    base = await branch.load()
    result = await agent.run("another way", message_history=base)
    await branch.save(result.new_messages())
    assert await branch.load() == result.all_messages()
    assert branch.last_run_id != history.last_run_id
    main = await history.load()
    assert "another way" not in _dumped(main).decode()


async def test_a_fork_into_another_session_copies_once_then_references() -> None:
    store = MemoryStore()
    history = PydanticAIHistory(store, "source")
    kept = await _converse(history, 2)
    assert history.last_run_id is not None
    other = history.fork(history.last_run_id, session_id="copy")
    assert await other.load() == kept
    agent = Agent(FunctionModel(lambda m, i: pai.ModelResponse(parts=[pai.TextPart("ok")])))
    for question in ("one", "two"):
        result = await agent.run(question, message_history=await other.load())
        await other.save(result.new_messages())
    assert await PydanticAIHistory(store, "copy").load() == result.all_messages()
    first, second = await store.list_runs_by_session("copy")
    first_types = [r.type for r in (await store.list_run_records(first.run_id)).records]
    second_types = [r.type for r in (await store.list_run_records(second.run_id)).records]
    assert TRANSCRIPT_SEEDED in first_types
    assert TRANSCRIPT_REFERENCED not in first_types
    assert TRANSCRIPT_REFERENCED in second_types
    assert await history.load() == kept


async def test_what_cannot_be_saved_saves_nothing() -> None:
    store = MemoryStore()
    history = PydanticAIHistory(store, "refused")
    audio = pai.ModelRequest(
        parts=[pai.UserPromptPart([pai.BinaryContent(b"RIFF", media_type="audio/wav")])]
    )
    with pytest.raises(TranscriptError):
        await history.save([audio])
    with pytest.raises(ValidationError):
        await history.save([])
    assert await history.load() == []
    with pytest.raises(ValidationError):
        PydanticAIHistory(store, "")


async def test_an_ended_session_takes_no_more_turns() -> None:
    store = MemoryStore()
    history = PydanticAIHistory(store, "ended")
    await _converse(history, 1)
    before = await history.load()
    await store.end_session("ended", datetime.now(UTC).replace(microsecond=0))
    result = await _agent().run("more", message_history=before)
    with pytest.raises(SessionEndedError):
        await history.save(result.new_messages())
    assert await PydanticAIHistory(store, "ended").load() == before
