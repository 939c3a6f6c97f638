"""OpenAI Chat Completions: transcript <-> request payload, response and stream decoding.

Encoding ([T7]), part by part in order:

* system messages -> ``system`` (or ``developer``, option ``system_role``)
  messages of text parts;
* a user message's `ToolResultPart`\\ s -> one ``tool`` message each, in order,
  then the rest of the message -> one ``user`` message (text, ``image_url``,
  ``file`` parts). Chat has no error flag for tool results, so an error result
  is sent as the JSON text ``{"is_error":true,"content":...}``;
* an assistant message -> one ``assistant`` message: its text parts as
  ``content``, its tool uses as ``tool_calls`` (the [T3] order: text, then
  calls). Consecutive assistant messages are sent as they are, except that a
  tool-calling one must be the last of its group, since Chat wants the ``tool``
  messages right after the call;
* a `CacheCheckpointPart` -> ``prompt_cache_breakpoint: {"mode": "explicit"}``
  on the content part (or tool message) before it; after a tool call there is
  no place for one, which is a `TranscriptError` (or option
  ``drop_cache_checkpoints``). OpenAI writes at most the last four per request
  and reads the rest, so no count limit is enforced here.

Refused (`TranscriptError`): reasoning of any provider (Chat cannot replay
reasoning; option ``drop_foreign_reasoning``), citations, images and
documents in assistant messages, documents that are not bytes, documents with
``context`` or ``cite``, and document bytes of unknown format.

Decoding: ``content`` -> `TextPart`, ``refusal`` -> `TextPart` (stop reason
``content_filter``), each tool call -> `ToolUsePart` (arguments parsed with
exact numbers). URL annotations, which Chat cannot take back, are kept in
``meta={"openai": {"annotations": [...]}}``. Stop reasons: ``stop`` ->
``end_turn``, ``tool_calls``/``function_call`` -> ``tool_use``, ``length`` ->
``max_tokens``, ``content_filter`` -> ``content_filter``, else ``other``.

Extra options: ``system_role`` (``"system"``/``"developer"``),
``reasoning_effort`` (sent as given; with ``thinking`` and no effort, the budget
picks one: < 2048 tokens ``low``, < 8192 ``medium``, else ``high``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, assert_never

from agentledger.errors import ValidationError
from agentledger.providers._errors import bad_response, by_status, truncated
from agentledger.providers._json import b64encode, dumps, loads
from agentledger.providers._names import ToolNames
from agentledger.providers._options import EncodeOptions, merge_extra, parse_options
from agentledger.providers._transcript import (
    DOCUMENT_MIME,
    IMAGE_MIME,
    check_sendable,
    drain_stream,
    foreign_reasoning,
    kind,
    refuse,
    result_text,
    tool_names_for,
)
from agentledger.providers.model import (
    ModelResponse,
    ModelStreamEvent,
    StopReason,
    StreamEnd,
    TextDelta,
    ToolDefinition,
    ToolInputDelta,
    ToolUseStart,
    Usage,
)
from agentledger.transcript import (
    CacheCheckpointPart,
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

__all__ = ["PROVIDER", "StreamDecoder", "decode", "decode_stream", "encode", "reasoning_effort"]

PROVIDER = "openai"
_LABEL = "openai chat completions"
_BREAKPOINT = {"mode": "explicit"}
_STOP: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filter",
}


def reasoning_effort(options: EncodeOptions) -> str | None:
    """The ``reasoning_effort`` to send: the option, or one derived from the thinking budget."""
    effort = options.provider.get("reasoning_effort")
    if effort is not None:
        if not isinstance(effort, str):
            raise ValidationError(field="options.reasoning_effort", expected="a str", got=effort)
        return effort
    if options.thinking is None:
        return None
    budget = options.thinking.budget_tokens
    return "low" if budget < 2048 else "medium" if budget < 8192 else "high"


def system_role(options: EncodeOptions) -> str:
    """The role system messages are sent with (``system`` unless the option says ``developer``)."""
    role = options.provider.get("system_role", "system")
    if role not in ("system", "developer"):
        raise ValidationError(field="options.system_role", expected="system or developer", got=role)
    return str(role)


def error_result(part: ToolResultPart) -> str:
    """The text of a tool result, error results wrapped so the model can tell them apart."""
    if part.is_error:
        return dumps({"is_error": True, "content": part.content})
    return result_text(part)


def data_url(mime: str, data: bytes) -> str:
    """A ``data:`` URL holding ``data``."""
    return f"data:{mime};base64,{b64encode(data)}"


class _Encoder:
    """One encoding pass: messages so far and where a cache breakpoint could go."""

    def __init__(self, options: EncodeOptions, names: ToolNames) -> None:
        self.options = options
        self.names = names
        self.messages: list[dict[str, Any]] = []
        # The element a breakpoint would mark: a content part, a tool message, or a
        # tool call (which cannot take one).
        self.last: dict[str, Any] | None = None
        self.last_is_call = False

    def emit_part(self, target: list[dict[str, Any]], part: dict[str, Any]) -> None:
        target.append(part)
        self.last, self.last_is_call = part, False

    def checkpoint(self, index: int, part_index: int) -> None:
        last = self.last
        if last is not None and not self.last_is_call:
            if last.get("role") == "tool":
                if isinstance(last["content"], str):
                    last["content"] = [{"type": "text", "text": last["content"]}]
                last["content"][-1]["prompt_cache_breakpoint"] = dict(_BREAKPOINT)
            else:
                last["prompt_cache_breakpoint"] = dict(_BREAKPOINT)
            return
        if self.options.drop_cache_checkpoints:
            return
        why = "a cache checkpoint needs content before it"
        if self.last_is_call:
            why = "Chat Completions cannot put a cache breakpoint right after a tool call"
        raise refuse(
            _LABEL,
            index,
            part_index,
            f"parts[{part_index}]",
            "a cache checkpoint after a content part",
            "cache_checkpoint",
            why + "; set options['drop_cache_checkpoints'] to leave it out",
        )

    def system_message(self, index: int, message: Message) -> None:
        content: list[dict[str, Any]] = []
        self.messages.append({"role": system_role(self.options), "content": content})
        for part_index, part in enumerate(message.parts):
            if isinstance(part, CacheCheckpointPart):
                self.checkpoint(index, part_index)
            elif isinstance(part, TextPart):
                self.emit_part(content, {"type": "text", "text": part.text})
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
                tool = {
                    "role": "tool",
                    "tool_call_id": part.tool_use_id,
                    "content": error_result(part),
                }
                self.messages.append(tool)
                self.last, self.last_is_call = tool, False
            else:
                if content is None:
                    content = []
                    self.messages.append({"role": "user", "content": content})
                self.emit_part(content, self.user_part(index, part_index, part))

    def user_part(self, index: int, part_index: int, part: Part) -> dict[str, Any]:
        where = f"parts[{part_index}]"
        if isinstance(part, TextPart):
            return {"type": "text", "text": part.text}
        if isinstance(part, ImagePart):
            url = part.url if part.data is None else data_url(IMAGE_MIME[part.format], part.data)
            return {"type": "image_url", "image_url": {"url": url}}
        if isinstance(part, DocumentPart):
            problem = ""
            if part.data is None:
                problem = "Chat Completions takes documents only as bytes"
            elif part.format not in DOCUMENT_MIME:
                problem = "the document format is unknown, so its MIME type is too"
            elif part.context:
                problem = "Chat Completions has no place for document context"
            elif part.cite:
                problem = "Chat Completions cannot cite documents"
            if problem:
                raise refuse(
                    _LABEL,
                    index,
                    part_index,
                    where,
                    "document bytes of a known format, without context or cite",
                    "document",
                    problem,
                )
            assert part.data is not None
            file = {
                "filename": part.name,
                "file_data": data_url(DOCUMENT_MIME[part.format], part.data),
            }
            return {"type": "file", "file": file}
        if isinstance(
            part, ThinkingPart | CitationsPart | ToolUsePart | ToolResultPart | CacheCheckpointPart
        ):  # the planner validator keeps these out of user messages
            raise refuse(
                _LABEL, index, part_index, where, "user content", kind(part), "not user content"
            )
        assert_never(part)

    def assistant_message(self, index: int, message: Message, last_of_group: bool) -> None:
        content: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        out: dict[str, Any] = {"role": "assistant"}
        self.messages.append(out)
        for part_index, part in enumerate(message.parts):
            where = f"parts[{part_index}]"
            if isinstance(part, CacheCheckpointPart):
                self.checkpoint(index, part_index)
            elif isinstance(part, ThinkingPart):
                foreign_reasoning(
                    _LABEL, index, part_index, part, self.options.drop_foreign_reasoning
                )
            elif isinstance(part, TextPart):
                self.emit_part(content, {"type": "text", "text": part.text})
            elif isinstance(part, ToolUsePart):
                if not last_of_group:
                    raise refuse(
                        _LABEL,
                        index,
                        part_index,
                        where,
                        "tool calls only in the last assistant message before their results",
                        "tool_use",
                        "Chat Completions needs the tool messages right after the calling message",
                        (part.id,),
                    )
                if part.thought_signature:
                    foreign_reasoning(
                        _LABEL, index, part_index, part, self.options.drop_foreign_reasoning
                    )
                call = {
                    "id": part.id,
                    "type": "function",
                    "function": {"name": self.names.add(part.name), "arguments": dumps(part.input)},
                }
                calls.append(call)
                self.last, self.last_is_call = call, True
            elif isinstance(part, CitationsPart | ImagePart | DocumentPart | ToolResultPart):
                raise refuse(
                    _LABEL,
                    index,
                    part_index,
                    where,
                    "text or tool calls in an assistant message",
                    kind(part),
                    f"an assistant message cannot carry a {kind(part)} part",
                )
            else:
                assert_never(part)
        out["content"] = content or None
        if calls:
            out["tool_calls"] = calls


def encode(
    messages: Iterable[Message],
    tools: Sequence[ToolDefinition] = (),
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Chat Completions request body for ``messages`` (see the module docstring).

    Raises:
        TranscriptError: the transcript is invalid or holds a part Chat cannot carry.
        ValidationError: an option is wrong, or two tool names collide on the wire.
    """
    opts = parse_options(options, ("system_role", "reasoning_effort"))
    items = check_sendable(messages)
    names = tool_names_for(items, tools)
    encoder = _Encoder(opts, names)
    for index, message in enumerate(items):
        if message.role == "system":
            encoder.system_message(index, message)
        elif message.role == "user":
            encoder.user_message(index, message)
        else:
            last = index + 1 == len(items) or items[index + 1].role != "assistant"
            encoder.assistant_message(index, message, last)
    payload: dict[str, Any] = {
        "model": opts.model,
        "messages": encoder.messages,
        "max_completion_tokens": opts.max_tokens,
    }
    if opts.temperature is not None:
        payload["temperature"] = opts.temperature
    effort = reasoning_effort(opts)
    if effort is not None:
        payload["reasoning_effort"] = effort
    if tools:
        payload["tools"] = [_tool(tool, names) for tool in tools]
        payload["tool_choice"] = "required" if opts.tool_choice == "any" else opts.tool_choice
    return merge_extra(payload, opts.extra)


def _tool(tool: ToolDefinition, names: ToolNames) -> dict[str, Any]:
    function: dict[str, Any] = {"name": names.add(tool.name)}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = tool.input_schema
    return {"type": "function", "function": function}


def parse_arguments(provider: str, field: str, arguments: Any) -> dict[str, Any]:
    """Tool-call arguments (JSON text) as a JSON object with exact numbers."""
    if arguments in ("", None):
        return {}
    try:
        value = loads(arguments)
    except (ValueError, TypeError):
        raise bad_response(provider, field, "JSON object text", arguments) from None
    if not isinstance(value, dict):
        raise bad_response(provider, field, "a JSON object", value)
    return value


def decode(response: Mapping[str, Any], tool_names: ToolNames | None = None) -> ModelResponse:
    """The `ModelResponse` for a Chat Completions response body (parsed with exact numbers).

    Raises:
        TranscriptError: the response has no choice or a tool call we cannot represent.
    """
    names = tool_names or ToolNames()
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices:
        raise bad_response(PROVIDER, "choices", "at least one choice", choices)
    choice = choices[0]
    message = choice.get("message") or {}
    parts: list[Part] = []
    if message.get("content"):
        parts.append(TextPart(text=message["content"]))
    if message.get("refusal"):
        parts.append(TextPart(text=message["refusal"]))
    for number, call in enumerate(message.get("tool_calls") or ()):
        field = f"choices[0].message.tool_calls[{number}]"
        if call.get("type", "function") != "function":
            raise bad_response(PROVIDER, field + ".type", "function", call.get("type"))
        function = call["function"]
        parts.append(
            ToolUsePart(
                id=call["id"],
                name=names.canonical(function["name"]),
                input=parse_arguments(
                    PROVIDER, field + ".function.arguments", function.get("arguments")
                ),
            )
        )
    annotations = message.get("annotations")
    stop = _STOP.get(choice.get("finish_reason") or "", "other")
    if message.get("refusal"):
        stop = "content_filter"
    usage = response.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return ModelResponse(
        message=Message(
            role="assistant",
            parts=tuple(parts),
            meta={PROVIDER: {"annotations": annotations}} if annotations else None,
        ),
        stop_reason=stop,
        usage=Usage(
            input_tokens=usage.get("prompt_tokens") or 0,
            output_tokens=usage.get("completion_tokens") or 0,
            cache_read_tokens=details.get("cached_tokens") or 0,
        ),
        model=response.get("model") or "",
    )


class StreamDecoder:
    """Folds Chat Completions chunks (and the final ``[DONE]``) into `ModelStreamEvent`\\ s.

    Feed each ``data:`` payload parsed, or the string ``"[DONE]"``; ``[DONE]``
    returns the `StreamEnd`, whose response equals `decode` of the assembled
    completion. Text is part 0 and tool calls follow, as in `decode`; this
    holds because Chat streams text before tool calls.
    """

    def __init__(self, tool_names: ToolNames | None = None) -> None:
        self._names = tool_names or ToolNames()
        self._head: dict[str, Any] = {}
        self._content: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._annotations: list[Any] = []
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self._done = False

    def _text_index(self) -> int:
        return 1 if self._content else 0

    def feed(self, chunk: Mapping[str, Any] | str) -> list[ModelStreamEvent]:
        """The events one chunk yields.

        Raises:
            TransientError / ProviderError: the stream carried an ``error`` object.
        """
        if chunk == "[DONE]":
            return self._finish_stream()
        if isinstance(chunk, str):
            raise bad_response(PROVIDER, "stream", "a chunk object or [DONE]", chunk)
        if "error" in chunk:
            error = chunk["error"] or {}
            status = 400 if error.get("type") == "invalid_request_error" else 500
            raise by_status(PROVIDER, "chat.completions.stream", status, dumps(error))
        for key in ("id", "model", "created"):
            if chunk.get(key):
                self._head[key] = chunk[key]
        if chunk.get("usage"):
            self._usage = dict(chunk["usage"])
        out: list[ModelStreamEvent] = []
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
            out += self._delta(choice.get("delta") or {})
        return out

    def _delta(self, delta: Mapping[str, Any]) -> list[ModelStreamEvent]:
        out: list[ModelStreamEvent] = []
        if delta.get("content"):
            self._content.append(delta["content"])
            out.append(TextDelta(index=0, text=delta["content"]))
        if delta.get("refusal"):
            index = self._text_index()
            self._refusal.append(delta["refusal"])
            out.append(TextDelta(index=index, text=delta["refusal"]))
        self._annotations += delta.get("annotations") or []
        for call in delta.get("tool_calls") or ():
            number = call.get("index", 0)
            function = call.get("function") or {}
            offset = (1 if self._content else 0) + (1 if self._refusal else 0)
            if number not in self._calls:
                state = {
                    "id": call.get("id", ""),
                    "name": function.get("name", ""),
                    "arguments": [],
                }
                self._calls[number] = state
                name = self._names.canonical(state["name"])
                out.append(ToolUseStart(index=offset + number, id=state["id"], name=name))
            state = self._calls[number]
            if function.get("arguments"):
                state["arguments"].append(function["arguments"])
                out.append(
                    ToolInputDelta(index=offset + number, partial_json=function["arguments"])
                )
        return out

    def _finish_stream(self) -> list[ModelStreamEvent]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self._content) or None,
            "refusal": "".join(self._refusal) or None,
        }
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
                }
                for _, call in sorted(self._calls.items())
            ]
        if self._annotations:
            message["annotations"] = self._annotations
        completion = {
            **self._head,
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
            "usage": self._usage,
        }
        self._done = True
        return [StreamEnd(response=decode(completion, self._names))]

    def end(self) -> list[ModelStreamEvent]:
        """Call when the stream closes.

        Raises:
            TransientError: ``[DONE]`` never came.
        """
        if not self._done:
            raise truncated(PROVIDER, "chat.completions.stream", "no [DONE]")
        return []


def decode_stream(
    chunks: Iterable[Mapping[str, Any] | str], tool_names: ToolNames | None = None
) -> list[ModelStreamEvent]:
    """All events a whole recorded stream yields, ending with `StreamEnd`."""
    return drain_stream(StreamDecoder(tool_names), chunks)
