"""Model providers: the ``ModelClient`` boundary and adapters for OpenAI, Anthropic, Bedrock.

Adapters re-encode transcript parts into provider payloads in order, never
reordering or dropping, and decode responses (streamed too) back into parts
[T7]. Each provider SDK is an optional extra, imported only when a client is
built. The clients (``OpenAIChatClient``, ``OpenAIResponsesClient``,
``AnthropicClient``, ``BedrockClient``) are exported here and loaded on first
use from ``agentledger.providers.openai`` (Chat Completions and Responses),
``.anthropic`` (Messages) and ``.bedrock`` (Converse). See docs/providers.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentledger.providers._environment import client_from_environment
from agentledger.providers.model import (
    ModelClient,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    StopReason,
    StreamEnd,
    TextDelta,
    ThinkingConfig,
    ThinkingDelta,
    ToolDefinition,
    ToolInputDelta,
    ToolUseStart,
    Usage,
)

if TYPE_CHECKING:
    from agentledger.providers.anthropic import AnthropicClient
    from agentledger.providers.bedrock import BedrockClient
    from agentledger.providers.openai import OpenAIChatClient, OpenAIResponsesClient

_CLIENTS = {
    "AnthropicClient": "agentledger.providers.anthropic",
    "BedrockClient": "agentledger.providers.bedrock",
    "OpenAIChatClient": "agentledger.providers.openai",
    "OpenAIResponsesClient": "agentledger.providers.openai",
}

__all__ = [
    "AnthropicClient",
    "BedrockClient",
    "ModelClient",
    "ModelRequest",
    "ModelResponse",
    "ModelStreamEvent",
    "OpenAIChatClient",
    "OpenAIResponsesClient",
    "StopReason",
    "StreamEnd",
    "TextDelta",
    "ThinkingConfig",
    "ThinkingDelta",
    "ToolDefinition",
    "ToolInputDelta",
    "ToolUseStart",
    "Usage",
    "client_from_environment",
]


def __getattr__(name: str) -> Any:
    """Load a client's module on first use, so importing this package loads no adapter."""
    module = _CLIENTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_CLIENTS))
