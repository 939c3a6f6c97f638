"""OpenAI: Chat Completions and Responses API adapters and their clients.

The pure encodings live in `agentledger.providers.openai_chat` and
`agentledger.providers.openai_responses` (their docstrings say what each API
can and cannot carry); this module re-exports them and adds the two
`ModelClient`\\ s on the official ``openai`` SDK (async).

Reasoning is replayed only to the API that produced it: Responses reasoning
items are kept in ``Message.meta["openai"]`` and sent back verbatim; Chat
Completions cannot replay reasoning at all. Any other reasoning is refused
with a `TranscriptError` unless ``options["drop_foreign_reasoning"]`` is set.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Self, cast

from agentledger.providers import openai_chat, openai_responses
from agentledger.providers._errors import by_status, connection_lost, missing_sdk, transport_errors
from agentledger.providers._json import loads
from agentledger.providers._options import options_for, sdk_kwargs
from agentledger.providers._sse import read_events
from agentledger.providers._transcript import tool_names_for
from agentledger.providers.model import ModelRequest, ModelResponse, ModelStreamEvent

__all__ = [
    "PROVIDER",
    "ChatStreamDecoder",
    "OpenAIChatClient",
    "OpenAIResponsesClient",
    "ResponsesStreamDecoder",
    "decode_chat",
    "decode_chat_stream",
    "decode_responses",
    "decode_responses_stream",
    "encode_chat",
    "encode_responses",
]

PROVIDER = "openai"
encode_chat = openai_chat.encode
decode_chat = openai_chat.decode
decode_chat_stream = openai_chat.decode_stream
ChatStreamDecoder = openai_chat.StreamDecoder
encode_responses = openai_responses.encode
decode_responses = openai_responses.decode
decode_responses_stream = openai_responses.decode_stream
ResponsesStreamDecoder = openai_responses.StreamDecoder


class _OpenAIClient:
    """What both OpenAI clients share: the SDK client and the error mapping."""

    provider = PROVIDER

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        organization: str | None = None,
        max_retries: int = 0,
        timeout: float = 600.0,
        client: Any = None,
    ) -> None:
        """Build the SDK client (``OPENAI_API_KEY`` is read when ``api_key`` is None).

        Retries belong to the runtime, so the SDK's own are off by default.

        Raises:
            ImportError: the ``openai`` package is not installed.
        """
        try:
            import openai
        except ImportError as error:
            raise missing_sdk("openai", "openai") from error
        self._sdk_module: Any = openai
        self._sdk: Any = client or openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            organization=organization,
            max_retries=max_retries,
            timeout=timeout,
        )

    async def aclose(self) -> None:
        """Close the SDK client and its connections."""
        await self._sdk.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _map(self, error: Exception, operation: str) -> Exception | None:
        sdk = self._sdk_module
        if isinstance(error, sdk.APIStatusError):
            try:
                body = error.response.text
            except Exception:
                body = str(error.body)
            return by_status(PROVIDER, operation, error.status_code, body)
        if isinstance(error, (sdk.APIConnectionError, *transport_errors())):
            return connection_lost(PROVIDER, operation, error)
        return None

    async def _post(self, create: Any, kwargs: dict[str, Any], operation: str) -> Any:
        call = cast(Callable[..., Awaitable[Any]], create)
        try:
            raw = await call(**kwargs)
            return loads(await raw.http_response.aread())
        except Exception as error:
            mapped = self._map(error, operation)
            if mapped is None:
                raise
            raise mapped from error

    async def _events(
        self, create: Any, kwargs: dict[str, Any], decoder: Any, operation: str
    ) -> AsyncIterator[ModelStreamEvent]:
        try:
            async with create(**kwargs) as response:
                async for sse in read_events(response.iter_lines()):
                    data = sse.data if sse.data == "[DONE]" else loads(sse.data)
                    for event in decoder.feed(data):
                        yield event
            for event in decoder.end():
                yield event
        except Exception as error:
            mapped = self._map(error, operation)
            if mapped is None:
                raise
            raise mapped from error


class OpenAIChatClient(_OpenAIClient):
    """A `ModelClient` on Chat Completions (``client.chat.completions``), streaming included."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` and decode the whole answer."""
        payload = openai_chat.encode(request.messages, request.tools, options_for(request))
        names = tool_names_for(request.messages, request.tools)
        create = self._sdk.chat.completions.with_raw_response.create
        body = await self._post(create, sdk_kwargs(payload, request), "chat.completions.create")
        return openai_chat.decode(body, names)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Send ``request`` streamed (usage included); yield deltas, then `StreamEnd`."""
        payload = openai_chat.encode(request.messages, request.tools, options_for(request))
        kwargs = sdk_kwargs(payload, request)
        kwargs.update(stream=True, stream_options={"include_usage": True})
        decoder = openai_chat.StreamDecoder(tool_names_for(request.messages, request.tools))
        create = self._sdk.chat.completions.with_streaming_response.create
        async for event in self._events(create, kwargs, decoder, "chat.completions.stream"):
            yield event


class OpenAIResponsesClient(_OpenAIClient):
    """A `ModelClient` on the Responses API (``client.responses``), streaming included."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` and decode the whole answer."""
        payload = openai_responses.encode(request.messages, request.tools, options_for(request))
        names = tool_names_for(request.messages, request.tools)
        create = self._sdk.responses.with_raw_response.create
        body = await self._post(create, sdk_kwargs(payload, request), "responses.create")
        return openai_responses.decode(body, names)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Send ``request`` with ``stream=true`` and yield deltas, then `StreamEnd`."""
        payload = openai_responses.encode(request.messages, request.tools, options_for(request))
        kwargs = sdk_kwargs(payload, request)
        kwargs["stream"] = True
        decoder = openai_responses.StreamDecoder(tool_names_for(request.messages, request.tools))
        create = self._sdk.responses.with_streaming_response.create
        async for event in self._events(create, kwargs, decoder, "responses.stream"):
            yield event
