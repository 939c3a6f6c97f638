"""Model providers: the ``ModelClient`` boundary and adapters for OpenAI, Anthropic, Bedrock.

Adapters re-encode transcript parts into provider payloads in order, never
reordering or dropping, and decode responses (streamed too) back into parts
[T7]. Each provider SDK is an optional extra.
"""

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
