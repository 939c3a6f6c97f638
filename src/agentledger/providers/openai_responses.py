"""OpenAI Responses API: transcript <-> request payload, response and stream decoding.

The transcript is sent whole as ``input`` items with ``store: false``: the
transcript, not OpenAI's server state, is the record. Encoding ([T7]), part by
part in order:

* system messages -> ``message`` items with role ``system`` (or
  ``developer``) and ``input_text`` content;
* a user message's `ToolResultPart`\\ s -> one ``function_call_output`` item
  each, in order (error results as ``{"is_error":true,"content":...}`` text,
  the API having no error flag), then the rest -> one user ``message`` item
  (``input_text``, ``input_image``, ``input_file``);
* an assistant message -> its items in order: a `ThinkingPart` -> the
  ``reasoning`` item it was decoded from, replayed verbatim; consecutive text
  and citations parts -> one assistant ``message`` item of ``output_text``
  parts; each tool use -> a ``function_call`` item;
* a `CacheCheckpointPart` -> ``prompt_cache_breakpoint: {"mode": "explicit"}``
  on the input content part before it (or on a ``function_call_output``, whose
  output then becomes an ``input_text`` list). Output items (assistant text,
  reasoning, function calls) cannot take one: a checkpoint right after them is
  a `TranscriptError` (option ``drop_cache_checkpoints``).

Reasoning provenance: decoding a ``reasoning`` item gives a `ThinkingPart`
(text = the summary texts joined by blank lines, or the reasoning text when
there is no summary; signature = ``encrypted_content``, or the item id when
there is none) and records the item verbatim in
``meta={"openai": {"reasoning": [{"part_index": i, "item": {...}}]}}``. Only
such parts are replayed, and only if the part still matches its item; any
other `ThinkingPart` is foreign (option ``drop_foreign_reasoning``).

Refused as well: citations whose locations are not OpenAI annotations,
images or documents in assistant messages, document text or chunks, documents
with ``context`` or ``cite``, document bytes of unknown format.

Decoding: ``output_text`` -> `TextPart`, or `CitationsPart` when it has
annotations (each annotation kept whole as the citation ``location``);
``refusal`` -> `TextPart` (stop reason ``content_filter``); ``function_call``
-> `ToolUsePart` keyed by ``call_id``. Stop reasons: ``completed`` ->
``tool_use`` when there are function calls, else ``end_turn``; ``incomplete``
-> ``max_tokens`` / ``content_filter`` by its reason, else ``other``; a
``failed`` response raises (`TransientError` for server errors and rate limits,
else `ProviderError`).

Extra options: ``system_role``, ``reasoning_effort`` (as for Chat), and
``reasoning_summary`` (default ``"auto"``); with ``thinking`` set, the request
asks for ``reasoning.encrypted_content`` so reasoning can be replayed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, assert_never

from agentledger.errors import ValidationError
from agentledger.providers._errors import bad_response, by_status, truncated
from agentledger.providers._json import dumps
from agentledger.providers._names import ToolNames
from agentledger.providers._options import EncodeOptions, merge_extra, parse_options
from agentledger.providers._transcript import (
    DOCUMENT_MIME,
    IMAGE_MIME,
    check_sendable,
    drain_stream,
    foreign_reasoning,
    kind,
    own_reasoning,
    refuse,
    tool_names_for,
)
from agentledger.providers.model import (
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
from agentledger.providers.openai_chat import (
    data_url,
    error_result,
    parse_arguments,
    reasoning_effort,
    system_role,
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

__all__ = ["ANNOTATION_TYPES", "PROVIDER", "StreamDecoder", "decode", "decode_stream", "encode"]

PROVIDER = "openai"
_LABEL = "openai responses"
_BREAKPOINT = {"mode": "explicit"}
ANNOTATION_TYPES = frozenset(
    ("url_citation", "file_citation", "container_file_citation", "file_path")
)
_FAILED_STATUS = {"rate_limit_exceeded": 429, "server_error": 500, "vector_store_timeout": 500}


class _Encoder:
    """One encoding pass: the input items so far and where a breakpoint could go."""

    def __init__(self, options: EncodeOptions, names: ToolNames) -> None:
        self.options = options
        self.names = names
        self.items: list[dict[str, Any]] = []
        self.last: dict[str, Any] | None = None  # an input content part or function_call_output
        self.last_output = ""  # kind of output item written last, if it came after ``last``

    def emit(self, item: dict[str, Any]) -> None:
        self.items.append(item)

    def mark(self, part: dict[str, Any]) -> None:
        self.last, self.last_output = part, ""

    def checkpoint(self, index: int, part_index: int) -> None:
        last = self.last
        if last is not None and not self.last_output:
            if last.get("type") == "function_call_output":
                if isinstance(last["output"], str):
                    last["output"] = [{"type": "input_text", "text": last["output"]}]
                last["output"][-1]["prompt_cache_breakpoint"] = dict(_BREAKPOINT)
            else:
                last["prompt_cache_breakpoint"] = dict(_BREAKPOINT)
            return
        if self.options.drop_cache_checkpoints:
            return
        why = "a cache checkpoint needs content before it"
        if self.last_output:
            why = f"no cache breakpoint can follow an output item ({self.last_output})"
        raise refuse(
            _LABEL,
            index,
            part_index,
            f"parts[{part_index}]",
            "a cache checkpoint after input content",
            "cache_checkpoint",
            why + "; set options['drop_cache_checkpoints'] to leave it out",
        )

    def system_message(self, index: int, message: Message) -> None:
        content: list[dict[str, Any]] = []
        self.emit({"type": "message", "role": system_role(self.options), "content": content})
        for part_index, part in enumerate(message.parts):
            if isinstance(part, CacheCheckpointPart):
                self.checkpoint(index, part_index)
            elif isinstance(part, TextPart):
                block = {"type": "input_text", "text": part.text}
                content.append(block)
                self.mark(block)
            else:
                raise refuse(
                    _LABEL,
                    index,
                    part_index,
                    f"parts[{part_index}]",
                    "text",
                    kind(part),
                    "system messages hold text only",
                )

    def user_message(self, index: int, message: Message) -> None:
        content: list[dict[str, Any]] | None = None
        for part_index, part in enumerate(message.parts):
            if isinstance(part, CacheCheckpointPart):
                self.checkpoint(index, part_index)
            elif isinstance(part, ToolResultPart):
                item = {
                    "type": "function_call_output",
                    "call_id": part.tool_use_id,
                    "output": error_result(part),
                }
                self.emit(item)
                self.mark(item)
            else:
                if content is None:
                    content = []
                    self.emit({"type": "message", "role": "user", "content": content})
                block = self.user_part(index, part_index, part)
                content.append(block)
                self.mark(block)

    def user_part(self, index: int, part_index: int, part: Part) -> dict[str, Any]:
        where = f"parts[{part_index}]"
        if isinstance(part, TextPart):
            return {"type": "input_text", "text": part.text}
        if isinstance(part, ImagePart):
            url = part.url if part.data is None else data_url(IMAGE_MIME[part.format], part.data)
            return {"type": "input_image", "image_url": url, "detail": "auto"}
        if isinstance(part, DocumentPart):
            problem = ""
            if part.data is None and part.uri is None:
                problem = "the Responses API takes documents only as bytes or a URL"
            elif part.data is not None and part.format not in DOCUMENT_MIME:
                problem = "the document format is unknown, so its MIME type is too"
            elif part.context:
                problem = "the Responses API has no place for document context"
            elif part.cite:
                problem = "the Responses API cannot cite input documents"
            if problem:
                raise refuse(
                    _LABEL,
                    index,
                    part_index,
                    where,
                    "document bytes of a known format or a URL, without context or cite",
                    "document",
                    problem,
                )
            block: dict[str, Any] = {"type": "input_file", "filename": part.name}
            if part.data is not None:
                block["file_data"] = data_url(DOCUMENT_MIME[part.format], part.data)
            else:
                block["file_url"] = part.uri
            return block
        if isinstance(
            part, ThinkingPart | CitationsPart | ToolUsePart | ToolResultPart | CacheCheckpointPart
        ):  # the planner validator keeps these out of user messages
            raise refuse(
                _LABEL, index, part_index, where, "user content", kind(part), "not user content"
            )
        assert_never(part)

    def assistant_message(self, index: int, message: Message) -> None:
        own = own_reasoning(message, PROVIDER)
        text_item: dict[str, Any] | None = None
        for part_index, part in enumerate(message.parts):
            where = f"parts[{part_index}]"
            if isinstance(part, CacheCheckpointPart):
                self.checkpoint(index, part_index)
                continue
            if isinstance(part, TextPart | CitationsPart):
                if text_item is None:
                    text_item = {"type": "message", "role": "assistant", "content": []}
                    self.emit(text_item)
                text_item["content"].append(self.output_text(index, part_index, part))
                self.last_output = "assistant message"
                continue
            text_item = None
            if isinstance(part, ThinkingPart):
                item = self.reasoning(index, part_index, part, own.get(part_index))
                if item is not None:
                    self.emit(item)
                    self.last_output = "reasoning"
            elif isinstance(part, ToolUsePart):
                if part.thought_signature:
                    foreign_reasoning(
                        _LABEL, index, part_index, part, self.options.drop_foreign_reasoning
                    )
                self.emit(
                    {
                        "type": "function_call",
                        "call_id": part.id,
                        "name": self.names.add(part.name),
                        "arguments": dumps(part.input),
                    }
                )
                self.last_output = "function_call"
            elif isinstance(part, ImagePart | DocumentPart | ToolResultPart):
                raise refuse(
                    _LABEL,
                    index,
                    part_index,
                    where,
                    "text, reasoning or tool calls in an assistant message",
                    kind(part),
                    f"an assistant message cannot carry a {kind(part)} part",
                )
            else:
                assert_never(part)

    def reasoning(
        self, index: int, part_index: int, part: ThinkingPart, entry: Any
    ) -> dict[str, Any] | None:
        item = entry.get("item") if isinstance(entry, dict) else None
        if not isinstance(item, dict) or item.get("type") != "reasoning":
            foreign_reasoning(_LABEL, index, part_index, part, self.options.drop_foreign_reasoning)
            return None
        if part.signature != (item.get("encrypted_content") or item.get("id")):
            raise refuse(
                _LABEL,
                index,
                part_index,
                f"parts[{part_index}].signature",
                "the encrypted_content (or id) of the reasoning item in Message.meta",
                part.signature,
                "the reasoning part no longer matches the reasoning item it came from",
            )
        return dict(item)

    def output_text(
        self, index: int, part_index: int, part: TextPart | CitationsPart
    ) -> dict[str, Any]:
        annotations: list[Any] = []
        if isinstance(part, CitationsPart):
            for number, citation in enumerate(part.citations):
                location = citation.location or {}
                if location.get("type") not in ANNOTATION_TYPES:
                    raise refuse(
                        _LABEL,
                        index,
                        part_index,
                        f"parts[{part_index}].citations[{number}].location",
                        "an OpenAI annotation (type one of "
                        + ", ".join(sorted(ANNOTATION_TYPES))
                        + ")",
                        citation.location,
                        "this citation was not made by OpenAI",
                    )
                annotations.append(location)
        return {"type": "output_text", "text": part.text, "annotations": annotations}


def encode(
    messages: Iterable[Message],
    tools: Sequence[ToolDefinition] = (),
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Responses API request body for ``messages`` (see the module docstring).

    Raises:
        TranscriptError: the transcript is invalid or holds a part the API cannot carry.
        ValidationError: an option is wrong, or two tool names collide on the wire.
    """
    opts = parse_options(options, ("system_role", "reasoning_effort", "reasoning_summary"))
    items = check_sendable(messages)
    names = tool_names_for(items, tools)
    encoder = _Encoder(opts, names)
    for index, message in enumerate(items):
        if message.role == "system":
            encoder.system_message(index, message)
        elif message.role == "user":
            encoder.user_message(index, message)
        else:
            encoder.assistant_message(index, message)
    payload: dict[str, Any] = {
        "model": opts.model,
        "input": encoder.items,
        "max_output_tokens": opts.max_tokens,
        "store": False,
    }
    if opts.temperature is not None:
        payload["temperature"] = opts.temperature
    effort = reasoning_effort(opts)
    if effort is not None:
        summary = opts.provider.get("reasoning_summary", "auto")
        if not isinstance(summary, str):
            raise ValidationError(field="options.reasoning_summary", expected="a str", got=summary)
        payload["reasoning"] = {"effort": effort, "summary": summary}
    if opts.thinking is not None:
        payload["include"] = ["reasoning.encrypted_content"]
    if tools:
        payload["tools"] = [_tool(tool, names) for tool in tools]
        payload["tool_choice"] = "required" if opts.tool_choice == "any" else opts.tool_choice
    return merge_extra(payload, opts.extra)


def _tool(tool: ToolDefinition, names: ToolNames) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "function", "name": names.add(tool.name)}
    if tool.description:
        spec["description"] = tool.description
    spec["parameters"] = tool.input_schema
    spec["strict"] = False
    return spec


def _thinking(output_index: int, item: Mapping[str, Any]) -> ThinkingPart:
    summary = [s.get("text", "") for s in item.get("summary") or ()]
    content = [c.get("text", "") for c in item.get("content") or ()]
    return ThinkingPart(
        text="\n\n".join(summary) if summary else "\n\n".join(content),
        signature=item.get("encrypted_content") or item.get("id") or "",
        index=output_index,
        final=True,
    )


def _citation(annotation: Mapping[str, Any]) -> Citation:
    return Citation(
        title=annotation.get("title") or annotation.get("filename") or "",
        source=annotation.get("url") or annotation.get("file_id") or "",
        location=dict(annotation),
    )


def _raise_failed(response: Mapping[str, Any]) -> None:
    error = response.get("error") or {}
    status = _FAILED_STATUS.get(str(error.get("code", "")), 400)
    raise by_status(PROVIDER, "responses.create", status, dumps(error))


def decode(response: Mapping[str, Any], tool_names: ToolNames | None = None) -> ModelResponse:
    """The `ModelResponse` for a Responses API response object (parsed with exact numbers).

    Raises:
        TranscriptError: an output item we cannot represent.
        TransientError / ProviderError: the response ``failed``.
    """
    names = tool_names or ToolNames()
    status = response.get("status")
    if status == "failed":
        _raise_failed(response)
    output = response.get("output")
    if not isinstance(output, list):
        raise bad_response(PROVIDER, "output", "a list of output items", output)
    parts: list[Part] = []
    reasoning: list[dict[str, Any]] = []
    refused = calls = False
    for number, item in enumerate(output):
        where = f"output[{number}]"
        kind_ = item.get("type")
        if kind_ == "reasoning":
            reasoning.append({"part_index": len(parts), "item": dict(item)})
            parts.append(_thinking(number, item))
        elif kind_ == "message":
            for position, content in enumerate(item.get("content") or ()):
                if content.get("type") == "output_text":
                    annotations = content.get("annotations") or ()
                    if annotations:
                        citations = tuple(_citation(a) for a in annotations)
                        parts.append(CitationsPart(text=content["text"], citations=citations))
                    else:
                        parts.append(TextPart(text=content["text"]))
                elif content.get("type") == "refusal":
                    refused = True
                    parts.append(TextPart(text=content["refusal"]))
                else:
                    raise bad_response(
                        PROVIDER,
                        f"{where}.content[{position}].type",
                        "output_text or refusal",
                        content.get("type"),
                    )
        elif kind_ == "function_call":
            calls = True
            arguments = parse_arguments(PROVIDER, where + ".arguments", item.get("arguments"))
            parts.append(
                ToolUsePart(id=item["call_id"], name=names.canonical(item["name"]), input=arguments)
            )
        else:
            raise bad_response(
                PROVIDER, where + ".type", "reasoning, message or function_call", kind_
            )
    stop: StopReason = "end_turn"
    if status == "incomplete":
        reason = (response.get("incomplete_details") or {}).get("reason")
        stop = {"max_output_tokens": "max_tokens", "content_filter": "content_filter"}.get(
            reason or "", "other"
        )  # type: ignore[assignment]
    elif refused:
        stop = "content_filter"
    elif calls:
        stop = "tool_use"
    elif status not in ("completed", None):
        stop = "other"
    usage = response.get("usage") or {}
    details = usage.get("input_tokens_details") or {}
    return ModelResponse(
        message=Message(
            role="assistant",
            parts=tuple(parts),
            meta={PROVIDER: {"reasoning": reasoning}} if reasoning else None,
        ),
        stop_reason=stop,
        usage=Usage(
            input_tokens=usage.get("input_tokens") or 0,
            output_tokens=usage.get("output_tokens") or 0,
            cache_read_tokens=details.get("cached_tokens") or 0,
        ),
        model=response.get("model") or "",
    )


class StreamDecoder:
    """Folds Responses API stream events into `ModelStreamEvent`\\ s.

    The final ``response.completed`` (or ``response.incomplete``) returns the
    `StreamEnd`: the output items are those of the ``response.output_item.done``
    events, so the message equals `decode` of the same response.
    """

    def __init__(self, tool_names: ToolNames | None = None) -> None:
        self._names = tool_names or ToolNames()
        self._next = 0
        self._items: dict[int, int] = {}  # output index -> part index
        self._contents: dict[tuple[int, int], int] = {}  # (output, content) -> part index
        self._done_items: dict[int, dict[str, Any]] = {}
        self._done = False

    def _index_of_item(self, output_index: int) -> int:
        if output_index not in self._items:
            self._items[output_index] = self._next
            self._next += 1
        return self._items[output_index]

    def _index_of_content(self, output_index: int, content_index: int) -> int:
        key = (output_index, content_index)
        if key not in self._contents:
            self._contents[key] = self._next
            self._next += 1
        return self._contents[key]

    def feed(self, event: Mapping[str, Any]) -> list[ModelStreamEvent]:
        """The events one stream event yields.

        Raises:
            TransientError / ProviderError: an ``error`` or ``response.failed`` event.
        """
        kind_ = event.get("type", "")
        if kind_ == "response.output_item.added":
            item = event["item"]
            if item.get("type") == "reasoning":
                self._index_of_item(event["output_index"])
            elif item.get("type") == "function_call":
                index = self._index_of_item(event["output_index"])
                name = self._names.canonical(item.get("name", ""))
                return [ToolUseStart(index=index, id=item.get("call_id", ""), name=name)]
            return []
        if kind_ == "response.content_part.added":
            self._index_of_content(event["output_index"], event["content_index"])
            return []
        if kind_ in ("response.output_text.delta", "response.refusal.delta"):
            index = self._index_of_content(event["output_index"], event["content_index"])
            return [TextDelta(index=index, text=event["delta"])]
        if kind_ in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            index = self._index_of_item(event["output_index"])
            return [ThinkingDelta(index=index, text=event["delta"])]
        if kind_ == "response.function_call_arguments.delta":
            index = self._index_of_item(event["output_index"])
            return [ToolInputDelta(index=index, partial_json=event["delta"])]
        if kind_ == "response.output_item.done":
            self._done_items[event["output_index"]] = dict(event["item"])
            return []
        if kind_ in ("response.completed", "response.incomplete"):
            response = dict(event["response"])
            if self._done_items:
                response["output"] = [self._done_items[i] for i in sorted(self._done_items)]
            self._done = True
            return [StreamEnd(response=decode(response, self._names))]
        if kind_ == "response.failed":
            _raise_failed(event.get("response") or {})
        if kind_ == "error":
            status = _FAILED_STATUS.get(str(event.get("code", "")), 400)
            raise by_status(PROVIDER, "responses.stream", status, dumps(dict(event)))
        return []

    def end(self) -> list[ModelStreamEvent]:
        """Call when the stream closes.

        Raises:
            TransientError: ``response.completed`` never came.
        """
        if not self._done:
            raise truncated(PROVIDER, "responses.stream", "no response.completed event")
        return []


def decode_stream(
    events: Iterable[Mapping[str, Any]], tool_names: ToolNames | None = None
) -> list[ModelStreamEvent]:
    """All events a whole recorded stream yields, ending with `StreamEnd`."""
    return drain_stream(StreamDecoder(tool_names), events)
