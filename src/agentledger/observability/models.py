"""TracedModel: a ``ModelClient`` with one GenAI ``chat`` span per model call.

Attributes follow OpenTelemetry's GenAI semantic conventions (provider,
request model, token usage, finish reasons). Prompt and completion content
is recorded only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``
is ``true`` (the conventions' own switch), as agentledger transcript JSON.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from agentledger.observability.tracing import available, span, tracer
from agentledger.providers.model import (
    ModelClient,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    StreamEnd,
)
from agentledger.transcript import encode_messages

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.util.types import AttributeValue

__all__ = ["CAPTURE_CONTENT_ENV", "TracedModel", "traced_model"]

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""Set to ``true`` to record prompts and completions on model-call spans (off by default)."""

_PROVIDERS = {
    "AnthropicClient": "anthropic",
    "OpenAIChatClient": "openai",
    "OpenAIResponsesClient": "openai",
    "BedrockClient": "aws.bedrock",
}


def provider_name(client: object) -> str:
    """``gen_ai.provider.name`` of a client: a well-known value, or its class name."""
    named = getattr(client, "gen_ai_provider", None)
    if isinstance(named, str) and named:
        return named
    kind = type(client).__name__
    return _PROVIDERS.get(kind, kind)


def capture_content() -> bool:
    """Whether prompts and completions go on spans (read at each call)."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in {"true", "1"}


class TracedModel:
    """``inner`` with a ``chat {model}`` span around every ``complete`` and ``stream``."""

    def __init__(self, inner: ModelClient, model_id: str = "") -> None:
        self.inner = inner
        self.model_id = model_id
        self._provider = provider_name(inner)

    def __repr__(self) -> str:
        return f"TracedModel({self.inner!r})"

    def _attributes(self, request: ModelRequest) -> dict[str, AttributeValue]:
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self._provider,
            "gen_ai.request.model": request.model,
            "gen_ai.request.max_tokens": request.max_tokens,
        }
        if request.temperature is not None:
            attributes["gen_ai.request.temperature"] = request.temperature
        if self.model_id:
            attributes["agentledger.model.id"] = self.model_id
        if capture_content():
            attributes["gen_ai.input.messages"] = encode_messages(request.messages).decode()
        return attributes

    @property
    def count_tokens(self) -> Callable[[ModelRequest], Awaitable[int]]:
        """The inner client's own token count; AttributeError when it has none (so a
        history policy falls back to its estimate, as for the bare client)."""
        inner: Any = self.inner
        found: Callable[[ModelRequest], Awaitable[int]] = inner.count_tokens
        return found

    def complete(self, request: ModelRequest) -> Coroutine[Any, Any, ModelResponse]:
        # While off, the inner client's own coroutine: no frame of ours in between.
        found = tracer()
        if found is None:
            return self.inner.complete(request)
        return self._complete(found, request)

    async def _complete(self, found: Tracer, request: ModelRequest) -> ModelResponse:
        name = f"chat {request.model}"
        with span(found, name, self._attributes(request), kind="client") as opened:
            response = await self.inner.complete(request)
            _response(opened, response)
            return response

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        found = tracer()
        if found is None:
            return self.inner.stream(request)
        return self._stream(request)

    async def _stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        found = tracer()
        assert found is not None
        name = f"chat {request.model}"
        end: StreamEnd | None = None
        # Not made current: an async generator runs in its consumer's context. The span
        # ends at StreamEnd (the last event), before a consumer that stops there lets go.
        with span(found, name, self._attributes(request), kind="client", current=False) as opened:
            async for event in self.inner.stream(request):
                if isinstance(event, StreamEnd):
                    _response(opened, event.response)
                    end = event
                    break
                yield event
        if end is not None:
            yield end


def _response(target: Span, response: ModelResponse) -> None:
    usage = response.usage
    target.set_attribute("gen_ai.response.finish_reasons", [response.stop_reason])
    if response.model:
        target.set_attribute("gen_ai.response.model", response.model)
    target.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
    target.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
    if usage.cache_read_tokens:
        target.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens)
    if usage.cache_write_tokens:
        target.set_attribute("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens)
    if capture_content():
        target.set_attribute("gen_ai.output.messages", encode_messages([response.message]).decode())


def traced_model(client: ModelClient, model_id: str = "") -> ModelClient:
    """``client`` wrapped in a :class:`TracedModel`, or itself when OpenTelemetry is absent."""
    if isinstance(client, TracedModel) or not available():
        return client
    return TracedModel(client, model_id)
