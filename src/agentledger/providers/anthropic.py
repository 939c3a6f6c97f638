"""Anthropic Messages API: transcript <-> request payload, response and stream decoding, client.

Encoding ([T7]): parts are encoded one content block each, in order. System
messages become the ``system`` parameter. A `CacheCheckpointPart` puts
``cache_control`` on the block just before it (a checkpoint that starts a
message marks the end of the previous one; a run of checkpoints is one
boundary); Anthropic allows at most 4 breakpoints per request, so a 5th is a
`TranscriptError`. Thinking blocks cannot carry a breakpoint, so a checkpoint
right after one is refused too.

What Anthropic cannot carry is refused with a `TranscriptError` naming the part:
empty text, images or documents in assistant messages, document bytes other
than PDF, citations not in Anthropic's shape, reasoning another provider
produced (see ``drop_foreign_reasoning`` in `agentledger.providers._options`).

Decoding: each content block becomes one part, so part ``i`` is block ``i``.
A text block with citations becomes a `CitationsPart` whose citations keep the
Anthropic citation object (minus ``cited_text``, which becomes
``source_content``) as ``location``; thinking becomes a `ThinkingPart` with its
signature; ``redacted_thinking`` data is kept as its UTF-8 bytes in
``ThinkingPart.redacted``. Messages with reasoning get
``meta={"anthropic": {"reasoning": [part indexes]}}`` so it is replayed only here.

Stop reasons: ``end_turn``, ``tool_use``, ``max_tokens``, ``stop_sequence`` keep
their names, ``refusal`` -> ``content_filter``, ``model_context_window_exceeded``
-> ``max_tokens``, anything else (``pause_turn``) -> ``other``.

Extra option: ``thinking_mode``: ``"enabled"`` (default, sends ``budget_tokens``)
or ``"adaptive"``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Self, assert_never, cast

from agentledger.errors import TranscriptError, ValidationError
from agentledger.providers._errors import (
    bad_response,
    by_status,
    connection_lost,
    missing_sdk,
    transport_errors,
    truncated,
)
from agentledger.providers._json import b64encode, loads
from agentledger.providers._names import ToolNames
from agentledger.providers._options import (
    EncodeOptions,
    merge_extra,
    options_for,
    parse_options,
    sdk_kwargs,
)
from agentledger.providers._sse import read_events
from agentledger.providers._transcript import (
    IMAGE_MIME,
    assistant_message,
    check_sendable,
    drain_stream,
    foreign_reasoning,
    kind,
    own_reasoning,
    refuse,
    result_text,
    tool_names_for,
)
from agentledger.providers.model import (
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    StopReason,
    StreamEnd,
    TextDelta,
    ThinkingDelta,
    ToolDefinition,
    ToolInputDelta,
    ToolUseStart,
    Usage,
)
from agentledger.transcript import (
    CacheCheckpointPart,
    Citation,
    CitationsPart,
    DocumentPart,
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
)

__all__ = [
    "MAX_CACHE_BREAKPOINTS",
    "PROVIDER",
    "AnthropicClient",
    "StreamDecoder",
    "decode",
    "decode_stream",
    "encode",
]

PROVIDER = "anthropic"
MAX_CACHE_BREAKPOINTS = 4
"""Anthropic's limit of ``cache_control`` breakpoints in one request."""

CITATION_TYPES = frozenset(
    (
        "char_location",
        "page_location",
        "content_block_location",
        "web_search_result_location",
        "search_result_location",
    )
)
_STOP: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "content_filter",
    "model_context_window_exceeded": "max_tokens",
}
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
_THINKING_BLOCKS = ("thinking", "redacted_thinking")


class _Encoder:
    """One encoding pass: the blocks so far, the last block, the breakpoints used."""

    def __init__(self, options: EncodeOptions, names: ToolNames) -> None:
        self.options = options
        self.names = names
        self.system: list[dict[str, Any]] = []
        self.messages: list[dict[str, Any]] = []
        self.last: dict[str, Any] | None = None
        self.breakpoints = 0

    def checkpoint(self, index: int, part_index: int) -> None:
        """Put ``cache_control`` on the block before ``messages[index].parts[part_index]``."""
        drop = self.options.drop_cache_checkpoints
        last = self.last
        if last is not None and "cache_control" in last:
            return  # a run of checkpoints marks one boundary
        problem = ""
        if last is None:
            problem = "a cache checkpoint needs content before it"
        elif last["type"] in _THINKING_BLOCKS:
            problem = "a cache breakpoint cannot be put on a thinking block"
        elif self.breakpoints == MAX_CACHE_BREAKPOINTS:
            problem = f"at most {MAX_CACHE_BREAKPOINTS} cache breakpoints per request"
        if problem:
            if drop:
                return
            raise refuse(
                PROVIDER,
                index,
                part_index,
                f"parts[{part_index}]",
                "a cache checkpoint Anthropic can carry",
                "cache_checkpoint",
                problem + "; set options['drop_cache_checkpoints'] to leave it out",
            )
        assert last is not None
        self.breakpoints += 1
        last["cache_control"] = {"type": "ephemeral"}

    def add(self, target: list[dict[str, Any]], block: dict[str, Any] | None) -> None:
        if block is not None:
            target.append(block)
            self.last = block

    def system_message(self, index: int, message: Message) -> None:
        for part_index, part in enumerate(message.parts):
            if isinstance(part, CacheCheckpointPart):
                self.checkpoint(index, part_index)
            elif isinstance(part, TextPart):
                self.add(self.system, self.text(index, part_index, part.text))
            else:  # the planner validator allows nothing else in system messages
                raise refuse(
                    PROVIDER,
                    index,
                    part_index,
                    f"parts[{part_index}]",
                    "text",
                    kind(part),
                    "system messages hold text only",
                )

    def message(self, index: int, message: Message) -> None:
        content: list[dict[str, Any]] = []
        self.messages.append({"role": message.role, "content": content})
        own = own_reasoning(message, PROVIDER)
        for part_index, part in enumerate(message.parts):
            if isinstance(part, CacheCheckpointPart):
                self.checkpoint(index, part_index)
            else:
                self.add(content, self.block(index, part_index, part, message, own))
        if not content:
            raise refuse(
                PROVIDER,
                index,
                None,
                "parts",
                "at least one content block",
                [],
                "nothing is left to send in this message",
            )

    def text(self, index: int, part_index: int, text: str) -> dict[str, Any]:
        if not text:
            raise refuse(
                PROVIDER,
                index,
                part_index,
                f"parts[{part_index}].text",
                "non-empty text",
                text,
                "Anthropic refuses empty text blocks",
            )
        return {"type": "text", "text": text}

    def block(
        self, index: int, part_index: int, part: Part, message: Message, own: Mapping[int, Any]
    ) -> dict[str, Any] | None:
        """The content block of one part, or None for reasoning left out on request."""
        where = f"parts[{part_index}]"
        if isinstance(part, ThinkingPart):
            if part_index not in own:
                foreign_reasoning(
                    PROVIDER, index, part_index, part, self.options.drop_foreign_reasoning
                )
                return None
            if part.redacted:
                try:
                    data = part.redacted.decode("utf-8")
                except UnicodeDecodeError:
                    raise refuse(
                        PROVIDER,
                        index,
                        part_index,
                        where + ".redacted",
                        "the UTF-8 bytes of Anthropic's redacted_thinking data",
                        part.redacted,
                        "redacted reasoning is not Anthropic's",
                    ) from None
                return {"type": "redacted_thinking", "data": data}
            if not part.signature:
                raise refuse(
                    PROVIDER,
                    index,
                    part_index,
                    where + ".signature",
                    "a non-empty signature",
                    part.signature,
                    "thinking blocks are replayed with their signature",
                )
            return {"type": "thinking", "thinking": part.text, "signature": part.signature}
        if isinstance(part, TextPart):
            return self.text(index, part_index, part.text)
        if isinstance(part, ImagePart):
            self.user_only(index, part_index, part, message)
            source: dict[str, Any]
            if part.data is not None:
                source = {
                    "type": "base64",
                    "media_type": IMAGE_MIME[part.format],
                    "data": b64encode(part.data),
                }
            else:
                source = {"type": "url", "url": part.url}
            return {"type": "image", "source": source}
        if isinstance(part, DocumentPart):
            self.user_only(index, part_index, part, message)
            return self.document(index, part_index, part)
        if isinstance(part, CitationsPart):
            block = self.text(index, part_index, part.text)
            if part.citations:
                block["citations"] = [
                    self.citation(index, part_index, number, citation)
                    for number, citation in enumerate(part.citations)
                ]
            return block
        if isinstance(part, ToolUsePart):
            if part.thought_signature:
                foreign_reasoning(
                    PROVIDER, index, part_index, part, self.options.drop_foreign_reasoning
                )
            return {
                "type": "tool_use",
                "id": part.id,
                "name": self.names.add(part.name),
                "input": part.input,
            }
        if isinstance(part, ToolResultPart):
            block = {
                "type": "tool_result",
                "tool_use_id": part.tool_use_id,
                "content": result_text(part),
            }
            if part.is_error:
                block["is_error"] = True
            return block
        if isinstance(part, CacheCheckpointPart):  # handled by the caller
            return None
        assert_never(part)

    def user_only(self, index: int, part_index: int, part: Part, message: Message) -> None:
        if message.role != "user":
            raise refuse(
                PROVIDER,
                index,
                part_index,
                f"parts[{part_index}]",
                "images and documents in user messages only",
                kind(part),
                f"an {message.role} message cannot carry a {kind(part)} part",
            )

    def document(self, index: int, part_index: int, part: DocumentPart) -> dict[str, Any]:
        where = f"parts[{part_index}]"
        source: dict[str, Any]
        if part.data is not None:
            if part.format != "pdf":
                raise refuse(
                    PROVIDER,
                    index,
                    part_index,
                    where + ".format",
                    "pdf for document bytes (send other formats as text)",
                    part.format,
                    "Anthropic takes document bytes only as PDF",
                )
            source = {
                "type": "base64",
                "media_type": "application/pdf",
                "data": b64encode(part.data),
            }
        elif part.text is not None:
            source = {"type": "text", "media_type": "text/plain", "data": part.text}
        elif part.chunks is not None:
            source = {
                "type": "content",
                "content": [{"type": "text", "text": c} for c in part.chunks],
            }
        else:
            if part.format not in ("", "pdf"):
                raise refuse(
                    PROVIDER,
                    index,
                    part_index,
                    where + ".format",
                    "pdf (or empty) for a document URI",
                    part.format,
                    "Anthropic fetches only PDF documents by URL",
                )
            source = {"type": "url", "url": part.uri}
        block: dict[str, Any] = {"type": "document", "source": source, "title": part.name}
        if part.context:
            block["context"] = part.context
        if part.cite:
            block["citations"] = {"enabled": True}
        return block

    def citation(
        self, index: int, part_index: int, number: int, citation: Citation
    ) -> dict[str, Any]:
        location = citation.location or {}
        if location.get("type") not in CITATION_TYPES or len(citation.source_content) != 1:
            raise refuse(
                PROVIDER,
                index,
                part_index,
                f"parts[{part_index}].citations[{number}]",
                "an Anthropic citation (location type one of "
                + ", ".join(sorted(CITATION_TYPES))
                + ", one source_content passage)",
                citation.location,
                "this citation was not made by Anthropic",
            )
        return {**location, "cited_text": citation.source_content[0]}


def _check_thinking_turn(items: Sequence[Message], encoded: _Encoder) -> None:
    """With thinking on, the assistant turn answered by the last message must start with thinking.

    Anthropic rejects a tool-result turn whose assistant message lost its reasoning.
    """
    if not items or items[-1].role != "user":
        return
    if not any(isinstance(p, ToolResultPart) for p in items[-1].parts):
        return
    start = len(items) - 1
    while start > 0 and items[start - 1].role == "assistant":
        start -= 1
    if start == len(items) - 1:
        return
    blocks = encoded.messages[start - _offset(items)]["content"]
    if blocks[0]["type"] not in _THINKING_BLOCKS:
        ids = [p.id for m in items[start:-1] for p in m.parts if isinstance(p, ToolUsePart)]
        raise TranscriptError(
            field="parts[0]",
            expected="a thinking part first (Anthropic, thinking enabled)",
            got=blocks[0]["type"],
            message=(
                f"{PROVIDER}: with thinking enabled, the assistant message whose tool uses "
                "the last message answers must start with its thinking"
            ),
            message_index=start,
            part_index=0,
            tool_use_ids=ids,
        )


def _offset(items: Sequence[Message]) -> int:
    """How many leading system messages there are (they are not in ``messages``)."""
    count = 0
    while count < len(items) and items[count].role == "system":
        count += 1
    return count


def encode(
    messages: Iterable[Message],
    tools: Sequence[ToolDefinition] = (),
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Messages API request body for ``messages`` (see the module docstring).

    Raises:
        TranscriptError: the transcript is invalid or holds a part Anthropic cannot carry.
        ValidationError: an option is wrong, or two tool names collide on the wire.
    """
    opts = parse_options(options, ("thinking_mode",))
    items = check_sendable(messages)
    names = tool_names_for(items, tools)
    encoder = _Encoder(opts, names)
    for index, message in enumerate(items):
        if message.role == "system":
            encoder.system_message(index, message)
        else:
            encoder.message(index, message)
    if opts.thinking is not None:
        _check_thinking_turn(items, encoder)
    payload: dict[str, Any] = {"model": opts.model, "max_tokens": opts.max_tokens}
    if encoder.system:
        payload["system"] = encoder.system
    payload["messages"] = encoder.messages
    if opts.temperature is not None:
        payload["temperature"] = opts.temperature
    mode = opts.provider.get("thinking_mode", "enabled")
    if mode not in ("enabled", "adaptive"):
        raise ValidationError(
            field="options.thinking_mode", expected="enabled or adaptive", got=mode
        )
    if opts.thinking is not None:
        payload["thinking"] = (
            {"type": "adaptive"}
            if mode == "adaptive"
            else {"type": "enabled", "budget_tokens": opts.thinking.budget_tokens}
        )
    if tools:
        payload["tools"] = [_tool(tool, names) for tool in tools]
        payload["tool_choice"] = {"type": opts.tool_choice}
    elif opts.tool_choice == "any":
        raise ValidationError(
            field="options.tool_choice", expected="auto or none when no tools are given", got="any"
        )
    return merge_extra(payload, opts.extra)


def _tool(tool: ToolDefinition, names: ToolNames) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": names.add(tool.name), "input_schema": tool.input_schema}
    if tool.description:
        spec["description"] = tool.description
    return spec


def _bad_response(field: str, expected: str, got: object) -> TranscriptError:
    return bad_response(PROVIDER, field, expected, got)


def _citation(raw: Mapping[str, Any]) -> Citation:
    title = raw.get("document_title") or raw.get("title") or ""
    return Citation(
        title=title,
        source=raw.get("url") or title,
        location={key: value for key, value in raw.items() if key != "cited_text"},
        source_content=(raw["cited_text"],) if isinstance(raw.get("cited_text"), str) else (),
    )


def _part(index: int, block: Mapping[str, Any], names: ToolNames) -> Part:
    kind_ = block.get("type")
    if kind_ == "text":
        citations = block.get("citations")
        if citations:
            return CitationsPart(
                text=block["text"], citations=tuple(_citation(c) for c in citations)
            )
        return TextPart(text=block["text"])
    if kind_ == "thinking":
        return ThinkingPart(
            text=block.get("thinking", ""),
            signature=block.get("signature") or "",
            index=index,
            final=True,
        )
    if kind_ == "redacted_thinking":
        return ThinkingPart(redacted=block["data"].encode("utf-8"), index=index, final=True)
    if kind_ == "tool_use":
        tool_input = block.get("input")
        if not isinstance(tool_input, dict):
            raise _bad_response(f"content[{index}].input", "a JSON object", tool_input)
        return ToolUsePart(id=block["id"], name=names.canonical(block["name"]), input=tool_input)
    raise _bad_response(
        f"content[{index}].type", "text, thinking, redacted_thinking or tool_use", kind_
    )


def decode(response: Mapping[str, Any], tool_names: ToolNames | None = None) -> ModelResponse:
    """The `ModelResponse` for a Messages API response body (parsed with exact numbers).

    Raises:
        TranscriptError: the response holds a block we cannot represent.
    """
    names = tool_names or ToolNames()
    content = response.get("content")
    if not isinstance(content, list):
        raise _bad_response("content", "a list of content blocks", content)
    parts = [_part(index, block, names) for index, block in enumerate(content)]
    usage = response.get("usage") or {}
    return ModelResponse(
        message=assistant_message(PROVIDER, parts),
        stop_reason=_STOP.get(response.get("stop_reason") or "", "other"),
        usage=Usage(
            input_tokens=usage.get("input_tokens") or 0,
            output_tokens=usage.get("output_tokens") or 0,
            cache_read_tokens=usage.get("cache_read_input_tokens") or 0,
            cache_write_tokens=usage.get("cache_creation_input_tokens") or 0,
        ),
        model=response.get("model") or "",
    )


class StreamDecoder:
    """Folds Messages API stream events into `ModelStreamEvent`\\ s.

    Feed it each event's parsed data; the ``message_stop`` event returns the
    final `StreamEnd`, whose response equals `decode` of the same message.
    """

    def __init__(self, tool_names: ToolNames | None = None) -> None:
        self._names = tool_names or ToolNames()
        self._message: dict[str, Any] | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._done = False

    def feed(self, event: Mapping[str, Any]) -> list[ModelStreamEvent]:
        """The events one provider event yields (often none).

        Raises:
            TransientError: an ``error`` event that may pass (overloaded, rate limit, 5xx).
            ProviderError: any other ``error`` event.
            TranscriptError: the stream is malformed.
        """
        kind_ = event.get("type")
        if kind_ == "message_start":
            self._message = dict(event["message"])
            self._message["usage"] = dict(self._message.get("usage") or {})
            return []
        if kind_ == "content_block_start":
            index = event["index"]
            block = dict(event["content_block"])
            self._blocks[index] = block
            if block.get("type") == "tool_use":
                self._json[index] = []
                name = self._names.canonical(block["name"])
                return [ToolUseStart(index=index, id=block["id"], name=name)]
            if block.get("type") == "text" and block.get("text"):
                return [TextDelta(index=index, text=block["text"])]
            return []
        if kind_ == "content_block_delta":
            return self._delta(event["index"], event["delta"])
        if kind_ == "content_block_stop":
            index = event["index"]
            if index in self._json:
                text = "".join(self._json.pop(index))
                block = self._blocks[index]
                try:
                    block["input"] = loads(text) if text else (block.get("input") or {})
                except ValueError:
                    raise _bad_response(f"content[{index}].input", "JSON", text) from None
            return []
        if kind_ == "message_delta":
            message = self._started()
            message.update(event.get("delta") or {})
            message["usage"].update(event.get("usage") or {})
            return []
        if kind_ == "message_stop":
            message = self._started()
            message["content"] = [self._blocks[i] for i in sorted(self._blocks)]
            self._done = True
            return [StreamEnd(response=decode(message, self._names))]
        if kind_ == "error":
            error = event.get("error") or {}
            status = _ERROR_STATUS.get(error.get("type", ""), 500)
            raise by_status(PROVIDER, "messages.stream", status, str(error.get("message", error)))
        return []  # ping, and event types added later

    def _started(self) -> dict[str, Any]:
        if self._message is None:
            raise _bad_response("stream", "message_start first", "another event")
        return self._message

    def _delta(self, index: int, delta: Mapping[str, Any]) -> list[ModelStreamEvent]:
        block = self._blocks.get(index)
        if block is None:
            raise _bad_response(f"content[{index}]", "content_block_start first", dict(delta))
        kind_ = delta.get("type")
        if kind_ == "text_delta":
            block["text"] = block.get("text", "") + delta["text"]
            return [TextDelta(index=index, text=delta["text"])]
        if kind_ == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
            return [ThinkingDelta(index=index, text=delta["thinking"])]
        if kind_ == "signature_delta":
            block["signature"] = (block.get("signature") or "") + delta["signature"]
            return []
        if kind_ == "input_json_delta":
            self._json[index].append(delta["partial_json"])
            return [ToolInputDelta(index=index, partial_json=delta["partial_json"])]
        if kind_ == "citations_delta":
            block["citations"] = [*(block.get("citations") or []), delta["citation"]]
            return []
        raise _bad_response(f"content[{index}].delta.type", "a known delta", kind_)

    def end(self) -> list[ModelStreamEvent]:
        """Call when the stream closes: nothing more, or an error if it stopped early.

        Raises:
            TransientError: ``message_stop`` never came.
        """
        if not self._done:
            raise truncated(PROVIDER, "messages.stream", "no message_stop event")
        return []


def decode_stream(
    events: Iterable[Mapping[str, Any]], tool_names: ToolNames | None = None
) -> list[ModelStreamEvent]:
    """All events a whole recorded stream yields, ending with `StreamEnd`."""
    return drain_stream(StreamDecoder(tool_names), events)


_COUNTED = frozenset({"model", "messages", "system", "tools", "tool_choice", "thinking"})
"""The request fields Anthropic's token count takes."""


class AnthropicClient:
    """A `ModelClient` on the official ``anthropic`` SDK (async), streaming included.

    Retries belong to the runtime, so the SDK's own are off by default
    (``max_retries=0``). Errors are mapped once: 408/429/5xx/529, timeouts and
    dropped connections -> `TransientError`; other statuses -> `ProviderError`.
    """

    provider = PROVIDER

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 0,
        timeout: float = 600.0,
        client: Any = None,
    ) -> None:
        """Build the SDK client (``ANTHROPIC_API_KEY`` is read when ``api_key`` is None).

        Raises:
            ImportError: the ``anthropic`` package is not installed.
        """
        try:
            import anthropic
        except ImportError as error:
            raise missing_sdk("anthropic", "anthropic") from error
        self._sdk_module: Any = anthropic
        self._sdk: Any = client or anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout
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

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` and decode the whole answer."""
        payload = encode(request.messages, request.tools, options_for(request))
        names = tool_names_for(request.messages, request.tools)
        create = cast(Callable[..., Awaitable[Any]], self._sdk.messages.with_raw_response.create)
        try:
            raw = await create(**sdk_kwargs(payload, request))
            body = await raw.http_response.aread()
        except Exception as error:
            mapped = self._map(error, "messages.create")
            if mapped is None:
                raise
            raise mapped from error
        return decode(loads(body), names)

    async def count_tokens(self, request: ModelRequest) -> int:
        """The input tokens of ``request`` by Anthropic's own count (``count_tokens``):
        what a history policy counts with by default when this client serves the agent."""
        payload = encode(request.messages, request.tools, options_for(request))
        kwargs = {k: v for k, v in sdk_kwargs(payload, request).items() if k in _COUNTED}
        count = cast(Callable[..., Awaitable[Any]], self._sdk.messages.count_tokens)
        try:
            answer = await count(**kwargs)
        except Exception as error:
            mapped = self._map(error, "messages.count_tokens")
            if mapped is None:
                raise
            raise mapped from error
        return int(answer.input_tokens)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Send ``request`` with ``stream=true`` and yield deltas, then `StreamEnd`."""
        payload = encode(request.messages, request.tools, options_for(request))
        decoder = StreamDecoder(tool_names_for(request.messages, request.tools))
        create = self._sdk.messages.with_streaming_response.create
        try:
            async with create(**sdk_kwargs(payload, request), stream=True) as response:
                async for sse in read_events(response.iter_lines()):
                    for event in decoder.feed(loads(sse.data)):
                        yield event
            for event in decoder.end():
                yield event
        except Exception as error:
            mapped = self._map(error, "messages.stream")
            if mapped is None:
                raise
            raise mapped from error
