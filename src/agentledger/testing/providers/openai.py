"""A stub of OpenAI's Chat Completions and Responses APIs (``/v1/...``), JSON and SSE.

Requests are checked as OpenAI does (messages quoted from its errors): a
bearer token, known roles and content part types, tool names matching
``^[a-zA-Z0-9_-]{1,64}$``; for Chat, every assistant ``tool_calls`` answered by
the ``tool`` messages right after it and no ``tool`` message without a call;
for Responses, every ``function_call`` with a ``function_call_output`` and no
output without its call, and, with ``store: false``, reasoning items only with
their ``encrypted_content``. A refused request gets a 400
``invalid_request_error`` and consumes no scripted reply.

Point ``AsyncOpenAI(base_url=stub.url + "/v1")`` at it.
"""

from __future__ import annotations

import json
import re
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
    "OpenAIStub",
    "chat_chunks",
    "completion",
    "completion_reply",
    "error_reply",
    "response",
    "response_events",
    "response_reply",
]

_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_USER_PARTS = frozenset(("text", "image_url", "file", "input_audio"))
_INPUT_CONTENT = frozenset(("input_text", "input_image", "input_file", "output_text", "refusal"))


def completion(
    content: str | None = None,
    tool_calls: list[tuple[str, str, dict[str, Any]]] = (),  # type: ignore[assignment]
    *,
    finish_reason: str | None = None,
    model: str = "gpt-stub",
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Chat Completions response; ``tool_calls`` are ``(id, name, arguments)``."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in tool_calls
        ]
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
            }
        ],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def completion_reply(*args: Any, **kwargs: Any) -> Reply:
    """A scripted reply holding `completion` (streamed if the request streams)."""
    return Reply(body=completion(*args, **kwargs))


def response(
    *output: dict[str, Any], model: str = "gpt-stub", usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A Responses API response object with these output items."""
    return {
        "id": "resp_stub",
        "object": "response",
        "created_at": 1700000000,
        "status": "completed",
        "model": model,
        "output": list(output),
        "usage": usage or {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    }


def response_reply(*output: dict[str, Any], **kwargs: Any) -> Reply:
    """A scripted reply holding `response` (streamed if the request streams)."""
    return Reply(body=response(*output, **kwargs))


def error_reply(status: int, kind: str, text: str, code: str | None = None) -> Reply:
    """An error answer shaped like OpenAI's (``{"error": {...}}``)."""
    return Reply(
        status=status, body={"error": {"message": text, "type": kind, "param": None, "code": code}}
    )


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [piece for piece in (text[:middle], text[middle:]) if piece]


def chat_chunks(body: dict[str, Any], include_usage: bool = True) -> list[Any]:
    """The chunks (and final ``"[DONE]"``) Chat Completions streams for ``body``."""
    head = {key: body[key] for key in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    choice = body["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks: list[Any] = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in _halves(message.get("content") or "")]
    for number, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        first = {"index": number, "id": call["id"], "type": "function"}
        first["function"] = {"name": function["name"], "arguments": ""}
        chunks.append(chunk({"tool_calls": [first]}))
        for piece in _halves(function["arguments"]):
            chunks.append(
                chunk({"tool_calls": [{"index": number, "function": {"arguments": piece}}]})
            )
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": body.get("usage")})
    chunks.append("[DONE]")
    return chunks


def response_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The SSE events the Responses API streams for the response ``body``."""
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {**body, "status": "in_progress", "output": []}}
    ]
    for index, item in enumerate(body["output"]):
        kind = item["type"]
        item_id = item.get("id", f"item_{index}")
        if kind == "message":
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "content": []},
                }
            )
            for position, part in enumerate(item["content"]):
                key = {"output_index": index, "item_id": item_id, "content_index": position}
                empty = {**part, "text": ""} if part["type"] == "output_text" else part
                events.append({"type": "response.content_part.added", **key, "part": empty})
                if part["type"] == "output_text":
                    for piece in _halves(part["text"]):
                        events.append({"type": "response.output_text.delta", **key, "delta": piece})
                    events.append(
                        {"type": "response.output_text.done", **key, "text": part["text"]}
                    )
                events.append({"type": "response.content_part.done", **key, "part": part})
        elif kind == "reasoning":
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "summary": []},
                }
            )
            for position, summary in enumerate(item.get("summary") or ()):
                key = {"output_index": index, "item_id": item_id, "summary_index": position}
                for piece in _halves(summary["text"]):
                    events.append(
                        {"type": "response.reasoning_summary_text.delta", **key, "delta": piece}
                    )
        elif kind == "function_call":
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "arguments": ""},
                }
            )
            key = {"output_index": index, "item_id": item_id}
            for piece in _halves(item["arguments"]):
                events.append(
                    {"type": "response.function_call_arguments.delta", **key, "delta": piece}
                )
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": body})
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


def _error(text: str, param: str | None = None) -> dict[str, Any]:
    return {
        "error": {"message": text, "type": "invalid_request_error", "param": param, "code": None}
    }


def _check_tools(tools: Any, chat: bool) -> str | None:
    for number, tool in enumerate(tools or ()):
        name = (tool.get("function") or {}).get("name") if chat else tool.get("name")
        if not _TOOL_NAME.fullmatch(str(name or "")):
            where = f"tools[{number}].function.name" if chat else f"tools[{number}].name"
            return (
                f"Invalid '{where}': string does not match pattern. Expected a string that "
                "matches the pattern '^[a-zA-Z0-9_-]+$'."
            )
    return None


def check_chat(body: Any) -> str | None:
    """OpenAI's refusal message for a Chat Completions body, or None."""
    if not isinstance(body, dict) or "model" not in body:
        return "you must provide a model parameter"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "[] is too short - 'messages'"
    problem = _check_tools(body.get("tools"), chat=True)
    if problem:
        return problem
    pending: list[str] = []
    for number, item in enumerate(messages):
        role = item.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return (
                f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', "
                "'user', 'tool', and 'developer'."
            )
        if role == "tool":
            if item.get("tool_call_id") not in pending:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'."
                )
            pending.remove(item["tool_call_id"])
            continue
        if pending:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(pending)}"
            )
        content = item.get("content")
        if role == "user" and isinstance(content, list):
            for position, part in enumerate(content):
                if part.get("type") not in _USER_PARTS:
                    return (
                        f"Invalid value: '{part.get('type')}' at "
                        f"messages[{number}].content[{position}].type"
                    )
        if role == "assistant":
            if content is None and not item.get("tool_calls"):
                return f"Missing required parameter: 'messages[{number}].content'."
            pending = [call["id"] for call in item.get("tool_calls") or ()]
    if pending:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(pending)}"
        )
    return None


def check_responses(body: Any) -> str | None:
    """OpenAI's refusal message for a Responses API body, or None."""
    if not isinstance(body, dict) or "model" not in body:
        return "Missing required parameter: 'model'."
    items = body.get("input")
    if isinstance(items, str):
        return None
    if not isinstance(items, list):
        return "Invalid type for 'input'"
    problem = _check_tools(body.get("tools"), chat=False)
    if problem:
        return problem
    calls: set[str] = set()
    answered: set[str] = set()
    for number, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "message":
            for position, part in enumerate(item.get("content") or ()):
                if isinstance(part, dict) and part.get("type") not in _INPUT_CONTENT:
                    return (
                        f"Invalid value: '{part.get('type')}' at "
                        f"input[{number}].content[{position}].type"
                    )
        elif kind == "function_call":
            calls.add(item.get("call_id", ""))
        elif kind == "function_call_output":
            if item.get("call_id") not in calls:
                return (
                    "No tool call found for function call output with call_id "
                    f"{item.get('call_id')}."
                )
            answered.add(item["call_id"])
        elif kind == "reasoning":
            if body.get("store") is False and not item.get("encrypted_content"):
                return (
                    f"Item with id '{item.get('id')}' not found. Items are not persisted when "
                    "`store` is set to false."
                )
        else:
            return f"Invalid value: '{kind}' at input[{number}].type"
    missing = sorted(calls - answered)
    if missing:
        return f"No tool output found for function call {missing[0]}."
    return None


def _sse_chat(chunk: Any) -> bytes:
    data = chunk if chunk == "[DONE]" else json.dumps(chunk)
    return f"data: {data}\n\n".encode()


def _sse_responses(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


class OpenAIStub(StubServer):
    """Chat Completions and Responses on 127.0.0.1 under ``/v1``."""

    def handle(self, request: RecordedRequest) -> Response:
        path = request.path.split("?")[0]
        if path not in ("/v1/chat/completions", "/v1/responses"):
            return json_response(404, _error(f"Invalid URL (POST {path})"))
        if not request.headers.get("authorization", "").startswith("Bearer "):
            return json_response(
                401,
                {
                    "error": {
                        "message": "Missing bearer authentication",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
        chat = path == "/v1/chat/completions"
        problem = check_chat(request.body) if chat else check_responses(request.body)
        if problem:
            return json_response(400, _error(problem))
        reply = self.next_reply()
        if reply is None:
            return json_response(
                500,
                {
                    "error": {
                        "message": "stub: no reply scripted",
                        "type": "server_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
        if reply.status != 200:
            return json_response(reply.status, reply.body, reply.headers)
        if request.body.get("stream"):
            if chat:
                usage = bool((request.body.get("stream_options") or {}).get("include_usage"))
                events = (
                    list(reply.events)
                    if reply.events is not None
                    else chat_chunks(reply.body, usage)
                )
                return stream_response("text/event-stream", events, _sse_chat, reply.drop_after)
            events = list(reply.events) if reply.events is not None else response_events(reply.body)
            return stream_response("text/event-stream", events, _sse_responses, reply.drop_after)
        if reply.drop_after is not None:
            return stream_response("application/json", [b""], lambda b: b, 0)
        return json_response(200, reply.body, reply.headers)
