"""A full ModelPlanner run through each real client and its loopback stub ([T3] [T7])."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentledger.providers._names import wire_name
from agentledger.runtime import QueueSink, events, tool
from agentledger.storage import MemoryStore, RunStatus
from agentledger.testing.providers import anthropic as anthropic_wire
from agentledger.testing.providers import bedrock as bedrock_wire
from agentledger.testing.providers import openai as openai_wire
from agentledger.transcript import Message, TextPart
from tests.providers.test_clients import KITS, Kit
from tests.runtime.support import chat_runtime, records


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.mark.parametrize("kit", KITS, ids=[k.name for k in KITS])
async def test_model_planner_tool_loop(kit: Kit) -> None:
    """The runtime's planner drives a tool loop over real HTTP: call, tool, result, answer."""
    with kit.stub() as stub:
        client: Any = kit.client(stub)
        try:
            wire = wire_name(add.name)
            stub.script(
                kit.tool_reply([("call_1", wire, {"a": 2, "b": 3})], ""), kit.text_reply("5")
            )
            store = MemoryStore()
            await store.create_session("s1", created_at=_now())
            runtime = chat_runtime(store, client, tools=[add])
            out = await runtime.agent_client("chat").run(
                "s1", [Message(role="user", parts=(TextPart(text="2+3?"),))]
            )
        finally:
            await client.aclose()
    assert out.status == RunStatus.COMPLETED, out.failure
    assert out.final is not None
    assert out.final.parts == (TextPart(text="5"),)
    assert len(stub.requests) == 2


def _now() -> Any:
    from datetime import UTC, datetime

    stamp = datetime.now(UTC)
    return stamp.replace(microsecond=stamp.microsecond // 1000 * 1000)


def _deltas(sink: QueueSink, run_id: str) -> list[events.ModelDelta]:
    return [e for e in sink.for_run(run_id) if isinstance(e, events.ModelDelta)]


@pytest.mark.parametrize("kit", KITS, ids=[k.name for k in KITS])
async def test_model_output_reaches_the_stream_as_it_arrives(kit: Kit) -> None:
    """model_delta events (text, tool call, tool-call input) reach the StreamSink during
    each model call, before the assistant message is recorded; they are not records."""
    sink = QueueSink()
    with kit.stub() as stub:
        client: Any = kit.client(stub)
        try:
            wire = wire_name(add.name)
            stub.script(
                kit.tool_reply([("call_1", wire, {"a": 2, "b": 3})], "Adding now."),
                kit.text_reply("The sum is 5."),
            )
            store = MemoryStore()
            await store.create_session("s1", created_at=_now())
            runtime = chat_runtime(store, client, tools=[add], stream=sink)
            out = await runtime.agent_client("chat").run("s1", "2+3?")
        finally:
            await client.aclose()
    assert out.status == RunStatus.COMPLETED, out.failure
    assert out.text == "The sum is 5."
    deltas = _deltas(sink, out.run_id)
    first = [d for d in deltas if d.turn == 1]
    second = [d for d in deltas if d.turn == 2]
    assert "".join(d.text for d in first if d.kind == "text") == "Adding now."
    assert [(d.tool_call_id, d.tool_name) for d in first if d.kind == "tool_use"] == [
        ("call_1", "add")
    ]
    tool_input = "".join(d.text for d in first if d.kind == "tool_input")
    assert json.loads(tool_input) == {"a": 2, "b": 3}
    assert len([d for d in second if d.kind == "text"]) >= 2  # streamed in pieces
    assert "".join(d.text for d in second if d.kind == "text") == "The sum is 5."
    assert [d.seq for d in first] == list(range(len(first)))
    assert len({d.key for d in deltas}) == len(deltas)
    # each turn's deltas come before the assistant message they make up, once
    order = [e.key.split("/", 1)[1] for e in sink.for_run(out.run_id)]
    assert order.index(first[-1].key.split("/", 1)[1]) < order.index("turn:1:assistant:messages")
    assert order.index(second[-1].key.split("/", 1)[1]) < order.index("turn:2:final:messages")
    kinds = [r.type for r in await records(store, out.run_id)]
    assert "model_delta" not in kinds
    assert kinds.count("transcript_messages_appended") == 4


THINKING = {
    "anthropic": lambda: anthropic_wire.message_reply(
        anthropic_wire.thinking_block("Two plus three.", "sig-1"),
        anthropic_wire.text_block("Five."),
    ),
    "openai-responses": lambda: openai_wire.response_reply(
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Two plus three."}],
        },
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Five.", "annotations": []}],
        },
    ),
    "bedrock": lambda: bedrock_wire.converse_reply(
        {"reasoningContent": {"reasoningText": {"text": "Two plus three.", "signature": "s"}}},
        {"text": "Five."},
    ),
}


@pytest.mark.parametrize(
    "kit", [k for k in KITS if k.name in THINKING], ids=[k.name for k in KITS if k.name in THINKING]
)
async def test_thinking_streams_as_model_deltas(kit: Kit) -> None:
    """Reasoning text arrives as thinking deltas (Chat Completions streams none)."""
    sink = QueueSink()
    with kit.stub() as stub:
        client: Any = kit.client(stub)
        try:
            stub.script(THINKING[kit.name]())
            store = MemoryStore()
            await store.create_session("s1", created_at=_now())
            runtime = chat_runtime(store, client, stream=sink)
            out = await runtime.agent_client("chat").run("s1", "2+3?")
        finally:
            await client.aclose()
    assert out.text == "Five.", out.failure
    deltas = _deltas(sink, out.run_id)
    assert "".join(d.text for d in deltas if d.kind == "thinking") == "Two plus three."
    assert "".join(d.text for d in deltas if d.kind == "text") == "Five."
