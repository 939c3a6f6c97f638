"""The boundary between planners and model providers: requests, responses, streams.

A :class:`ModelClient` turns a :class:`ModelRequest` (a whole transcript plus
tool definitions) into a :class:`ModelResponse` (one assistant message), or
streams it as deltas ending with the full response. Provider adapters implement
it; planners depend only on it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

import msgspec

from agentledger.transcript import Message

__all__ = [
    "ModelClient",
    "ModelRequest",
    "ModelResponse",
    "ModelStreamEvent",
    "StopReason",
    "StreamEnd",
    "TextDelta",
    "ThinkingConfig",
    "ThinkingDelta",
    "ToolDefinition",
    "ToolInputDelta",
    "ToolUseStart",
    "Usage",
]

StopReason: TypeAlias = Literal[
    "end_turn", "tool_use", "max_tokens", "stop_sequence", "content_filter", "other"
]
"""Why the model stopped, normalised across providers."""


class ToolDefinition(msgspec.Struct, frozen=True, kw_only=True):
    """A tool the model may call: its canonical name and JSON-schema'd input."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = msgspec.field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )


class ThinkingConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Ask the model to reason before answering, within ``budget_tokens``."""

    budget_tokens: int = 1024


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One model call: the whole transcript so far, last element the new delta [R3].

    System messages stay in ``messages`` (role ``system``); adapters move them
    where their provider wants them. ``options`` carries provider-only settings.
    """

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolDefinition, ...] = ()
    max_tokens: int = 1024
    temperature: float | None = None
    thinking: ThinkingConfig | None = None
    tool_choice: Literal["auto", "any", "none"] = "auto"
    options: dict[str, Any] = msgspec.field(default_factory=dict)


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Token counts of one model call."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


class ModelResponse(msgspec.Struct, frozen=True, kw_only=True):
    """One assistant message, why the model stopped, and what it cost."""

    message: Message
    stop_reason: StopReason
    usage: Usage = Usage()
    model: str = ""  # the model that answered, as the provider names it


class TextDelta(msgspec.Struct, frozen=True, kw_only=True, tag="text_delta"):
    """Streamed visible text for the part at ``index`` of the message being built."""

    index: int
    text: str


class ThinkingDelta(msgspec.Struct, frozen=True, kw_only=True, tag="thinking_delta"):
    """Streamed reasoning text for the part at ``index``."""

    index: int
    text: str


class ToolUseStart(msgspec.Struct, frozen=True, kw_only=True, tag="tool_use_start"):
    """The model began a tool call at ``index``."""

    index: int
    id: str
    name: str


class ToolInputDelta(msgspec.Struct, frozen=True, kw_only=True, tag="tool_input_delta"):
    """A fragment of the JSON input of the tool call at ``index``."""

    index: int
    partial_json: str


class StreamEnd(msgspec.Struct, frozen=True, kw_only=True, tag="stream_end"):
    """The last event of every stream: the complete response, as ``complete`` returns it."""

    response: ModelResponse


ModelStreamEvent: TypeAlias = TextDelta | ThinkingDelta | ToolUseStart | ToolInputDelta | StreamEnd
"""What :meth:`ModelClient.stream` yields; it always ends with one :class:`StreamEnd`."""


@runtime_checkable
class ModelClient(Protocol):
    """Anything that can answer a model request, whole or streamed.

    Errors: :class:`~agentledger.errors.TransientError` for what may succeed on
    retry (429, 5xx, timeouts, dropped connections),
    :class:`~agentledger.errors.ProviderError` for refusals, and
    :class:`~agentledger.errors.TranscriptError` for a transcript the provider
    cannot carry.
    """

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer ``request`` with one assistant message."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Answer ``request`` as deltas, ending with a :class:`StreamEnd`."""
        ...
