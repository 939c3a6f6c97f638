"""pydantic-ai message history as agentledger transcripts (see the package docstring)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal, TypeAlias

from pydantic_ai import messages as pai

from agentledger.contrib.pydantic_ai.common import (
    CARRIED,
    CARRIED_IN_META,
    DOCUMENT_FORMATS,
    FAILED_OUTCOMES,
    FOREIGN,
    IMAGE_FORMATS,
    JSON_ADAPTER,
    META,
    REQUEST_PART,
    STAMPED,
    computed_identifier,
    field_differences,
    message_metadata,
    parse_tool_args,
    split_provider_details,
    theirs_unconvertible,
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

__all__ = ["from_pydantic_ai"]


def _split_files(content: Any) -> tuple[Any, tuple[dict[str, Any], list[Any]] | None]:
    """A tool return's JSON content, and its files with where they sat (None if it has none)."""
    if pai.is_multi_modal_content(content):
        return None, ({"at": [0], "list": False}, [content])
    if isinstance(content, list) and any(pai.is_multi_modal_content(c) for c in content):
        at = [i for i, c in enumerate(content) if pai.is_multi_modal_content(c)]
        data = [c for c in content if not pai.is_multi_modal_content(c)]
        return data, ({"at": at, "list": True}, [content[i] for i in at])
    return content, None


def _nested(value: Any, path: str) -> tuple[Any, str] | None:
    """The first file or bytes inside ``value``'s dicts and lists (not ``value``), with its path."""
    children = (
        [(f"{path}[{key!r}]", item) for key, item in value.items()]
        if isinstance(value, dict)
        else [(f"{path}[{i}]", item) for i, item in enumerate(value)]
        if isinstance(value, list | tuple)
        else []
    )
    for where, item in children:
        if pai.is_multi_modal_content(item) or isinstance(item, bytes | bytearray):
            return item, where
        found = _nested(item, where)
        if found is not None:
            return found
    return None


def _refuse_nested(m: int, p: int, content: Any) -> None:
    """Refuse, by its name, what a tool return holds that agentledger has no place for.

    Files at the top of the content (alone or in its list) become parts; files
    deeper (in a dict, a nested list) reach the model as JSON text, not as
    files, and bytes are not JSON.
    """
    tops = list(enumerate(content)) if isinstance(content, list) else [(None, content)]
    for index, top in tops:
        path = "content" if index is None else f"content[{index}]"
        if isinstance(top, bytes | bytearray):
            found: tuple[Any, str] | None = (top, path)
        elif pai.is_multi_modal_content(top):
            continue
        else:
            found = _nested(top, path)
        if found is None:
            continue
        item, where = found
        if isinstance(item, bytes | bytearray):
            kind, why = type(item).__name__, "bytes are not JSON"
        else:
            kind, why = item.kind, "a file inside a dict or nested list is no file part, nor JSON"
        raise theirs_unconvertible(m, p, f"tool-return {kind}", f"{where}: {why}")


Segment: TypeAlias = tuple[Literal["system", "user", "assistant"], list[Part], dict[str, Any]]


class _Decoder:
    """Builds a transcript from pydantic-ai messages, remembering tool names by call id."""

    def __init__(self, timestamps: bool) -> None:
        self.timestamps = timestamps
        self.stamp: datetime | None = None
        """The time ``to_pydantic_ai`` stamped on the message being read, if it says so."""
        self.names: dict[str, str] = {}
        self.out: list[Message] = []
        self.pending: list[tuple[int, int, Any, dict[str, Any]]] = []
        """Files of tool returns not placed yet: (message, part, item, the return's saved entry)."""

    def diff(self, actual: Any, baseline: Any, skip: Iterable[str] = ()) -> dict[str, Any]:
        return field_differences(actual, baseline, skip, self.timestamps, self.stamp)

    def message(self, m: int, message: Any) -> None:
        metadata = dict(message.metadata or {})
        foreign = metadata.pop(FOREIGN, None) or {}
        stamp = metadata.pop(STAMPED, None)
        self.stamp = _stamp(stamp)
        stamp = stamp if self.stamp is not None else None  # unreadable: kept as it came
        if isinstance(message, pai.ModelResponse):
            segments: list[Segment] = [("assistant", [], {})]
            for p, part in enumerate(message.parts):
                self.response_part(m, p, part, segments[0])
            baseline: Any = pai.ModelResponse(parts=[], metadata=message_metadata(foreign, stamp))
        elif isinstance(message, pai.ModelRequest):
            segments = []
            for p, request_part in enumerate(message.parts):
                self.request_part(m, p, request_part, message.parts, segments)
            self.flush_files(segments)
            if not segments:
                segments.append(("user", [], {}))
            baseline = pai.ModelRequest(parts=[], metadata=message_metadata(foreign, stamp))
        else:
            raise TranscriptError(
                field=f"model_messages[{m}]",
                expected="a ModelRequest or ModelResponse",
                got=type(message).__name__,
                message_index=m,
            )
        fields = self.diff(message, baseline, skip=("parts",))
        for s, (role, parts, saved) in enumerate(segments):
            ours: dict[str, Any] = {}
            if s == 0 and fields:
                ours["message"] = fields
            carried = saved.pop(CARRIED, None)
            if saved:
                ours["parts"] = saved
            if carried:
                ours["carried"] = carried
            if s > 0:
                ours["continued"] = True
            meta = {**(foreign if s == 0 else {}), **({META: ours} if ours else {})}
            try:
                self.out.append(Message(role=role, parts=tuple(parts), meta=meta or None))
            except TranscriptError as e:
                raise TranscriptError(
                    field=f"model_messages[{m}].{e.field}",
                    expected=e.expected,
                    got=e.got,
                    message_index=m,
                ) from e

    def flush_files(self, segments: list[Segment]) -> None:
        """The files of the tool returns just read, as parts after those tool results."""
        if not self.pending:
            return
        _, parts, saved = segments[-1]
        for m, p, item, entry in self.pending:
            item_saved: dict[str, Any] = {}
            if isinstance(item, pai.UploadedFile):
                file = self.uploaded(m, p, item, item_saved)
            elif isinstance(item, pai.BinaryContent | pai.ImageUrl | pai.DocumentUrl):
                file = self.file(m, p, item, item_saved, "tool-return")
            else:
                raise theirs_unconvertible(
                    m, p, f"tool-return {item.kind}", "agentledger has no such file part"
                )
            entry["parts"].append(len(parts))
            if item_saved:
                saved[str(len(parts))] = {"item": item_saved}
            parts.append(file)
        self.pending.clear()

    @staticmethod
    def segment(segments: list[Segment], role: Literal["system", "user"]) -> Segment:
        if not segments or segments[-1][0] != role:
            segments.append((role, [], {}))
        return segments[-1]

    def request_part(
        self, m: int, p: int, part: Any, siblings: Sequence[Any], segments: list[Segment]
    ) -> None:
        if isinstance(part, pai.RetryPromptPart):  # deprecated: what pydantic-ai reads it as
            part = pai._translate_legacy_retry_part(part)
        if not (isinstance(part, pai.ToolReturnPart) and part.part_kind == "tool-return"):
            self.flush_files(segments)
        baseline: Any
        if isinstance(part, CARRIED_IN_META):
            _, parts, saved = segments[-1] if segments else self.segment(segments, "user")
            stored = REQUEST_PART.dump_python(part, mode="json")
            if REQUEST_PART.validate_python(stored) != part:
                raise theirs_unconvertible(
                    m, p, part.part_kind, "it does not read back from JSON unchanged"
                )
            saved.setdefault(CARRIED, []).append({"at": len(parts), "part": stored})
        elif isinstance(part, pai.SystemPromptPart):
            _, parts, saved = self.segment(segments, "system")
            baseline = pai.SystemPromptPart(part.content)
            fields = self.diff(part, baseline, skip=("content",))
            if fields:
                saved[str(len(parts))] = {"part": fields}
            parts.append(TextPart(text=part.content))
        elif isinstance(part, pai.UserPromptPart):
            _, parts, saved = self.segment(segments, "user")
            self.user_prompt(m, p, part, siblings, parts, saved)
        elif isinstance(part, pai.ToolReturnPart) and part.part_kind == "tool-return":
            _, parts, saved = self.segment(segments, "user")
            _refuse_nested(m, p, part.content)
            content, files = _split_files(part.content)
            is_error = part.outcome in FAILED_OUTCOMES
            name = self.names.get(part.tool_call_id)
            baseline = pai.ToolReturnPart(
                name or "",
                part.content,
                part.tool_call_id,
                outcome="failed" if is_error else "success",
            )
            fields = self.diff(part, baseline, skip=("content", "tool_call_id"))
            if name is None:
                fields["tool_name"] = part.tool_name
            if fields:
                saved[str(len(parts))] = {"part": fields}
            try:
                result = ToolResultPart(
                    tool_use_id=part.tool_call_id, content=content, is_error=is_error
                )
            except TranscriptError as e:
                raise theirs_unconvertible(
                    m, p, "tool-return", f"{e.field}: expected {e.expected}"
                ) from e
            if files is not None:  # its files follow the segment's tool results, as parts
                entry: dict[str, Any] = {**files[0], "parts": []}
                saved.setdefault(str(len(parts)), {})["files"] = entry
                self.pending.extend((m, p, item, entry) for item in files[1])
            parts.append(result)
        elif isinstance(part, pai.RetryFeedbackPart):
            _, parts, saved = self.segment(segments, "user")
            feedback = self.diff(
                part, pai.RetryFeedbackPart("", retry=pai.RetryInfo("model_retry"))
            )
            feedback.setdefault("content", "")
            saved[str(len(parts))] = {"retry_feedback": feedback}
            parts.append(TextPart(text=part.model_response()))
        else:
            raise theirs_unconvertible(
                m, p, part.part_kind, "agentledger transcripts have no such part"
            )

    def user_prompt(
        self,
        m: int,
        p: int,
        part: pai.UserPromptPart,
        siblings: Sequence[Any],
        parts: list[Part],
        saved: dict[str, Any],
    ) -> None:
        items = [part.content] if isinstance(part.content, str) else list(part.content)
        if not items:
            raise theirs_unconvertible(
                m, p, "user-prompt", "an empty user prompt has no part to hold it"
            )
        first = len(parts)
        for item in items:
            part_saved: dict[str, Any] = {}
            parts.append(self.user_item(m, p, item, part_saved))
            if part_saved:
                saved[str(len(parts) - 1)] = {"item": part_saved}
        prompt: dict[str, Any] = {}
        fields = self.diff(part, pai.UserPromptPart(""), skip=("content",))
        if fields:
            prompt["part"] = fields
        if isinstance(part.content, str) != (len(items) == 1 and isinstance(items[0], str)):
            prompt["str"] = isinstance(part.content, str)
        following = siblings[p + 1] if p + 1 < len(siblings) else None
        if isinstance(following, pai.UserPromptPart):
            prompt["items"] = len(items)  # where this prompt ends: it is not merged with the next
        if prompt:
            saved.setdefault(str(first), {}).update(prompt)

    def user_item(self, m: int, p: int, item: Any, saved: dict[str, Any]) -> Part:
        if isinstance(item, str):
            return TextPart(text=item)
        if type(item) is pai.TextContent:  # text with application metadata the model never sees
            saved["text_content"] = {
                "metadata": JSON_ADAPTER.dump_python(item.metadata, mode="json")
            }
            if JSON_ADAPTER.validate_python(saved["text_content"]["metadata"]) != item.metadata:
                raise theirs_unconvertible(
                    m, p, "user-prompt text-content", "its metadata is not plain JSON"
                )
            return TextPart(text=item.content)
        if isinstance(item, pai.UploadedFile):
            return self.uploaded(m, p, item, saved)
        if isinstance(item, pai.CachePoint):
            if item.ttl != "5m":
                saved["ttl"] = item.ttl
            return CacheCheckpointPart()
        if isinstance(item, pai.BinaryContent | pai.ImageUrl | pai.DocumentUrl):
            return self.file(m, p, item, saved)
        kind = getattr(item, "kind", type(item).__name__)
        raise theirs_unconvertible(
            m, p, f"user-prompt {kind}", "agentledger has no such user content"
        )

    @staticmethod
    def uploaded(m: int, p: int, item: pai.UploadedFile, saved: dict[str, Any]) -> Part:
        """A file uploaded to a provider: an image or document named by its file id."""
        saved["uploaded"] = {
            "provider_name": item.provider_name,
            "media_type": item._media_type,
            "identifier": item._identifier,
        }
        if item.vendor_metadata is not None:
            saved["vendor_metadata"] = item.vendor_metadata
        image_format = IMAGE_FORMATS.get(item.media_type)
        if image_format is not None:
            return ImagePart(format=image_format, url=item.file_id)  # type: ignore[arg-type]
        return DocumentPart(
            name=item.identifier,
            format=DOCUMENT_FORMATS.get(item.media_type, ""),
            uri=item.file_id,
        )

    @staticmethod
    def file(m: int, p: int, item: Any, saved: dict[str, Any], origin: str = "user-prompt") -> Part:
        """An image or document (inline or by URL), saving what agentledger has no field for.

        ``origin`` names where the file sat (a user prompt, a tool return, a
        model's file part) in a refusal.
        """
        inline = isinstance(item, pai.BinaryContent)
        media_type = item.media_type
        if not inline and item._media_type is None:
            saved["media_type"] = None  # inferred from the URL, and so it stays
        if item.vendor_metadata is not None:
            saved["vendor_metadata"] = item.vendor_metadata
        if not inline and item.force_download is not False:
            saved["force_download"] = item.force_download
        kind = f"{origin} {item.kind}"
        if isinstance(item, pai.ImageUrl) or (inline and media_type.startswith("image/")):
            image_format = IMAGE_FORMATS.get(media_type)
            if image_format is None:
                raise theirs_unconvertible(
                    m, p, kind, f"{media_type} is not png, jpeg, gif or webp"
                )
            if isinstance(item, pai.BinaryImage):
                saved["narrowed"] = True
            if item._identifier not in (None, computed_identifier(item)):
                saved["identifier"] = item._identifier
            if inline:
                return ImagePart(format=image_format, data=item.data)  # type: ignore[arg-type]
            return ImagePart(format=image_format, url=item.url)  # type: ignore[arg-type]
        document_format = DOCUMENT_FORMATS.get(media_type)
        if document_format is None or not isinstance(item, pai.BinaryContent | pai.DocumentUrl):
            raise theirs_unconvertible(
                m, p, kind, f"{media_type} is no image or document agentledger holds"
            )
        if item._identifier is None:
            saved["identifier"] = None  # the name is pydantic-ai's computed identifier
        if isinstance(item, pai.BinaryContent):
            return DocumentPart(name=item.identifier, format=document_format, data=item.data)
        return DocumentPart(name=item.identifier, format=document_format, uri=item.url)

    def response_part(self, m: int, p: int, part: Any, segment: Segment) -> None:
        _, parts, saved = segment
        kind = part.part_kind
        baseline: Any
        if kind == "text":
            fields = self.diff(part, pai.TextPart(part.content), skip=("content",))
            parts.append(TextPart(text=part.content))
        elif kind == "thinking":
            ours, details = split_provider_details(part)
            cleaned = dataclasses.replace(part, provider_details=details)
            baseline = pai.ThinkingPart(part.content, signature=part.signature or None)
            fields = self.diff(cleaned, baseline, skip=("content",))
            try:
                parts.append(
                    ThinkingPart(
                        text=part.content,
                        signature=part.signature or "",
                        index=ours.get("index", p),
                        final=ours.get("final", True),
                    )
                )
            except TranscriptError as e:
                raise theirs_unconvertible(m, p, kind, f"{e.field}: expected {e.expected}") from e
        elif kind == "tool-call":
            ours, details = split_provider_details(part)
            cleaned = dataclasses.replace(part, provider_details=details)
            try:
                arguments = parse_tool_args(part.args)
                use = ToolUsePart(
                    id=part.tool_call_id,
                    name=part.tool_name,
                    input=arguments,
                    thought_signature=ours.get("thought_signature", ""),
                )
            except (ValueError, TranscriptError) as e:
                raise theirs_unconvertible(m, p, kind, str(e)) from e
            baseline = pai.ToolCallPart(part.tool_name, arguments, part.tool_call_id)
            fields = self.diff(cleaned, baseline, skip=("tool_call_id",))
            self.names[part.tool_call_id] = part.tool_name
            parts.append(use)
        elif kind == "file" and isinstance(part.content, pai.BinaryContent):
            item: dict[str, Any] = {}
            image = self.file(m, p, part.content, item, "file")
            if not isinstance(image, ImagePart):
                raise theirs_unconvertible(
                    m, p, kind, "a model response holds images only, not documents"
                )
            fields = self.diff(part, pai.FilePart(part.content), skip=("content",))
            if item:
                saved[str(len(parts))] = {"item": item}
            parts.append(image)
        else:
            raise theirs_unconvertible(m, p, kind, "agentledger transcripts have no such part")
        if fields:
            saved.setdefault(str(len(parts) - 1), {})["part"] = fields


def _stamp(value: Any) -> datetime | None:
    """The time ``metadata[STAMPED]`` names; None if it names none."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def from_pydantic_ai(model_messages: Sequence[Any], *, timestamps: bool = True) -> list[Message]:
    """The transcript for a pydantic-ai message history, part for part.

    A ``ModelRequest`` holding a system prompt and a user prompt becomes a
    system message and a user message (``to_pydantic_ai`` joins them again).
    With ``timestamps=False`` the times pydantic-ai stamps on every request part
    and response are left out of ``meta`` (the rest is still kept).

    Raises:
        TranscriptError: a part agentledger cannot carry (a native tool call,
            audio, a tool result that is not plain JSON...), named by message
            and part index.
    """
    decoder = _Decoder(timestamps)
    for m, message in enumerate(model_messages):
        decoder.message(m, message)
    return decoder.out
