"""Amazon Bedrock Converse encoding: a transcript as boto3 ``converse`` arguments.

The rules (what is carried how, what is refused) are in the docstring of
`agentledger.providers.bedrock`, which re-exports `encode`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, assert_never

from agentledger.errors import TranscriptError, ValidationError
from agentledger.providers._json import to_plain
from agentledger.providers._names import ToolNames
from agentledger.providers._options import EncodeOptions, merge_extra, parse_options
from agentledger.providers._transcript import (
    check_sendable,
    foreign_reasoning,
    kind,
    own_reasoning,
    refuse,
    result_text,
    tool_names_for,
)
from agentledger.providers.model import ToolDefinition
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
    validate_bedrock,
)

__all__ = ["DOCUMENT_FORMATS", "LOCATION_KEYS", "PROVIDER", "encode"]

PROVIDER = "bedrock"
DOCUMENT_FORMATS = frozenset(("pdf", "csv", "doc", "docx", "xls", "xlsx", "html", "txt", "md"))
LOCATION_KEYS = frozenset(
    ("web", "documentChar", "documentPage", "documentChunk", "searchResultLocation")
)
_TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_.:-]{1,64}")
_DOCUMENT_NAME = re.compile(r"[A-Za-z0-9()\[\]\- ]{1,200}")


def _exact(value: Any, path: str) -> str | None:
    """The path of the first number in ``value`` a float would change, or None."""
    if isinstance(value, dict):
        for key, item in value.items():
            found = _exact(item, f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, list):
        for number, item in enumerate(value):
            found = _exact(item, f"{path}[{number}]")
            if found:
                return found
    elif isinstance(value, Decimal):
        as_float = float(value)
        if not math.isfinite(as_float) or Decimal(repr(as_float)) != value:
            return path
    return None


class _Encoder:
    """One encoding pass: Bedrock messages so far and the cache points used."""

    def __init__(self, options: EncodeOptions, names: ToolNames) -> None:
        self.options = options
        self.names = names
        self.limit = options.provider.get("max_cache_checkpoints", 4)
        if type(self.limit) is not int or self.limit < 0:
            raise ValidationError(
                field="options.max_cache_checkpoints", expected="an int >= 0", got=self.limit
            )
        self.system: list[dict[str, Any]] = []
        self.messages: list[dict[str, Any]] = []
        self.sources: list[int] = []  # transcript index of each Bedrock message's first message
        self.last: list[dict[str, Any]] | None = None  # the block list written last
        self.points = 0

    def checkpoint(self, index: int, part_index: int) -> None:
        target = self.last
        if target and "cachePoint" in target[-1]:
            return  # a run of checkpoints marks one boundary
        problem = ""
        if not target:
            problem = "a cache checkpoint needs content before it"
        elif self.points >= self.limit:
            problem = f"at most {self.limit} cache checkpoints per request"
        if problem:
            if self.options.drop_cache_checkpoints:
                return
            raise refuse(
                PROVIDER,
                index,
                part_index,
                f"parts[{part_index}]",
                "a cache checkpoint Bedrock can carry",
                "cache_checkpoint",
                problem + "; set options['drop_cache_checkpoints'] to leave it out",
            )
        assert target is not None
        self.points += 1
        target.append({"cachePoint": {"type": "default"}})

    def system_message(self, index: int, message: Message) -> None:
        for part_index, part in enumerate(message.parts):
            if isinstance(part, CacheCheckpointPart):
                self.checkpoint(index, part_index)
            elif isinstance(part, TextPart):
                self.system.append({"text": self.text(index, part_index, part.text)})
                self.last = self.system
            else:
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
        if self.messages and self.messages[-1]["role"] == message.role:
            content = self.messages[-1]["content"]
        else:
            content = []
            self.messages.append({"role": message.role, "content": content})
            self.sources.append(index)
        own = own_reasoning(message, PROVIDER)
        for part_index, part in enumerate(message.parts):
            if isinstance(part, CacheCheckpointPart):
                self.checkpoint(index, part_index)
                continue
            block = self.block(index, part_index, part, message, own)
            if block is not None:
                content.append(block)
                self.last = content
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

    def text(self, index: int, part_index: int, text: str) -> str:
        if not text:
            raise refuse(
                PROVIDER,
                index,
                part_index,
                f"parts[{part_index}].text",
                "non-empty text",
                text,
                "Bedrock refuses blank text blocks",
            )
        return text

    def json(self, index: int, part_index: int, field: str, value: Any) -> Any:
        bad = _exact(value, f"parts[{part_index}].{field}")
        if bad:
            raise refuse(
                PROVIDER,
                index,
                part_index,
                bad,
                "a number a float holds exactly (boto3 sends JSON numbers as floats)",
                value,
                f"boto3 would change the number at {bad}",
            )
        return to_plain(value)

    def block(
        self, index: int, part_index: int, part: Part, message: Message, own: Mapping[int, Any]
    ) -> dict[str, Any] | None:
        if isinstance(part, ThinkingPart):
            if part_index not in own:
                foreign_reasoning(
                    PROVIDER, index, part_index, part, self.options.drop_foreign_reasoning
                )
                return None
            if part.redacted:
                return {"reasoningContent": {"redactedContent": part.redacted}}
            reasoning: dict[str, Any] = {"text": part.text}
            if part.signature:
                reasoning["signature"] = part.signature
            return {"reasoningContent": {"reasoningText": reasoning}}
        if isinstance(part, TextPart):
            return {"text": self.text(index, part_index, part.text)}
        if isinstance(part, ImagePart):
            if part.data is not None:
                return {"image": {"format": part.format, "source": {"bytes": part.data}}}
            return {"image": {"format": part.format, "source": self.s3(index, part_index, part)}}
        if isinstance(part, DocumentPart):
            return self.document(index, part_index, part)
        if isinstance(part, CitationsPart):
            return {
                "citationsContent": {
                    "content": [{"text": part.text}],
                    "citations": [
                        self.citation(index, part_index, number, citation)
                        for number, citation in enumerate(part.citations)
                    ],
                }
            }
        if isinstance(part, ToolUsePart):
            self.tool_use_id(index, part_index, part.id)
            if part.thought_signature:
                foreign_reasoning(
                    PROVIDER, index, part_index, part, self.options.drop_foreign_reasoning
                )
            return {
                "toolUse": {
                    "toolUseId": part.id,
                    "name": self.names.add(part.name),
                    "input": self.json(index, part_index, "input", part.input),
                }
            }
        if isinstance(part, ToolResultPart):
            self.tool_use_id(index, part_index, part.tool_use_id)
            if isinstance(part.content, dict):
                content = [{"json": self.json(index, part_index, "content", part.content)}]
            else:
                content = [{"text": result_text(part)}]
            result: dict[str, Any] = {"toolUseId": part.tool_use_id, "content": content}
            if part.is_error:
                result["status"] = "error"
            return {"toolResult": result}
        if isinstance(part, CacheCheckpointPart):  # handled by the caller
            return None
        assert_never(part)

    def tool_use_id(self, index: int, part_index: int, tool_use_id: str) -> None:
        if not _TOOL_USE_ID.fullmatch(tool_use_id):
            raise refuse(
                PROVIDER,
                index,
                part_index,
                f"parts[{part_index}]",
                "a tool-use id matching [a-zA-Z0-9_.:-]{1,64}",
                tool_use_id,
                "Bedrock refuses this tool-use id",
                (tool_use_id,),
            )

    def s3(self, index: int, part_index: int, part: ImagePart | DocumentPart) -> dict[str, Any]:
        uri = part.url if isinstance(part, ImagePart) else part.uri
        if not uri or not uri.startswith("s3://"):
            raise refuse(
                PROVIDER,
                index,
                part_index,
                f"parts[{part_index}]",
                "bytes or an s3:// URI",
                uri,
                "Bedrock fetches images and documents only from S3",
            )
        return {"s3Location": {"uri": uri}}

    def document(self, index: int, part_index: int, part: DocumentPart) -> dict[str, Any]:
        where = f"parts[{part_index}]"
        if not _DOCUMENT_NAME.fullmatch(part.name) or "  " in part.name:
            raise refuse(
                PROVIDER,
                index,
                part_index,
                where + ".name",
                "letters, digits, single spaces, hyphens, parentheses, square brackets",
                part.name,
                "Bedrock refuses this document name",
            )
        needs_format = part.data is not None or part.uri is not None
        if part.format not in DOCUMENT_FORMATS and (part.format or needs_format):
            raise refuse(
                PROVIDER,
                index,
                part_index,
                where + ".format",
                "one of " + ", ".join(sorted(DOCUMENT_FORMATS)),
                part.format,
                "Bedrock does not know this document format",
            )
        source: dict[str, Any]
        if part.data is not None:
            source = {"bytes": part.data}
        elif part.text is not None:
            source = {"text": part.text}
        elif part.chunks is not None:
            source = {"content": [{"text": chunk} for chunk in part.chunks]}
        else:
            source = self.s3(index, part_index, part)
        block: dict[str, Any] = {"name": part.name, "source": source}
        if part.format:
            block = {"format": part.format, **block}
        if part.context:
            block["context"] = part.context
        if part.cite:
            block["citations"] = {"enabled": True}
        return {"document": block}

    def citation(
        self, index: int, part_index: int, number: int, citation: Citation
    ) -> dict[str, Any]:
        location = citation.location or {}
        if len(location) != 1 or next(iter(location)) not in LOCATION_KEYS:
            raise refuse(
                PROVIDER,
                index,
                part_index,
                f"parts[{part_index}].citations[{number}].location",
                "a Bedrock citation location (one of " + ", ".join(sorted(LOCATION_KEYS)) + ")",
                citation.location,
                "this citation was not made by Bedrock",
            )
        out: dict[str, Any] = {}
        if citation.title:
            out["title"] = citation.title
        if citation.source:
            out["source"] = citation.source
        out["sourceContent"] = [{"text": text} for text in citation.source_content]
        out["location"] = self.json(index, part_index, f"citations[{number}]", location)
        return out


def _check_thinking(encoder: _Encoder) -> None:
    """With thinking on, every Bedrock assistant message with a tool use starts with reasoning."""
    for number, message in enumerate(encoder.messages):
        blocks = message["content"]
        uses = message["role"] == "assistant" and any("toolUse" in b for b in blocks)
        if uses and "reasoningContent" not in blocks[0]:
            raise TranscriptError(
                field="parts[0]",
                expected="a thinking part first (Bedrock, thinking enabled)",
                got=next(iter(blocks[0])),
                message=(
                    f"{PROVIDER}: with thinking enabled, an assistant message with tool "
                    "uses must start with its reasoning (was foreign reasoning dropped?)"
                ),
                message_index=encoder.sources[number],
                part_index=0,
                tool_use_ids=[b["toolUse"]["toolUseId"] for b in blocks if "toolUse" in b],
            )


def encode(
    messages: Iterable[Message],
    tools: Sequence[ToolDefinition] = (),
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The keyword arguments of boto3 ``converse`` for ``messages`` (see the module docstring).

    Raises:
        TranscriptError: the transcript is invalid or holds a part Bedrock cannot carry.
        ValidationError: an option is wrong, tool names collide, or tool uses
            appear without tool definitions (Bedrock then requires ``toolConfig``).
    """
    opts = parse_options(options, ("max_cache_checkpoints", "additional_fields"))
    items = check_sendable(messages)
    if opts.thinking is not None:
        validate_bedrock(items, thinking_enabled=True)
    names = tool_names_for(items, tools)
    encoder = _Encoder(opts, names)
    for index, message in enumerate(items):
        if message.role == "system":
            encoder.system_message(index, message)
        else:
            encoder.message(index, message)
    if opts.thinking is not None:
        _check_thinking(encoder)
    payload: dict[str, Any] = {"modelId": opts.model}
    if encoder.system:
        payload["system"] = encoder.system
    payload["messages"] = encoder.messages
    inference: dict[str, Any] = {"maxTokens": opts.max_tokens}
    if opts.temperature is not None:
        inference["temperature"] = opts.temperature
    payload["inferenceConfig"] = inference
    uses_tools = any(isinstance(p, ToolUsePart | ToolResultPart) for m in items for p in m.parts)
    if tools:
        if opts.tool_choice == "none":
            raise ValidationError(
                field="options.tool_choice",
                expected="auto or any (Bedrock has no 'none'; send no tools instead)",
                got="none",
            )
        payload["toolConfig"] = {
            "tools": [_tool(tool, names) for tool in tools],
            "toolChoice": {opts.tool_choice: {}},
        }
    elif uses_tools:
        raise ValidationError(
            field="tools",
            expected="tool definitions (Bedrock requires toolConfig with tool use blocks)",
            got=[],
        )
    additional = opts.provider.get("additional_fields", {})
    if not isinstance(additional, Mapping):
        raise ValidationError(field="options.additional_fields", expected="a dict", got=additional)
    fields = dict(additional)
    if opts.thinking is not None:
        fields.setdefault(
            "thinking", {"type": "enabled", "budget_tokens": opts.thinking.budget_tokens}
        )
    if fields:
        payload["additionalModelRequestFields"] = fields
    return merge_extra(payload, opts.extra)


def _tool(tool: ToolDefinition, names: ToolNames) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": names.add(tool.name)}
    if tool.description:
        spec["description"] = tool.description
    spec["inputSchema"] = {"json": tool.input_schema}
    return {"toolSpec": spec}
