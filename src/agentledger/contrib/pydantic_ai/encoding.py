"""agentledger transcripts as pydantic-ai message history (see the package docstring)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec
import pydantic
from pydantic_ai import messages as pai

from agentledger.contrib.pydantic_ai.common import (
    DOCUMENT_TYPES,
    FAILED_OUTCOMES,
    IMAGE_TYPES,
    META,
    REQUEST_PART,
    STAMPED,
    USER_CONTENT,
    ModelMessage,
    message_metadata,
    ours_unconvertible,
    parse_tool_args,
    plain_numbers,
    restore_fields,
    with_provider_details,
)
from agentledger.errors import TranscriptError
from agentledger.transcript import (
    CacheCheckpointPart,
    DocumentPart,
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
)

__all__ = ["to_pydantic_ai"]


class _Meta(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """The shape of ``Message.meta["pydantic_ai"]``."""

    message: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {}
    continued: bool = False
    carried: list[dict[str, Any]] = []
    """Request parts with no transcript part, each ``{"at": index, "part": json}``."""


def _split_meta(index: int, message: Message) -> tuple[_Meta, dict[str, Any]]:
    meta: dict[str, Any] = plain_numbers(dict(message.meta or {}))
    raw = meta.pop(META, None)
    try:
        ours = msgspec.convert(raw or {}, _Meta)
    except msgspec.ValidationError as e:
        raise TranscriptError(
            field=f"messages[{index}].meta.{META}",
            expected="pydantic-ai fields written by from_pydantic_ai",
            got=raw,
            message_index=index,
        ) from e
    return ours, meta


def _image(part: ImagePart, saved: Mapping[str, Any]) -> Any:
    media_type = saved.get("media_type", IMAGE_TYPES[part.format])
    vendor = saved.get("vendor_metadata")
    if part.data is not None:
        image: Any = pai.BinaryContent(
            part.data,
            media_type=media_type,
            identifier=saved.get("identifier"),
            vendor_metadata=vendor,
        )
        return pai.BinaryContent.narrow_type(image) if saved.get("narrowed") else image
    return pai.ImageUrl(
        part.url or "",
        media_type=media_type,
        identifier=saved.get("identifier"),
        vendor_metadata=vendor,
        force_download=saved.get("force_download", False),
    )


def _document(m: int, p: int, part: DocumentPart, saved: Mapping[str, Any]) -> Any:
    if part.context or part.cite:
        raise ours_unconvertible(m, p, part, "a document's context and cite have no place there")
    media_type = DOCUMENT_TYPES.get(part.format)
    if media_type is None:
        raise ours_unconvertible(
            m, p, part, f"format {part.format!r} is not one of {sorted(DOCUMENT_TYPES)}"
        )
    vendor = saved.get("vendor_metadata")
    name = saved.get("identifier", part.name)
    if part.data is not None:
        return pai.BinaryContent(
            part.data, media_type=media_type, identifier=name, vendor_metadata=vendor
        )
    if part.uri is not None:
        return pai.DocumentUrl(
            part.uri,
            media_type=saved.get("media_type", media_type),
            identifier=name,
            vendor_metadata=vendor,
            force_download=saved.get("force_download", False),
        )
    raise ours_unconvertible(
        m, p, part, "only documents with data or a uri (text and chunks have no place)"
    )


def _uploaded(m: int, p: int, part: ImagePart | DocumentPart, saved: Mapping[str, Any]) -> Any:
    """A pydantic-ai ``UploadedFile`` back from the image or document that names it."""
    file_id = part.url if isinstance(part, ImagePart) else part.uri
    if file_id is None:
        raise ours_unconvertible(m, p, part, "an uploaded file is named by its url or uri")
    uploaded = saved["uploaded"]
    return pai.UploadedFile(
        file_id,
        uploaded.get("provider_name", ""),
        media_type=uploaded.get("media_type"),
        identifier=uploaded.get("identifier"),
        vendor_metadata=saved.get("vendor_metadata"),
    )


def _user_item(m: int, p: int, part: Part, saved: Mapping[str, Any]) -> Any:
    if isinstance(part, TextPart):
        if "text_content" in saved:
            return pai.TextContent(part.text, metadata=saved["text_content"].get("metadata"))
        return part.text
    if isinstance(part, ImagePart | DocumentPart) and "uploaded" in saved:
        return _uploaded(m, p, part, saved)
    if isinstance(part, ImagePart):
        return _image(part, saved)
    if isinstance(part, DocumentPart):
        return _document(m, p, part, saved)
    if isinstance(part, CacheCheckpointPart):
        ttl = saved.get("ttl", "5m")
        if ttl not in ("5m", "1h"):
            raise ours_unconvertible(m, p, part, f"its saved cache TTL {ttl!r} is not 5m or 1h")
        return pai.CachePoint(ttl=ttl)
    raise ours_unconvertible(
        m, p, part, "a user prompt holds text, images, documents and cache points"
    )


def _carried(m: int, message: Message, ours: _Meta) -> dict[int, list[Any]]:
    """The request parts kept in ``meta`` (see `_Meta.carried`), by the part index they precede."""
    out: dict[int, list[Any]] = {}
    for n, saved in enumerate(ours.carried):
        at = saved.get("at")
        where = f"messages[{m}].meta.{META}.carried[{n}]"
        if type(at) is not int or not 0 <= at <= len(message.parts):
            raise TranscriptError(
                field=f"{where}.at",
                expected=f"a part index from 0 to {len(message.parts)}",
                got=at,
                message_index=m,
            )
        try:
            part = REQUEST_PART.validate_python(saved.get("part"))
        except pydantic.ValidationError as e:
            raise TranscriptError(
                field=f"{where}.part", expected="a pydantic-ai request part", got=saved.get("part")
            ) from e
        out.setdefault(at, []).append(part)
    return out


class _Encoder:
    """Builds pydantic-ai messages from a transcript, remembering tool names by call id."""

    def __init__(self, stamp: datetime) -> None:
        self.stamp = stamp
        self.names: dict[str, str] = {}
        self.out: list[ModelMessage] = []
        self.files: set[int] = set()
        """Indices of the message's parts that went back into a tool return's content."""

    def message(self, m: int, message: Message) -> None:
        ours, foreign = _split_meta(m, message)
        where = f"messages[{m}].meta.{META}.message"
        if message.role == "assistant":
            if ours.continued:
                raise TranscriptError(
                    field=f"messages[{m}].meta.{META}.continued",
                    expected="no continuation on an assistant message",
                    got=True,
                    message_index=m,
                )
            parts = [self.response_part(m, p, part, ours) for p, part in enumerate(message.parts)]
            response = pai.ModelResponse(
                parts=parts, timestamp=self.stamp, metadata=message_metadata(foreign)
            )
            self.out.append(self.marked(restore_fields(response, ours.message, where)))
            return
        parts = self.request_parts(m, message, ours)
        if ours.continued:
            previous = self.out[-1] if self.out else None
            if not isinstance(previous, pai.ModelRequest) or foreign or ours.message:
                raise TranscriptError(
                    field=f"messages[{m}].meta.{META}.continued",
                    expected="a continuation of the request before it, with no meta of its own",
                    got=message.meta,
                    message_index=m,
                )
            self.out[-1] = self.marked(
                dataclasses.replace(previous, parts=[*previous.parts, *parts])
            )
            return
        request = pai.ModelRequest(parts=parts, metadata=message_metadata(foreign))
        self.out.append(self.marked(restore_fields(request, ours.message, where)))

    def marked(self, message: Any) -> Any:
        """``message``, naming this conversion's time in its metadata if a field holds it.

        A field still holding ``self.stamp`` itself (not an equal time restored
        from ``meta``) was stamped here, for want of one in the transcript.
        """
        times = [message.timestamp, *(getattr(p, "timestamp", None) for p in message.parts)]
        if not any(t is self.stamp for t in times):
            return message
        metadata = dict(message.metadata or {})
        metadata[STAMPED] = self.stamp.isoformat()
        return dataclasses.replace(message, metadata=metadata)

    def request_parts(self, m: int, message: Message, ours: _Meta) -> list[Any]:
        parts: list[Any] = []
        carried = _carried(m, message, ours)
        self.files.clear()
        p = 0
        while p < len(message.parts):
            parts.extend(carried.pop(p, ()))
            if p in self.files:  # a tool return's file, already put back in its content
                p += 1
                continue
            part = message.parts[p]
            saved = ours.parts.get(str(p), {})
            where = f"messages[{m}].meta.{META}.parts.{p}"
            if message.role == "system":
                if not isinstance(part, TextPart):
                    raise ours_unconvertible(m, p, part, "a system prompt holds only text")
                prompt: Any = pai.SystemPromptPart(part.text, timestamp=self.stamp)
                parts.append(restore_fields(prompt, saved.get("part", {}), where))
            elif isinstance(part, ToolResultPart):
                content = self.tool_files(m, p, message, part, saved, ours)
                parts.append(self.tool_return(m, p, part, content, saved, where))
            elif isinstance(part, TextPart) and "retry_feedback" in saved:
                parts.append(self.retry_feedback(m, p, part, saved, where))
            elif isinstance(part, USER_CONTENT):
                # One user prompt: the saved item count, else the run of content parts here.
                count = saved.get("items")
                end = p + 1
                if count is None:
                    while (
                        end < len(message.parts)
                        and end not in carried
                        and end not in self.files
                        and self.plain_content(message, ours, end)
                    ):
                        end += 1
                else:
                    end = p + count if type(count) is int and count > 0 else p
                    if not all(isinstance(q, USER_CONTENT) for q in message.parts[p:end]) or (
                        end <= p or end > len(message.parts)
                    ):
                        raise ours_unconvertible(
                            m, p, part, f"its saved prompt of {count!r} parts does not fit"
                        )
                items = [
                    _user_item(m, q, message.parts[q], ours.parts.get(str(q), {}).get("item", {}))
                    for q in range(p, end)
                ]
                as_str = len(items) == 1 and isinstance(items[0], str)
                if saved.get("str", as_str) and not as_str:
                    raise ours_unconvertible(
                        m, p, part, "it was saved as a text prompt but is not one text"
                    )
                content = items[0] if saved.get("str", as_str) else items
                prompt = pai.UserPromptPart(content, timestamp=self.stamp)
                parts.append(restore_fields(prompt, saved.get("part", {}), where))
                p = end
                continue
            else:
                raise ours_unconvertible(
                    m, p, part, f"a {message.role} message there holds no such part"
                )
            p += 1
        parts.extend(carried.pop(len(message.parts), ()))
        return parts

    @staticmethod
    def plain_content(message: Message, ours: _Meta, index: int) -> bool:
        """Whether part ``index`` continues the user prompt before it (no prompt of its own)."""
        saved = ours.parts.get(str(index), {})
        return (
            isinstance(message.parts[index], USER_CONTENT)
            and "items" not in saved
            and "retry_feedback" not in saved
        )

    def tool_files(
        self, m: int, p: int, message: Message, part: ToolResultPart, saved: Any, ours: _Meta
    ) -> Any:
        """A tool result's content with the files saved as later parts put back in place."""
        entry = saved.get("files")
        if entry is None:
            return plain_numbers(part.content)
        indices, at = entry.get("parts"), entry.get("at")
        fits = (
            isinstance(indices, list)
            and isinstance(at, list)
            and len(indices) == len(at) > 0
            and all(type(q) is int and p < q < len(message.parts) for q in indices)
            and all(isinstance(message.parts[q], ImagePart | DocumentPart) for q in indices)
            and not self.files.intersection(indices)
        )
        if not fits:
            raise ours_unconvertible(
                m, p, part, f"its saved files {entry!r} do not fit the message"
            )
        files = [
            _user_item(m, q, message.parts[q], ours.parts.get(str(q), {}).get("item", {}))
            for q in indices
        ]
        self.files.update(indices)
        if not entry.get("list"):
            return files[0]
        plain = plain_numbers(part.content)
        content = list(plain) if isinstance(plain, list) else [plain]
        for position, file in sorted(zip(at, files, strict=True), key=lambda pair: pair[0]):
            content.insert(position, file)
        return content

    def tool_return(
        self,
        m: int,
        p: int,
        part: ToolResultPart,
        content: Any,
        saved: Mapping[str, Any],
        where: str,
    ) -> Any:
        name = self.names.get(part.tool_use_id)
        fields = saved.get("part", {})
        if name is None and "tool_name" not in fields:
            raise ours_unconvertible(
                m, p, part, f"no earlier tool call has id {part.tool_use_id!r}"
            )
        tool = pai.ToolReturnPart(
            name or "",
            content,
            part.tool_use_id,
            timestamp=self.stamp,
            outcome="failed" if part.is_error else "success",
        )
        tool = restore_fields(tool, fields, where)
        if (tool.outcome in FAILED_OUTCOMES) != part.is_error:
            raise ours_unconvertible(
                m, p, part, f"is_error disagrees with the saved outcome {tool.outcome!r}"
            )
        return tool

    def retry_feedback(
        self, m: int, p: int, part: TextPart, saved: Mapping[str, Any], where: str
    ) -> Any:
        feedback = saved["retry_feedback"]
        retry = pai.RetryFeedbackPart(
            feedback.get("content", ""),
            retry=pai.RetryInfo(cause="model_retry"),
            timestamp=self.stamp,
        )
        retry = restore_fields(retry, feedback, where)
        if retry.model_response() != part.text:
            raise ours_unconvertible(
                m, p, part, "its text is no longer the retry feedback saved with it"
            )
        return retry

    def response_part(self, m: int, p: int, part: Part, ours: _Meta) -> Any:
        saved = ours.parts.get(str(p), {})
        fields = saved.get("part", {})
        where = f"messages[{m}].meta.{META}.parts.{p}"
        if isinstance(part, TextPart):
            return restore_fields(pai.TextPart(part.text), fields, where)
        if isinstance(part, ThinkingPart):
            if part.redacted:
                raise ours_unconvertible(
                    m, p, part, "pydantic-ai has no redacted (encrypted) thinking bytes"
                )
            extra: dict[str, Any] = {}
            if part.index != p:
                extra["index"] = part.index
            if not part.final:
                extra["final"] = False
            thinking = restore_fields(
                pai.ThinkingPart(part.text, signature=part.signature or None), fields, where
            )
            return dataclasses.replace(
                thinking, provider_details=with_provider_details(thinking, extra)
            )
        if isinstance(part, ToolUsePart):
            self.names[part.id] = part.name
            args: Any = plain_numbers(part.input)
            if "args" in fields:
                args = fields["args"]
                if parse_tool_args(args) != part.input:
                    raise ours_unconvertible(
                        m, p, part, "its input is no longer the arguments saved with it"
                    )
            call = pai.ToolCallPart(part.name, args, part.id)
            call = restore_fields(call, {k: v for k, v in fields.items() if k != "args"}, where)
            extra = {"thought_signature": part.thought_signature} if part.thought_signature else {}
            return dataclasses.replace(call, provider_details=with_provider_details(call, extra))
        if isinstance(part, ImagePart) and part.data is not None:
            image = _image(part, saved.get("item", {}))
            return restore_fields(pai.FilePart(image), fields, where)
        raise ours_unconvertible(
            m, p, part, "a model response holds text, thinking, tool calls and files"
        )


def to_pydantic_ai(
    messages: Sequence[Message], *, timestamp: datetime | None = None
) -> list[ModelMessage]:
    """The pydantic-ai message history for a transcript, part for part.

    ``timestamp`` stamps the parts whose time the transcript does not carry
    (default: now). Messages that came from `from_pydantic_ai` get back every
    field they had.

    Raises:
        TranscriptError: a part pydantic-ai cannot carry (named by message and
            part index), or a tool result whose call is not in the transcript.
    """
    encoder = _Encoder(timestamp or datetime.now(UTC))
    for m, message in enumerate(messages):
        try:
            encoder.message(m, message)
        except pydantic.ValidationError as e:  # saved fields pydantic-ai refuses
            raise TranscriptError(
                field=f"messages[{m}].meta.{META}",
                expected="pydantic-ai fields pydantic-ai accepts",
                got=str(e),
                message_index=m,
            ) from e
    return encoder.out
