"""A stub of Anthropic's Messages API (``POST /v1/messages``), JSON and SSE.

It checks requests as Anthropic does (the messages quoted are Anthropic's):
authentication headers, required fields, roles, empty text, tool names,
every ``tool_use`` answered by a ``tool_result`` at the start of the next user
turn and no stray results (consecutive same-role messages are merged first,
as Anthropic does), at most 4 ``cache_control`` breakpoints, none on thinking
blocks, thinking signatures and budgets, and, with thinking on, a tool-result
turn whose assistant turn starts with thinking. A refused request gets a 400
``invalid_request_error`` and consumes no scripted reply.

Use ``AnthropicStub().script(message_reply(...))`` and point the SDK's
``base_url`` at ``stub.url``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from agentledger.testing.providers._server import (
    RecordedRequest,
    Reply,
    Response,
    StubServer,
    json_response,
    stream_response,
)

__all__ = [
    "AnthropicStub",
    "error_reply",
    "message",
    "message_events",
    "message_reply",
    "text_block",
    "thinking_block",
    "tool_use_block",
]

_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_BLOCK_TYPES = frozenset(
    ("text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking")
)


def text_block(text: str) -> dict[str, Any]:
    """A response ``text`` block."""
    return {"type": "text", "text": text}


def tool_use_block(id: str, name: str, input: dict[str, Any]) -> dict[str, Any]:
    """A response ``tool_use`` block."""
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def thinking_block(thinking: str, signature: str) -> dict[str, Any]:
    """A response ``thinking`` block."""
    return {"type": "thinking", "thinking": thinking, "signature": signature}


def message(
    *content: dict[str, Any],
    stop_reason: str | None = None,
    model: str = "claude-stub",
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Messages API response; the stop reason defaults to ``tool_use`` or ``end_turn``."""
    if stop_reason is None:
        uses = any(block.get("type") == "tool_use" for block in content)
        stop_reason = "tool_use" if uses else "end_turn"
    return {
        "id": "msg_stub",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 10, "output_tokens": 5},
    }


def message_reply(*content: dict[str, Any], **kwargs: Any) -> Reply:
    """A scripted reply holding `message` (streamed if the request streams)."""
    return Reply(body=message(*content, **kwargs))


def error_reply(status: int, kind: str, text: str) -> Reply:
    """An error answer shaped like Anthropic's (``{"type": "error", "error": ...}``)."""
    return Reply(status=status, body={"type": "error", "error": {"type": kind, "message": text}})


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [piece for piece in (text[:middle], text[middle:]) if piece]


def message_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The SSE events Anthropic streams for the message ``body``."""
    head = {**body, "content": [], "stop_reason": None, "stop_sequence": None}
    usage = dict(body.get("usage") or {})
    head["usage"] = {**usage, "output_tokens": 1}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": head}, {"type": "ping"}]
    for index, block in enumerate(body["content"]):
        kind = block["type"]
        deltas: list[dict[str, Any]] = []
        if kind == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            if block.get("citations"):
                start["citations"] = []
                deltas += [{"type": "citations_delta", "citation": c} for c in block["citations"]]
            deltas += [{"type": "text_delta", "text": t} for t in _halves(block["text"])]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas += [
                {"type": "thinking_delta", "thinking": t} for t in _halves(block["thinking"])
            ]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "tool_use":
            start = {**block, "input": {}}
            text = json.dumps(block["input"])
            deltas += [{"type": "input_json_delta", "partial_json": t} for t in _halves(text)]
        else:
            start = block
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": body["stop_reason"], "stop_sequence": body["stop_sequence"]},
            "usage": {"output_tokens": usage.get("output_tokens", 0)},
        }
    )
    events.append({"type": "message_stop"})
    return events


def _sse(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def _merged(messages: Sequence[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Consecutive same-role messages as one turn, content as block lists."""
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    for item in messages:
        content = item.get("content")
        blocks: list[dict[str, Any]] = (
            [{"type": "text", "text": content}] if isinstance(content, str) else list(content or ())
        )
        if turns and turns[-1][0] == item.get("role"):
            turns[-1][1].extend(blocks)
        else:
            turns.append((item.get("role", ""), list(blocks)))
    return turns


def check_request(body: Any) -> str | None:
    """Anthropic's refusal message for request ``body``, or None if it would be accepted."""
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    for key in ("model", "max_tokens", "messages"):
        if key not in body:
            return f"{key}: Field required"
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    breakpoints = 0
    system = body.get("system")
    if isinstance(system, list):
        for number, block in enumerate(system):
            if block.get("type") != "text" or not block.get("text"):
                return f"system.{number}: text content blocks must be non-empty"
            breakpoints += "cache_control" in block
    for number, tool in enumerate(body.get("tools") or ()):
        if not _TOOL_NAME.fullmatch(str(tool.get("name", ""))):
            return (
                f"tools.{number}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            )
        breakpoints += "cache_control" in tool
    for number, item in enumerate(messages):
        if item.get("role") not in ("user", "assistant"):
            return f"messages.{number}.role: Input should be 'user' or 'assistant'"
        content = item.get("content")
        if isinstance(content, list):
            if not content:
                return f"messages.{number}: all messages must have non-empty content"
            for position, block in enumerate(content):
                where = f"messages.{number}.content.{position}"
                if block.get("type") not in _BLOCK_TYPES:
                    return f"{where}.type: unknown content block type {block.get('type')!r}"
                if block["type"] == "text" and not block.get("text"):
                    return f"{where}: text content blocks must be non-empty"
                if block["type"] in ("thinking", "redacted_thinking") and "cache_control" in block:
                    return f"{where}.thinking.cache_control: Extra inputs are not permitted"
                if block["type"] == "thinking" and not block.get("signature"):
                    return f"{where}.thinking.signature: Field required"
                breakpoints += "cache_control" in block
    if breakpoints > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
    return _check_tool_pairs(body, _merged(messages))


def _check_tool_pairs(
    body: dict[str, Any], turns: list[tuple[str, list[dict[str, Any]]]]
) -> str | None:
    for number, (role, blocks) in enumerate(turns):
        if role != "assistant":
            continue
        ids = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        if not ids:
            continue
        following = turns[number + 1][1] if number + 1 < len(turns) else []
        results: list[str] = []
        for block in following:
            if block.get("type") != "tool_result":
                break
            results.append(block.get("tool_use_id", ""))
        missing = [i for i in ids if i not in results]
        if missing:
            return (
                f"messages.{number + 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
    for number, (role, blocks) in enumerate(turns):
        if role != "user":
            continue
        previous = turns[number - 1][1] if number > 0 else []
        known = {b["id"] for b in previous if b.get("type") == "tool_use"}
        seen_content = False
        for position, block in enumerate(blocks):
            if block.get("type") != "tool_result":
                seen_content = True
                continue
            if seen_content:
                return (
                    f"messages.{number}.content.{position}: tool_result blocks must come first "
                    "in the user message content"
                )
            if block.get("tool_use_id") not in known:
                return (
                    f"messages.{number}.content.{position}: unexpected `tool_use_id` found in "
                    f"`tool_result` blocks: {block.get('tool_use_id')}. Each `tool_result` block "
                    "must have a corresponding `tool_use` block in the previous message."
                )
    thinking = body.get("thinking") or {}
    if thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens", 0)
        if budget < 1024 or budget >= body["max_tokens"]:
            return "thinking.budget_tokens: must be >= 1024 and less than max_tokens"
        if len(turns) >= 2 and turns[-1][0] == "user":
            last_user = turns[-1][1]
            assistant = turns[-2][1]
            answered = any(b.get("type") == "tool_result" for b in last_user)
            if answered and assistant[0].get("type") not in ("thinking", "redacted_thinking"):
                return (
                    f"messages.{len(turns) - 2}.content.0.type: Expected `thinking` or "
                    f"`redacted_thinking`, but found `{assistant[0].get('type')}`. When "
                    "`thinking` is enabled, a final `assistant` message must start with a "
                    "thinking block."
                )
    return None


class AnthropicStub(StubServer):
    """The Messages API on 127.0.0.1; point ``AsyncAnthropic(base_url=stub.url)`` at it."""

    def handle(self, request: RecordedRequest) -> Response:
        if request.path.split("?")[0] == "/v1/messages/count_tokens":
            return self._count(request)
        if request.path.split("?")[0] != "/v1/messages":
            return json_response(
                404, {"type": "error", "error": {"type": "not_found_error", "message": "Not Found"}}
            )
        credentials = request.headers.get("x-api-key") or request.headers.get("authorization")
        if not credentials or not request.headers.get("anthropic-version"):
            return json_response(
                401,
                {
                    "type": "error",
                    "error": {"type": "authentication_error", "message": "invalid x-api-key"},
                },
            )
        problem = check_request(request.body)
        if problem:
            return json_response(
                400,
                {"type": "error", "error": {"type": "invalid_request_error", "message": problem}},
            )
        reply = self.next_reply()
        if reply is None:
            return json_response(
                500,
                {
                    "type": "error",
                    "error": {"type": "api_error", "message": "stub: no reply scripted"},
                },
            )
        if reply.status != 200:
            return json_response(reply.status, reply.body, reply.headers)
        if request.body.get("stream"):
            events = list(reply.events) if reply.events is not None else message_events(reply.body)
            return stream_response("text/event-stream", events, _sse, reply.drop_after)
        if reply.drop_after is not None:
            return stream_response("application/json", [b""], lambda b: b, 0)
        return json_response(200, reply.body, reply.headers)

    def _count(self, request: RecordedRequest) -> Response:
        """``count_tokens``: one token per four bytes of the request's JSON (a stand-in
        that grows with the request, as the real count does)."""
        body = dict(request.body)
        problem = check_request({**body, "max_tokens": 1024})
        if problem or "max_tokens" in body:
            message = problem or "max_tokens: Extra inputs are not permitted"
            return json_response(
                400,
                {"type": "error", "error": {"type": "invalid_request_error", "message": message}},
            )
        return json_response(200, {"input_tokens": len(json.dumps(body)) // 4})
