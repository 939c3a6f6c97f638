"""A replayed transcript as the inspector shows it: messages, each tool call beside its result.

The transcript comes from the run log ([R2], ``build_messages_from_run_log``);
this module only arranges it for reading. A tool result is shown beside the
call it answers (the first unanswered call with its id before it) and not
again in the user message that carried it; a result that answers no call is
shown on its own.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from agentledger.transcript import (
    CitationsPart,
    DocumentPart,
    ImagePart,
    JsonNumber,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
)

__all__ = [
    "Bubble",
    "Exchange",
    "arrange",
    "bubble_at",
    "data_uri",
    "kind_of",
    "pretty_json",
    "searchable",
]


@dataclass
class Exchange:
    """A tool call and the result that answered it (None while unanswered)."""

    call: ToolUsePart
    result: ToolResultPart | None = None


Item = Part | Exchange


@dataclass
class Bubble:
    """One message of the conversation: its role, what it shows, and provider metadata."""

    index: int
    role: str
    items: list[Item] = field(default_factory=list)
    meta: Any = None
    run_id: str = ""
    """The run that added the message (in a session's conversation)."""


def arrange(messages: Sequence[Message], sources: Sequence[str] = ()) -> list[Bubble]:
    """The messages as bubbles, tool results moved beside their calls.

    A user message that held only results already shown beside their calls is
    left out; its results are not lost, they are shown with the calls.
    ``sources`` names the run each message came from (a session's conversation).
    """
    open_calls: dict[str, list[Exchange]] = {}
    bubbles: list[Bubble] = []
    for index, message in enumerate(messages):
        source = sources[index] if index < len(sources) else ""
        bubble = Bubble(index=index, role=message.role, meta=message.meta, run_id=source)
        for part in message.parts:
            if isinstance(part, ToolUsePart):
                exchange = Exchange(part)
                open_calls.setdefault(part.id, []).append(exchange)
                bubble.items.append(exchange)
            elif isinstance(part, ToolResultPart) and open_calls.get(part.tool_use_id):
                open_calls[part.tool_use_id].pop(0).result = part
            else:
                bubble.items.append(part)
        if bubble.items or message.meta is not None or not message.parts:
            bubbles.append(bubble)
    return bubbles


_KINDS: dict[type, str] = {
    ThinkingPart: "thinking",
    TextPart: "text",
    ImagePart: "image",
    DocumentPart: "document",
    CitationsPart: "citations",
    ToolUsePart: "tool_use",
    ToolResultPart: "tool_result",
    Exchange: "exchange",
}


def kind_of(item: object) -> str:
    """The template's name for what ``item`` is (``text``, ``exchange``, ...)."""
    return _KINDS.get(type(item), "cache_checkpoint")


def _exact(value: Any) -> Any:
    if isinstance(value, JsonNumber):
        return msgspec.Raw(value.literal.encode("ascii"))
    raise TypeError(f"not JSON: {type(value).__name__}")


_ENCODER = msgspec.json.Encoder(enc_hook=_exact, decimal_format="number")


def pretty_json(value: Any) -> str:
    """``value`` (or JSON bytes) as indented JSON text, every number spelled as stored."""
    raw = value if isinstance(value, bytes) else _ENCODER.encode(value)
    try:
        return msgspec.json.format(raw, indent=2).decode("utf-8", errors="replace")
    except msgspec.DecodeError:
        return raw.decode("utf-8", errors="replace")


_MEDIA = {
    "png": "image/png",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "pdf": "application/pdf",
    "csv": "text/csv",
    "html": "text/plain",
    "txt": "text/plain",
    "md": "text/plain",
}


def data_uri(data: bytes, format: str) -> str:
    """A ``data:`` URI for inline bytes (HTML is offered as plain text, never rendered)."""
    media = _MEDIA.get(format, "application/octet-stream")
    return f"data:{media};base64,{base64.b64encode(data).decode('ascii')}"


def searchable(bubble: Bubble) -> str:
    """The bubble's text, tool names, inputs and results, lowercased (what search matches)."""
    texts: list[str] = [bubble.role]
    for item in bubble.items:
        if isinstance(item, Exchange):
            texts += [item.call.name, pretty_json(item.call.input)]
            if item.result is not None:
                texts.append(_content(item.result.content))
        elif isinstance(item, TextPart | ThinkingPart | CitationsPart):
            texts.append(item.text)
        elif isinstance(item, ToolResultPart):
            texts.append(_content(item.content))
        elif isinstance(item, DocumentPart):
            texts += [item.name, item.text or ""]
    return "\n".join(texts).lower()


def _content(content: Any) -> str:
    return content if isinstance(content, str) else pretty_json(content)


def bubble_at(
    bubbles: Sequence[Bubble], origins: Sequence[tuple[str, str, int]], wanted: tuple[str, str, int]
) -> int | None:
    """The number of the bubble showing the message stored at ``wanted`` (run, record, place
    in the record), ``origins`` saying where each message is stored: a message of tool
    results only is shown beside its calls, in an earlier bubble. None when no message is
    stored there."""
    n = next((i for i, origin in enumerate(origins) if tuple(origin) == wanted), None)
    if n is None:
        return None
    return max((b.index for b in bubbles if b.index <= n), default=None)
