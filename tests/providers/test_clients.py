"""Real SDK clients against the loopback stubs: tool loops, streaming, retries, refusals.

Every client talks real HTTP to a stub on 127.0.0.1 that checks requests the
way its provider does; nothing leaves the machine.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from agentledger.errors import ProviderError, TranscriptError, TransientError
from agentledger.providers import (
    ModelClient,
    ModelRequest,
    ModelResponse,
    StreamEnd,
    ToolDefinition,
)
from agentledger.providers._names import wire_name
from agentledger.testing.providers import AnthropicStub, BedrockStub, OpenAIStub, Reply, StubServer
from agentledger.testing.providers import anthropic as anthropic_wire
from agentledger.testing.providers import bedrock as bedrock_wire
from agentledger.testing.providers import openai as openai_wire
from agentledger.transcript import (
    Message,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    validate_planner_transcript,
)
from tests.providers.conftest import (
    anthropic_client,
    bedrock_client,
    chat_client,
    responses_client,
)

Calls = list[tuple[str, str, dict[str, Any]]]


@dataclass(frozen=True)
class Kit:
    """How to drive one provider's stub and client."""

    name: str
    stub: Callable[[], StubServer]
    client: Callable[[Any], ModelClient]
    tool_reply: Callable[[Calls, str], Reply]
    text_reply: Callable[[str], Reply]
    error_reply: Callable[[int], Reply]
    model: str


def _anthropic_tools(calls: Calls, text: str) -> Reply:
    blocks = [anthropic_wire.text_block(text)] if text else []
    blocks += [anthropic_wire.tool_use_block(i, n, a) for i, n, a in calls]
    return anthropic_wire.message_reply(*blocks)


def _responses_tools(calls: Calls, text: str) -> Reply:
    import json

    items: list[dict[str, Any]] = []
    if text:
        content = [{"type": "output_text", "text": text, "annotations": []}]
        items.append(
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": content,
            }
        )
    for i, n, a in calls:
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{i}",
                "call_id": i,
                "name": n,
                "arguments": json.dumps(a),
            }
        )
    return openai_wire.response_reply(*items)


def _responses_text(text: str) -> Reply:
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return openai_wire.response_reply(
        {
            "type": "message",
            "id": "msg_2",
            "role": "assistant",
            "status": "completed",
            "content": content,
        }
    )


def _bedrock_tools(calls: Calls, text: str) -> Reply:
    blocks: list[dict[str, Any]] = [{"text": text}] if text else []
    blocks += [{"toolUse": {"toolUseId": i, "name": n, "input": a}} for i, n, a in calls]
    return bedrock_wire.converse_reply(*blocks)


_BEDROCK_CODES = {429: "ThrottlingException", 503: "ServiceUnavailableException"}

KITS = [
    Kit(
        "anthropic",
        AnthropicStub,
        anthropic_client,
        _anthropic_tools,
        lambda text: anthropic_wire.message_reply(anthropic_wire.text_block(text)),
        lambda status: anthropic_wire.error_reply(status, "rate_limit_error", "slow down"),
        "claude-test",
    ),
    Kit(
        "openai-chat",
        OpenAIStub,
        chat_client,
        lambda calls, text: openai_wire.completion_reply(text or None, calls),
        lambda text: openai_wire.completion_reply(text),
        lambda status: openai_wire.error_reply(status, "rate_limit_error", "slow down"),
        "gpt-test",
    ),
    Kit(
        "openai-responses",
        OpenAIStub,
        responses_client,
        _responses_tools,
        _responses_text,
        lambda status: openai_wire.error_reply(status, "rate_limit_error", "slow down"),
        "gpt-test",
    ),
    Kit(
        "bedrock",
        BedrockStub,
        bedrock_client,
        _bedrock_tools,
        lambda text: bedrock_wire.converse_reply({"text": text}),
        lambda status: bedrock_wire.error_reply(
            status, _BEDROCK_CODES.get(status, "ValidationException"), "slow down"
        ),
        "anthropic.claude-test-v1:0",
    ),
]


@pytest.fixture(params=KITS, ids=[kit.name for kit in KITS])
def kit(request: pytest.FixtureRequest) -> Kit:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def stub(kit: Kit) -> Iterator[StubServer]:
    with kit.stub() as server:
        yield server


@pytest.fixture
async def client(kit: Kit, stub: StubServer) -> AsyncIterator[Any]:
    sdk_client: Any = kit.client(stub)
    yield sdk_client
    await sdk_client.aclose()


TOOLS = (
    ToolDefinition(
        name="calc.add",
        description="Add two numbers.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    ),
)


def _add(arguments: dict[str, Any]) -> Any:
    return {"sum": arguments["a"] + arguments["b"]}


async def _call(client: ModelClient, request: ModelRequest, stream: bool) -> ModelResponse:
    if not stream:
        return await client.complete(request)
    events = [event async for event in client.stream(request)]
    assert isinstance(events[-1], StreamEnd)
    assert not any(isinstance(event, StreamEnd) for event in events[:-1])
    return events[-1].response


async def _drain(client: ModelClient, request: ModelRequest, seen: list[Any]) -> None:
    async for event in client.stream(request):
        seen.append(event)


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_tool_loop(kit: Kit, stub: StubServer, client: Any, stream: bool) -> None:
    """A full loop: tool uses -> run the tool -> results -> final text ([T3] [T7]).

    The stub refuses any second request whose results do not answer the calls,
    so a green test means the adapter sent the pairs the provider wants.
    """
    wire = wire_name("calc.add")
    stub.script(
        kit.tool_reply(
            [("call_1", wire, {"a": 2, "b": 3}), ("call_2", wire, {"a": 1, "b": 1})], "Let me add."
        ),
        kit.text_reply("5 and 2"),
    )
    messages = [Message(role="user", parts=(TextPart(text="Add 2+3 and 1+1."),))]
    first = await _call(
        client, ModelRequest(model=kit.model, messages=tuple(messages), tools=TOOLS), stream
    )
    uses = [p for p in first.message.parts if isinstance(p, ToolUsePart)]
    assert [(u.id, u.name) for u in uses] == [("call_1", "calc.add"), ("call_2", "calc.add")]
    assert first.stop_reason == "tool_use"
    results = tuple(ToolResultPart(tool_use_id=u.id, content=_add(u.input)) for u in uses)
    messages += [first.message, Message(role="user", parts=results)]
    validate_planner_transcript(messages)
    second = await _call(
        client, ModelRequest(model=kit.model, messages=tuple(messages), tools=TOOLS), stream
    )
    assert second.message.parts == (TextPart(text="5 and 2"),)
    assert second.stop_reason == "end_turn"
    assert len(stub.requests) == 2
    assert stub.pending == 0


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_429_is_transient_then_the_retry_succeeds(
    kit: Kit, stub: StubServer, client: Any, stream: bool
) -> None:
    """Our mapping, not the SDK's retries (off): 429 -> TransientError; the next call works."""
    stub.script(kit.error_reply(429), kit.text_reply("fine"))
    request = ModelRequest(
        model=kit.model, messages=(Message(role="user", parts=(TextPart(text="hi"),)),)
    )
    with pytest.raises(TransientError):
        await _call(client, request, stream)
    assert len(stub.requests) == 1  # the SDK did not retry on its own
    response = await _call(client, request, stream)
    assert response.message.parts == (TextPart(text="fine"),)


async def test_500_is_transient_and_400_is_a_provider_error(
    kit: Kit, stub: StubServer, client: Any
) -> None:
    """5xx -> TransientError; another status -> ProviderError carrying status and body."""
    stub.script(kit.error_reply(503), kit.error_reply(422))
    request = ModelRequest(
        model=kit.model, messages=(Message(role="user", parts=(TextPart(text="hi"),)),)
    )
    with pytest.raises(TransientError):
        await client.complete(request)
    with pytest.raises(ProviderError) as refused:
        await client.complete(request)
    assert refused.value.provider == kit.name.split("-")[0]
    assert refused.value.status == 422
    assert "slow down" in refused.value.body


async def test_connection_dropped_mid_stream_is_transient(
    kit: Kit, stub: StubServer, client: Any
) -> None:
    """A stream cut after a few events is an incomplete answer: TransientError, not a message."""
    text = kit.text_reply("a long answer that will be cut")
    stub.script(Reply(body=text.body, drop_after=3))
    request = ModelRequest(
        model=kit.model, messages=(Message(role="user", parts=(TextPart(text="hi"),)),)
    )
    seen: list[Any] = []
    with pytest.raises(TransientError):
        await _drain(client, request, seen)
    assert not any(isinstance(event, StreamEnd) for event in seen)


async def test_connection_refused_is_transient(kit: Kit) -> None:
    """Nobody listening: a connection error, mapped to TransientError."""
    with kit.stub() as server:
        client: Any = kit.client(server)
    request = ModelRequest(
        model=kit.model, messages=(Message(role="user", parts=(TextPart(text="hi"),)),)
    )
    try:
        with pytest.raises(TransientError):
            await client.complete(request)
    finally:
        await client.aclose()


async def test_tool_use_without_result_is_refused_before_sending(
    kit: Kit, stub: StubServer, client: Any
) -> None:
    """[T3] The adapter refuses a pending tool use itself, naming it; the provider never sees it."""
    messages = (
        Message(role="user", parts=(TextPart(text="add"),)),
        Message(role="assistant", parts=(ToolUsePart(id="call_9", name="calc.add", input={}),)),
        Message(role="user", parts=(TextPart(text="well?"),)),
    )
    with pytest.raises(TranscriptError) as refused:
        await client.complete(ModelRequest(model=kit.model, messages=messages, tools=TOOLS))
    assert refused.value.tool_use_ids == ("call_9",)
    assert stub.requests == []


def test_stubs_refuse_unanswered_tool_uses_like_the_providers() -> None:
    """The stubs' own checks: a tool use with no result is a provider-style 400 message."""
    anthropic_body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}],
            },
            {"role": "user", "content": [{"type": "text", "text": "?"}]},
        ],
    }
    assert "`tool_use` ids were found without `tool_result`" in str(
        anthropic_wire.check_request(anthropic_body)
    )
    chat_body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "x", "arguments": "{}"}}
                ],
            },
            {"role": "user", "content": "?"},
        ],
    }
    assert "did not have response messages: c1" in str(openai_wire.check_chat(chat_body))
    responses_body = {
        "model": "m",
        "input": [{"type": "function_call", "call_id": "c1", "name": "x", "arguments": "{}"}],
    }
    assert "No tool output found for function call c1" in str(
        openai_wire.check_responses(responses_body)
    )
    bedrock_body = {
        "messages": [
            {"role": "user", "content": [{"text": "hi"}]},
            {
                "role": "assistant",
                "content": [{"toolUse": {"toolUseId": "t1", "name": "x", "input": {}}}],
            },
            {"role": "user", "content": [{"text": "?"}]},
        ],
        "toolConfig": {"tools": [{"toolSpec": {"name": "x", "inputSchema": {"json": {}}}}]},
    }
    assert "Expected toolResult blocks at messages.2.content" in str(
        bedrock_wire.check_request(bedrock_body)
    )


async def test_stub_refusal_reaches_the_caller_as_provider_error(
    anthropic_stub: AnthropicStub, anthropic_live: Any
) -> None:
    """A request the provider would refuse (sent around our encoder) comes back as a 400."""
    client = anthropic_live
    request = ModelRequest(
        model="claude-test",
        messages=(Message(role="user", parts=(TextPart(text="hi"),)),),
        options={"extra": {"tools": [{"name": "bad name!", "input_schema": {}}]}},
    )
    with pytest.raises(ProviderError) as refused:
        await client.complete(request)
    assert refused.value.status == 400
    assert "String should match pattern" in refused.value.body


async def test_anthropic_overloaded_event_mid_stream_is_transient(
    anthropic_stub: AnthropicStub, anthropic_live: Any
) -> None:
    """An ``error`` event (overloaded_error) inside a 200 stream -> TransientError."""
    body = anthropic_stub_message()
    events = [
        *anthropic_wire.message_events(body)[:3],
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    ]
    anthropic_stub.script(Reply(body=body, events=events))
    client = anthropic_live
    request = ModelRequest(
        model="claude-test", messages=(Message(role="user", parts=(TextPart(text="hi"),)),)
    )
    with pytest.raises(TransientError):
        await _drain(client, request, [])


def anthropic_stub_message() -> dict[str, Any]:
    return anthropic_wire.message(anthropic_wire.text_block("hello there"))


async def test_bedrock_throttling_event_mid_stream_is_transient(
    bedrock_stub: BedrockStub, bedrock_live: Any
) -> None:
    """A ``throttlingException`` event in ``converse-stream`` -> TransientError."""
    events = [
        {"messageStart": {"role": "assistant"}},
        {"throttlingException": {"message": "Too many requests"}},
    ]
    bedrock_stub.script(Reply(body={}, events=events))
    client = bedrock_live
    request = ModelRequest(
        model="m", messages=(Message(role="user", parts=(TextPart(text="hi"),)),)
    )
    with pytest.raises(TransientError):
        await _drain(client, request, [])
