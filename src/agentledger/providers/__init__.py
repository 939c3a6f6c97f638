"""Model providers: the ``ModelClient`` boundary and adapters for OpenAI, Anthropic, Bedrock.

Adapters re-encode transcript parts into provider payloads in order, never
reordering or dropping, and decode responses (streamed too) back into parts
[T7]. Each provider SDK is an optional extra, imported only when a client is
built: ``agentledger.providers.openai`` (Chat Completions and Responses),
``.anthropic`` (Messages), ``.bedrock`` (Converse). See docs/providers.md.
"""

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
    "client_from_environment",
]
