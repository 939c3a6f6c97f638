"""A stub of Amazon Bedrock Runtime's Converse API: ``converse`` (JSON) and ``converse-stream``.

``converse-stream`` answers in the AWS binary event-stream encoding that
boto3 reads (`encode_frame`: prelude with total and header lengths and its
CRC32, string headers ``:event-type``/``:content-type``/``:message-type``, the
JSON payload, and the CRC32 of the whole message). Requests are checked as
Bedrock does (its ValidationException messages): a conversation that starts
with a user message and alternates roles, ``toolConfig`` present when tool
blocks are, every ``toolUse`` answered in the next user message and no stray
``toolResult``, tool names matching ``[a-zA-Z0-9_-]+`` (1-64), no blank text,
at most 4 ``cachePoint`` blocks, and, with Claude thinking enabled, assistant
tool-use messages that start with ``reasoningContent``.

Point ``boto3.client("bedrock-runtime", endpoint_url=stub.url, ...)`` at it,
with any fake credentials (signatures are not checked).
"""

from __future__ import annotations

import json
import re
import zlib
from typing import Any
from urllib.parse import unquote

from agentledger.testing.providers._server import (
    RecordedRequest,
    Reply,
    Response,
    StubServer,
    json_response,
    stream_response,
)

__all__ = [
    "BedrockStub",
    "check_request",
    "converse_events",
    "converse_reply",
    "converse_response",
    "encode_frame",
    "error_reply",
]

_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_PATH = re.compile(r"/model/(?P<model>[^/]+)/(?P<op>converse|converse-stream)")


def encode_frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message with string-valued ``headers`` (type 7)."""
    encoded = b""
    for name, value in headers.items():
        raw_name, raw_value = name.encode("utf-8"), value.encode("utf-8")
        encoded += len(raw_name).to_bytes(1, "big") + raw_name + b"\x07"
        encoded += len(raw_value).to_bytes(2, "big") + raw_value
    total = 12 + len(encoded) + len(payload) + 4
    prelude = total.to_bytes(4, "big") + len(encoded).to_bytes(4, "big")
    message = prelude + zlib.crc32(prelude).to_bytes(4, "big") + encoded + payload
    return message + zlib.crc32(message).to_bytes(4, "big")


def _event_frame(event: dict[str, Any]) -> bytes:
    ((kind, body),) = event.items()
    payload = json.dumps(body).encode("utf-8")
    if kind.endswith("Exception"):
        headers = {
            ":exception-type": kind,
            ":content-type": "application/json",
            ":message-type": "exception",
        }
    else:
        headers = {
            ":event-type": kind,
            ":content-type": "application/json",
            ":message-type": "event",
        }
    return encode_frame(headers, payload)


def converse_response(
    *content: dict[str, Any], stop_reason: str | None = None, usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A Converse response (wire JSON: blobs as base64); stop reason from the content."""
    if stop_reason is None:
        stop_reason = "tool_use" if any("toolUse" in block for block in content) else "end_turn"
    return {
        "output": {"message": {"role": "assistant", "content": list(content)}},
        "stopReason": stop_reason,
        "usage": usage or {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
        "metrics": {"latencyMs": 12},
    }


def converse_reply(*content: dict[str, Any], **kwargs: Any) -> Reply:
    """A scripted reply holding `converse_response` (streamed for ``converse-stream``)."""
    return Reply(body=converse_response(*content, **kwargs))


def error_reply(status: int, code: str, text: str) -> Reply:
    """An error answer shaped like Bedrock's (``x-amzn-ErrorType`` header, ``message`` body)."""
    return Reply(status=status, body={"message": text}, headers={"x-amzn-errortype": f"{code}:"})


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [piece for piece in (text[:middle], text[middle:]) if piece]


def converse_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The events ``converse-stream`` sends for the Converse response ``body``."""
    events: list[dict[str, Any]] = [{"messageStart": {"role": "assistant"}}]
    for index, block in enumerate(body["output"]["message"]["content"]):
        deltas: list[dict[str, Any]] = []
        if "text" in block:
            deltas = [{"text": piece} for piece in _halves(block["text"])]
        elif "toolUse" in block:
            use = block["toolUse"]
            start = {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}
            events.append({"contentBlockStart": {"start": start, "contentBlockIndex": index}})
            deltas = [{"toolUse": {"input": p}} for p in _halves(json.dumps(use["input"]))]
        elif "reasoningContent" in block:
            reasoning = block["reasoningContent"]
            if "redactedContent" in reasoning:
                deltas = [{"reasoningContent": {"redactedContent": reasoning["redactedContent"]}}]
            else:
                text = reasoning["reasoningText"]
                deltas = [{"reasoningContent": {"text": p}} for p in _halves(text["text"])]
                if text.get("signature"):
                    deltas.append({"reasoningContent": {"signature": text["signature"]}})
        elif "citationsContent" in block:
            cited = block["citationsContent"]
            text = "".join(item["text"] for item in cited["content"])
            deltas = [{"text": piece} for piece in _halves(text)]
            deltas += [{"citation": citation} for citation in cited["citations"]]
        events += [{"contentBlockDelta": {"delta": d, "contentBlockIndex": index}} for d in deltas]
        events.append({"contentBlockStop": {"contentBlockIndex": index}})
    events.append({"messageStop": {"stopReason": body["stopReason"]}})
    events.append({"metadata": {"usage": body["usage"], "metrics": {"latencyMs": 12}}})
    return events


def check_request(body: Any) -> str | None:
    """Bedrock's ValidationException message for a Converse body, or None."""
    if not isinstance(body, dict):
        return "Malformed input request"
    messages = body.get("messages") or []
    if not messages:
        return (
            "A conversation must start with a user message. Try again with a "
            "conversation that starts with a user message."
        )
    tool_config = body.get("toolConfig")
    for number, tool in enumerate((tool_config or {}).get("tools") or ()):
        name = str((tool.get("toolSpec") or {}).get("name", ""))
        if not _TOOL_NAME.fullmatch(name):
            return (
                f"1 validation error detected: Value '{name}' at 'toolConfig.tools.{number + 1}."
                "member.toolSpec.name' failed to satisfy constraint: Member must satisfy regular "
                "expression pattern: [a-zA-Z0-9_-]+"
            )
    points = sum("cachePoint" in block for block in body.get("system") or ())
    thinking = ((body.get("additionalModelRequestFields") or {}).get("thinking") or {}).get("type")
    for number, item in enumerate(messages):
        role = item.get("role")
        if number == 0 and role != "user":
            return (
                "A conversation must start with a user message. Try again with a "
                "conversation that starts with a user message."
            )
        if number > 0 and role == messages[number - 1].get("role"):
            return (
                "A conversation must alternate between user and assistant roles. Make "
                "sure the conversation alternates between user and assistant roles and "
                "try again."
            )
        content = item.get("content") or []
        for position, block in enumerate(content):
            points += "cachePoint" in block
            if "text" in block and not block["text"].strip():
                return (
                    "The text field in the ContentBlock object at "
                    f"messages.{number}.content.{position} is blank. Add text to the text "
                    "field, and try again."
                )
            if ("toolUse" in block or "toolResult" in block) and tool_config is None:
                return (
                    "The toolConfig field must be defined when using toolUse and toolResult "
                    "content blocks."
                )
        uses = [b["toolUse"]["toolUseId"] for b in content if "toolUse" in b]
        if role == "assistant" and uses:
            if thinking == "enabled" and "reasoningContent" not in content[0]:
                first = next(iter(content[0]))
                return (
                    f"messages.{number}.content.0.type: Expected `thinking` or "
                    "`redacted_thinking`, "
                    f"but found `{first}`. When `thinking` is enabled, a final `assistant` message "
                    "must start with a thinking block."
                )
            following = (
                messages[number + 1].get("content") or [] if number + 1 < len(messages) else []
            )
            answered = {b["toolResult"]["toolUseId"] for b in following if "toolResult" in b}
            missing = [i for i in uses if i not in answered]
            if missing:
                return (
                    f"Expected toolResult blocks at messages.{number + 1}.content for the "
                    f"following Ids: {', '.join(missing)}"
                )
        if role == "user":
            previous = messages[number - 1].get("content") or [] if number > 0 else []
            known = {b["toolUse"]["toolUseId"] for b in previous if "toolUse" in b}
            for position, block in enumerate(content):
                if "toolResult" in block and block["toolResult"].get("toolUseId") not in known:
                    return (
                        f"messages.{number}.content.{position}.toolResult.toolUseId: the tool use "
                        "id does not match a toolUse block in the previous assistant message"
                    )
    if points > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {points}."
    return None


def _validation(text: str) -> Response:
    return json_response(
        400,
        {"message": text},
        {"x-amzn-errortype": "ValidationException:http://internal.amazon.com/coral/"},
    )


class BedrockStub(StubServer):
    """Bedrock Runtime's ``converse`` and ``converse-stream`` on 127.0.0.1."""

    def handle(self, request: RecordedRequest) -> Response:
        match = _PATH.fullmatch(request.path.split("?")[0])
        if match is None:
            return json_response(
                404, {"message": "Not Found"}, {"x-amzn-errortype": "UnknownOperationException:"}
            )
        if "authorization" not in request.headers:
            return json_response(
                403,
                {"message": "Missing Authentication Token"},
                {"x-amzn-errortype": "MissingAuthenticationTokenException:"},
            )
        problem = check_request(request.body)
        if problem:
            return _validation(problem)
        reply = self.next_reply()
        if reply is None:
            return json_response(
                500,
                {"message": "stub: no reply scripted"},
                {"x-amzn-errortype": "InternalServerException:"},
            )
        if reply.status != 200:
            return json_response(reply.status, reply.body, reply.headers)
        self.last_model = unquote(match["model"])
        if match["op"] == "converse-stream":
            events = list(reply.events) if reply.events is not None else converse_events(reply.body)
            return stream_response(
                "application/vnd.amazon.eventstream", events, _event_frame, reply.drop_after
            )
        if reply.drop_after is not None:
            return stream_response("application/json", [b""], lambda b: b, 0)
        return json_response(200, reply.body, reply.headers)
