"""What every adapter checks and decides the same way before it encodes a transcript.

* A transcript is sent only if it passes `validate_planner_transcript` and no
  tool use is still waiting for its result: every provider refuses a tool use
  without its result, so we refuse first and say which ids ([T3], [T5]).
* Reasoning is replayed only to the provider that produced it. Decoders record
  provenance in `Message.meta`: ``meta[provider]["reasoning"]`` lists the part
  indexes (or, for OpenAI, ``{"part_index": i, "item": {...}}`` entries) of the
  `ThinkingPart`\\ s that provider wrote. Any other `ThinkingPart`, and any
  non-empty `ToolUsePart.thought_signature` (Gemini's), is foreign: a
  `TranscriptError`, unless ``options["drop_foreign_reasoning"]`` asks to leave
  it out.
* A part a provider cannot carry is a `TranscriptError` naming the message and
  part ([T7]); nothing is dropped unless an option says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol, TypeVar

from agentledger.errors import TranscriptError
from agentledger.providers._json import dumps
from agentledger.providers._names import ToolNames
from agentledger.providers.model import ModelStreamEvent, ToolDefinition
from agentledger.transcript import (
    Message,
    Part,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    validate_planner_transcript,
)

__all__ = [
    "DOCUMENT_MIME",
    "IMAGE_MIME",
    "assistant_message",
    "check_sendable",
    "drain_stream",
    "foreign_reasoning",
    "kind",
    "own_reasoning",
    "refuse",
    "result_text",
    "tool_names_for",
]

IMAGE_MIME = {"png": "image/png", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}
"""MIME type of each `ImagePart.format`."""

DOCUMENT_MIME = {
    "pdf": "application/pdf",
    "csv": "text/csv",
    "doc": "application/msword",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xls": "application/vnd.ms-excel",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "html": "text/html",
    "txt": "text/plain",
    "md": "text/markdown",
}
"""MIME type of each `DocumentPart.format` we know how to send as bytes."""


def kind(part: Part) -> str:
    """The JSON ``kind`` tag of a part (``"tool_use"``), for error messages."""
    return str(part.__struct_config__.tag)


def refuse(
    provider: str,
    message_index: int,
    part_index: int | None,
    field: str,
    expected: str,
    got: object,
    why: str,
    tool_use_ids: Sequence[str] = (),
) -> TranscriptError:
    """The error for something ``provider`` cannot carry, at ``messages[i].parts[j]``."""
    return TranscriptError(
        field=field,
        expected=expected,
        got=got,
        message=f"{provider}: {why}",
        message_index=message_index,
        part_index=part_index,
        tool_use_ids=tool_use_ids,
    )


def check_sendable(messages: Iterable[Message]) -> tuple[Message, ...]:
    """Validate ``messages`` as a planner transcript that can be sent now.

    Raises:
        TranscriptError: a planner rule is broken ([T3], [T5]), or the last
            assistant group still waits for tool results (``tool_use_ids``
            names them).
    """
    items = tuple(messages)
    validate_planner_transcript(items)
    pending: list[str] = []
    first = -1
    for index, message in enumerate(items):
        if message.role == "assistant":
            ids = [p.id for p in message.parts if isinstance(p, ToolUsePart)]
            if ids and not pending:
                first = index
            pending += ids
        elif message.role == "user":
            pending = []
    if pending:
        raise TranscriptError(
            field="messages",
            expected="a result for every tool use before the next model call",
            got=pending,
            message=f"tool uses {pending} are still waiting for their results",
            message_index=first,
            tool_use_ids=pending,
        )
    return items


def own_reasoning(message: Message, provider: str) -> dict[int, Any]:
    """The parts of ``message`` that ``provider``'s decoder marked as its own reasoning.

    Returns part index -> the entry (an int, or the OpenAI reasoning entry dict).
    """
    meta = message.meta or {}
    mine = meta.get(provider)
    if not isinstance(mine, dict):
        return {}
    entries = mine.get("reasoning")
    found: dict[int, Any] = {}
    if isinstance(entries, list):
        for entry in entries:
            if type(entry) is int:
                found[entry] = entry
            elif isinstance(entry, dict) and type(entry.get("part_index")) is int:
                found[entry["part_index"]] = entry
    return found


def foreign_reasoning(
    provider: str, message_index: int, part_index: int, part: ThinkingPart | ToolUsePart, drop: bool
) -> None:
    """Refuse reasoning ``provider`` did not produce, or return so the caller leaves it out.

    Raises:
        TranscriptError: unless ``drop`` (``options["drop_foreign_reasoning"]``).
    """
    if drop:
        return
    if isinstance(part, ToolUsePart):
        raise refuse(
            provider,
            message_index,
            part_index,
            f"parts[{part_index}].thought_signature",
            "an empty thought_signature (only Gemini replays it)",
            part.thought_signature,
            f"cannot replay the thought_signature of tool use {part.id!r}; "
            "set options['drop_foreign_reasoning'] to leave it out",
            (part.id,),
        )
    raise refuse(
        provider,
        message_index,
        part_index,
        f"parts[{part_index}]",
        f"reasoning produced by {provider} (Message.meta[{provider!r}]['reasoning'])",
        kind(part),
        "cannot replay reasoning it did not produce; set "
        "options['drop_foreign_reasoning'] to leave it out",
    )


def result_text(part: ToolResultPart) -> str:
    """The text of a tool result: a str as it is, any other JSON value as compact JSON."""
    return part.content if isinstance(part.content, str) else dumps(part.content)


def tool_names_for(messages: Iterable[Message], tools: Iterable[ToolDefinition]) -> ToolNames:
    """The wire names of every tool a request mentions: its tools and its transcript's calls.

    Raises:
        ValidationError: two names would share a wire name.
    """
    names = ToolNames(tool.name for tool in tools)
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolUsePart):
                names.add(part.name)
    return names


def assistant_message(provider: str, parts: Sequence[Part]) -> Message:
    """A decoded assistant message, marking its `ThinkingPart`\\ s as ``provider``'s own."""
    reasoning = [i for i, part in enumerate(parts) if isinstance(part, ThinkingPart)]
    return Message(
        role="assistant",
        parts=tuple(parts),
        meta={provider: {"reasoning": reasoning}} if reasoning else None,
    )


_E_contra = TypeVar("_E_contra", contravariant=True)


class _StreamDecoder(Protocol[_E_contra]):
    def feed(self, event: _E_contra, /) -> list[ModelStreamEvent]: ...

    def end(self) -> list[ModelStreamEvent]: ...


def drain_stream(
    decoder: _StreamDecoder[_E_contra], events: Iterable[_E_contra]
) -> list[ModelStreamEvent]:
    """Every event a whole recorded stream yields through ``decoder``, ending with `StreamEnd`."""
    out: list[ModelStreamEvent] = []
    for event in events:
        out += decoder.feed(event)
    return out + decoder.end()
