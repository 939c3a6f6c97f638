"""Lossless conversion between agentledger transcripts and pydantic-ai message history.

``to_pydantic_ai(messages)`` and ``from_pydantic_ai(model_messages)`` map part
for part, in order (DESIGN section 13):

==========================================  ==============================================
agentledger                                 pydantic-ai
==========================================  ==============================================
system ``TextPart``                         ``SystemPromptPart``
user ``TextPart``/``ImagePart``/            ``UserPromptPart`` content: ``str``,
``DocumentPart`` (data or uri)/             ``BinaryContent``/``ImageUrl``/``DocumentUrl``,
``CacheCheckpointPart``                     ``CachePoint``
user ``ToolResultPart``                     ``ToolReturnPart`` (``is_error`` = failed or retried)
user ``TextPart`` (the text the model saw)  ``RetryFeedbackPart`` (a retry prompt)
assistant ``TextPart``                      ``TextPart``
assistant ``ThinkingPart``                  ``ThinkingPart`` (text, signature)
assistant ``ToolUsePart``                   ``ToolCallPart`` (same id)
assistant ``ImagePart`` (data)              ``FilePart``
==========================================  ==============================================

What only pydantic-ai has (timestamps, usage, model names, provider ids, a
retried outcome, instructions...) rides in ``Message.meta["pydantic_ai"]``; what
only agentledger has (a thinking block's provider ``index`` when it is not the
part's position, an unfinished block, a Gemini ``thought_signature``) rides in
the pydantic-ai part's ``provider_details["agentledger"]``; other ``meta`` rides
in the pydantic-ai message's ``metadata["agentledger_meta"]``. The times
``to_pydantic_ai`` stamps on parts the transcript gave none are named in the
message's ``metadata["agentledger_stamped"]``, so ``from_pydantic_ai`` does
not take them for pydantic-ai's own. So both directions are exact, and a
part one side has no place for at all (a redacted thinking block, citations,
a text document, audio, a native tool call...) is a
`~agentledger.errors.TranscriptError` naming it, never a silent drop.

Needs pydantic-ai: ``pip install 'agentledger[pydantic-ai]'``.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, TypeAlias

try:
    import pydantic
    from pydantic_ai import messages as pai
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "agentledger.contrib.pydantic_ai needs pydantic-ai: pip install 'agentledger[pydantic-ai]'"
    ) from e

import msgspec

from agentledger.errors import TranscriptError
from agentledger.providers._json import loads
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

__all__ = ["from_pydantic_ai", "to_pydantic_ai"]

META = "pydantic_ai"
"""The key of ``Message.meta`` holding what only pydantic-ai has."""
FOREIGN = "agentledger_meta"
"""The key of a pydantic-ai message's ``metadata`` holding the rest of ``Message.meta``."""
STAMPED = "agentledger_stamped"
"""The key of a pydantic-ai message's ``metadata`` holding the time ``to_pydantic_ai``
stamped on it (ISO 8601): a field with that time was never in the transcript."""
DETAILS = "agentledger"
"""The key of a pydantic-ai part's ``provider_details`` holding what only agentledger has."""

ModelMessage: TypeAlias = pai.ModelRequest | pai.ModelResponse
_IMAGE_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}
_IMAGE_FORMATS = {media: fmt for fmt, media in _IMAGE_TYPES.items()}
_DOCUMENT_TYPES = {
    "pdf": "application/pdf",
    "txt": "text/plain",
    "csv": "text/csv",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "html": "text/html",
    "md": "text/markdown",
    "doc": "application/msword",
    "xls": "application/vnd.ms-excel",
}
_DOCUMENT_FORMATS = {media: fmt for fmt, media in _DOCUMENT_TYPES.items()}
_ERROR_OUTCOMES = frozenset(pai.ERROR_OUTCOMES)
_USER_CONTENT = (TextPart, ImagePart, DocumentPart, CacheCheckpointPart)
_JSON: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Any)
_CARRIED_IN_META = (pai.ToolAvailabilityDeltaPart,)
_CARRIED = "carried"
"""Request parts with no transcript part and nothing for a model to read: kept in ``meta``."""
_REQUEST_PART: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(pai.ModelRequestPart)


def _kind(part: Part) -> str:
    return str(part.__struct_config__.tag)


def _cannot(where: str, got: str, why: str, message_index: int, part_index: int) -> TranscriptError:
    return TranscriptError(
        field=where,
        expected="a part the other side can carry",
        got=got,
        message=why,
        message_index=message_index,
        part_index=part_index,
    )


def _ours(message_index: int, part_index: int, part: Part, why: str) -> TranscriptError:
    """An agentledger part pydantic-ai cannot carry."""
    return _cannot(
        f"messages[{message_index}].parts[{part_index}]",
        _kind(part),
        f"pydantic-ai cannot carry a {_kind(part)} part: {why}",
        message_index,
        part_index,
    )


def _theirs(message_index: int, part_index: int, kind: str, why: str) -> TranscriptError:
    """A pydantic-ai part agentledger cannot carry."""
    return _cannot(
        f"model_messages[{message_index}].parts[{part_index}]",
        kind,
        f"agentledger cannot carry a pydantic-ai {kind} part: {why}",
        message_index,
        part_index,
    )


# ----------------------------------------------------------------- pydantic-ai's own fields


_FIELDS: dict[str, dict[str, pydantic.TypeAdapter[Any]]] = {}


def _fields(cls: Any) -> dict[str, pydantic.TypeAdapter[Any]]:
    """A dataclass's constructor fields and the adapter that writes each as JSON (cached)."""
    key = f"{cls.__module__}.{cls.__qualname__}"
    fields = _FIELDS.get(key)
    if fields is None:
        hints = typing.get_type_hints(cls)
        fields = _FIELDS[key] = {
            f.name: pydantic.TypeAdapter(hints[f.name])
            for f in dataclasses.fields(cls)
            if f.init and not f.name.startswith("_") and f.name not in ("part_kind", "kind")
        }
    return fields


def _differences(
    actual: Any, baseline: Any, skip: Iterable[str], timestamps: bool, stamp: datetime | None
) -> dict[str, Any]:
    """The fields of ``actual`` that the rebuilt ``baseline`` does not have, as JSON
    (a timestamp equal to ``stamp``, which ``to_pydantic_ai`` made up, is not one)."""
    out: dict[str, Any] = {}
    for name, adapter in _fields(type(actual)).items():
        if name in skip:
            continue
        value = getattr(actual, name)
        if name == "timestamp":
            if timestamps and value is not None and value != stamp:
                out[name] = adapter.dump_python(value, mode="json")
        elif value != getattr(baseline, name):
            out[name] = adapter.dump_python(value, mode="json")
    return out


def _restore(obj: Any, saved: Mapping[str, Any], where: str) -> Any:
    """``obj`` with the fields ``saved`` by `_differences` put back."""
    if not saved:
        return obj
    fields = _fields(type(obj))
    changes: dict[str, Any] = {}
    for name, value in saved.items():
        adapter = fields.get(name)
        if adapter is None:
            raise TranscriptError(
                field=f"{where}.{name}", expected=f"a field of {type(obj).__name__}", got=name
            )
        try:
            changes[name] = adapter.validate_python(value)
        except pydantic.ValidationError as e:
            raise TranscriptError(
                field=f"{where}.{name}", expected=f"a valid {name}", got=value
            ) from e
    return dataclasses.replace(obj, **changes)


def _details(part: Any, ours: Mapping[str, Any]) -> dict[str, Any] | None:
    """``provider_details`` carrying agentledger-only fields (``ours``) next to the provider's."""
    details = dict(part.provider_details or {})
    if ours:
        details[DETAILS] = dict(ours)
    return details or None


def _split_details(part: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The agentledger-only fields in ``provider_details`` and the provider's own rest."""
    details = dict(part.provider_details or {})
    ours = details.pop(DETAILS, None) or {}
    return ours, details or None


# ----------------------------------------------------------------- agentledger -> pydantic-ai


class _Meta(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """The shape of ``Message.meta["pydantic_ai"]``."""

    message: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {}
    continued: bool = False
    carried: list[dict[str, Any]] = []
    """Request parts with no transcript part, each ``{"at": index, "part": json}``."""


def _split_meta(index: int, message: Message) -> tuple[_Meta, dict[str, Any]]:
    meta = dict(message.meta or {})
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


def _metadata(foreign: Mapping[str, Any], stamp: str | None = None) -> dict[str, Any] | None:
    metadata: dict[str, Any] = {FOREIGN: dict(foreign)} if foreign else {}
    if stamp is not None:
        metadata[STAMPED] = stamp
    return metadata or None


def _computed_identifier(item: Any) -> str:
    """The identifier pydantic-ai computes for a file given none."""
    if isinstance(item, pai.BinaryContent):
        return pai.BinaryContent(item.data, media_type=item.media_type).identifier
    return str(type(item)(item.url).identifier)


def _image(part: ImagePart, saved: Mapping[str, Any]) -> Any:
    media_type = saved.get("media_type", _IMAGE_TYPES[part.format])
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
        raise _ours(m, p, part, "a document's context and cite have no place there")
    media_type = _DOCUMENT_TYPES.get(part.format)
    if media_type is None:
        raise _ours(m, p, part, f"format {part.format!r} is not one of {sorted(_DOCUMENT_TYPES)}")
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
    raise _ours(m, p, part, "only documents with data or a uri (text and chunks have no place)")


def _uploaded(m: int, p: int, part: ImagePart | DocumentPart, saved: Mapping[str, Any]) -> Any:
    """A pydantic-ai ``UploadedFile`` back from the image or document that names it."""
    file_id = part.url if isinstance(part, ImagePart) else part.uri
    if file_id is None:
        raise _ours(m, p, part, "an uploaded file is named by its url or uri")
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
            raise _ours(m, p, part, f"its saved cache TTL {ttl!r} is not 5m or 1h")
        return pai.CachePoint(ttl=ttl)
    raise _ours(m, p, part, "a user prompt holds text, images, documents and cache points")


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
            part = _REQUEST_PART.validate_python(saved.get("part"))
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
                parts=parts, timestamp=self.stamp, metadata=_metadata(foreign)
            )
            self.out.append(self.marked(_restore(response, ours.message, where)))
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
        request = pai.ModelRequest(parts=parts, metadata=_metadata(foreign))
        self.out.append(self.marked(_restore(request, ours.message, where)))

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
                    raise _ours(m, p, part, "a system prompt holds only text")
                prompt: Any = pai.SystemPromptPart(part.text, timestamp=self.stamp)
                parts.append(_restore(prompt, saved.get("part", {}), where))
            elif isinstance(part, ToolResultPart):
                content = self.tool_files(m, p, message, part, saved, ours)
                parts.append(self.tool_return(m, p, part, content, saved, where))
            elif isinstance(part, TextPart) and "retry_feedback" in saved:
                parts.append(self.retry_feedback(m, p, part, saved, where))
            elif isinstance(part, _USER_CONTENT):
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
                    if not all(isinstance(q, _USER_CONTENT) for q in message.parts[p:end]) or (
                        end <= p or end > len(message.parts)
                    ):
                        raise _ours(m, p, part, f"its saved prompt of {count!r} parts does not fit")
                items = [
                    _user_item(m, q, message.parts[q], ours.parts.get(str(q), {}).get("item", {}))
                    for q in range(p, end)
                ]
                as_str = len(items) == 1 and isinstance(items[0], str)
                if saved.get("str", as_str) and not as_str:
                    raise _ours(m, p, part, "it was saved as a text prompt but is not one text")
                content = items[0] if saved.get("str", as_str) else items
                prompt = pai.UserPromptPart(content, timestamp=self.stamp)
                parts.append(_restore(prompt, saved.get("part", {}), where))
                p = end
                continue
            else:
                raise _ours(m, p, part, f"a {message.role} message there holds no such part")
            p += 1
        parts.extend(carried.pop(len(message.parts), ()))
        return parts

    @staticmethod
    def plain_content(message: Message, ours: _Meta, index: int) -> bool:
        """Whether part ``index`` continues the user prompt before it (no prompt of its own)."""
        saved = ours.parts.get(str(index), {})
        return (
            isinstance(message.parts[index], _USER_CONTENT)
            and "items" not in saved
            and "retry_feedback" not in saved
        )

    def tool_files(
        self, m: int, p: int, message: Message, part: ToolResultPart, saved: Any, ours: _Meta
    ) -> Any:
        """A tool result's content with the files saved as later parts put back in place."""
        entry = saved.get("files")
        if entry is None:
            return part.content
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
            raise _ours(m, p, part, f"its saved files {entry!r} do not fit the message")
        files = [
            _user_item(m, q, message.parts[q], ours.parts.get(str(q), {}).get("item", {}))
            for q in indices
        ]
        self.files.update(indices)
        if not entry.get("list"):
            return files[0]
        content = list(part.content) if isinstance(part.content, list) else [part.content]
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
            raise _ours(m, p, part, f"no earlier tool call has id {part.tool_use_id!r}")
        tool = pai.ToolReturnPart(
            name or "",
            content,
            part.tool_use_id,
            timestamp=self.stamp,
            outcome="failed" if part.is_error else "success",
        )
        tool = _restore(tool, fields, where)
        if (tool.outcome in _ERROR_OUTCOMES) != part.is_error:
            raise _ours(m, p, part, f"is_error disagrees with the saved outcome {tool.outcome!r}")
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
        retry = _restore(retry, feedback, where)
        if retry.model_response() != part.text:
            raise _ours(m, p, part, "its text is no longer the retry feedback saved with it")
        return retry

    def response_part(self, m: int, p: int, part: Part, ours: _Meta) -> Any:
        saved = ours.parts.get(str(p), {})
        fields = saved.get("part", {})
        where = f"messages[{m}].meta.{META}.parts.{p}"
        if isinstance(part, TextPart):
            return _restore(pai.TextPart(part.text), fields, where)
        if isinstance(part, ThinkingPart):
            if part.redacted:
                raise _ours(m, p, part, "pydantic-ai has no redacted (encrypted) thinking bytes")
            extra: dict[str, Any] = {}
            if part.index != p:
                extra["index"] = part.index
            if not part.final:
                extra["final"] = False
            thinking = _restore(
                pai.ThinkingPart(part.text, signature=part.signature or None), fields, where
            )
            return dataclasses.replace(thinking, provider_details=_details(thinking, extra))
        if isinstance(part, ToolUsePart):
            self.names[part.id] = part.name
            args: Any = part.input
            if "args" in fields:
                args = fields["args"]
                if _parse_args(args) != part.input:
                    raise _ours(m, p, part, "its input is no longer the arguments saved with it")
            call = pai.ToolCallPart(part.name, args, part.id)
            call = _restore(call, {k: v for k, v in fields.items() if k != "args"}, where)
            extra = {"thought_signature": part.thought_signature} if part.thought_signature else {}
            return dataclasses.replace(call, provider_details=_details(call, extra))
        if isinstance(part, ImagePart) and part.data is not None:
            image = _image(part, saved.get("item", {}))
            return _restore(pai.FilePart(image), fields, where)
        raise _ours(m, p, part, "a model response holds text, thinking, tool calls and files")


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


# ----------------------------------------------------------------- pydantic-ai -> agentledger


def _split_files(content: Any) -> tuple[Any, tuple[dict[str, Any], list[Any]] | None]:
    """A tool return's JSON content, and its files with where they sat (None if it has none)."""
    if pai.is_multi_modal_content(content):
        return None, ({"at": [0], "list": False}, [content])
    if isinstance(content, list) and any(pai.is_multi_modal_content(c) for c in content):
        at = [i for i, c in enumerate(content) if pai.is_multi_modal_content(c)]
        data = [c for c in content if not pai.is_multi_modal_content(c)]
        return data, ({"at": at, "list": True}, [content[i] for i in at])
    return content, None


def _parse_args(args: Any) -> dict[str, Any]:
    """A tool call's arguments as a JSON object with exact numbers (text is parsed)."""
    if args is None:
        return {}
    if isinstance(args, str):
        try:
            value = loads(args) if args.strip() else {}
        except msgspec.DecodeError:
            value = None
        if not isinstance(value, dict):
            raise ValueError("tool-call arguments are not a JSON object")
        return value
    return dict(args)


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
        return _differences(actual, baseline, skip, self.timestamps, self.stamp)

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
            baseline: Any = pai.ModelResponse(parts=[], metadata=_metadata(foreign, stamp))
        elif isinstance(message, pai.ModelRequest):
            segments = []
            for p, request_part in enumerate(message.parts):
                self.request_part(m, p, request_part, message.parts, segments)
            self.flush_files(segments)
            if not segments:
                segments.append(("user", [], {}))
            baseline = pai.ModelRequest(parts=[], metadata=_metadata(foreign, stamp))
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
            carried = saved.pop(_CARRIED, None)
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
                file = self.file(m, p, item, item_saved)
            else:
                raise _theirs(m, p, f"tool-return {item.kind}", "agentledger has no such file part")
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
        if isinstance(part, _CARRIED_IN_META):
            _, parts, saved = segments[-1] if segments else self.segment(segments, "user")
            stored = _REQUEST_PART.dump_python(part, mode="json")
            if _REQUEST_PART.validate_python(stored) != part:
                raise _theirs(m, p, part.part_kind, "it does not read back from JSON unchanged")
            saved.setdefault(_CARRIED, []).append({"at": len(parts), "part": stored})
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
            content, files = _split_files(part.content)
            is_error = part.outcome in _ERROR_OUTCOMES
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
                raise _theirs(m, p, "tool-return", f"{e.field}: expected {e.expected}") from e
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
            raise _theirs(m, p, part.part_kind, "agentledger transcripts have no such part")

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
            raise _theirs(m, p, "user-prompt", "an empty user prompt has no part to hold it")
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
            saved["text_content"] = {"metadata": _JSON.dump_python(item.metadata, mode="json")}
            if _JSON.validate_python(saved["text_content"]["metadata"]) != item.metadata:
                raise _theirs(m, p, "user-prompt text-content", "its metadata is not plain JSON")
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
        raise _theirs(m, p, f"user-prompt {kind}", "agentledger has no such user content")

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
        image_format = _IMAGE_FORMATS.get(item.media_type)
        if image_format is not None:
            return ImagePart(format=image_format, url=item.file_id)  # type: ignore[arg-type]
        return DocumentPart(
            name=item.identifier,
            format=_DOCUMENT_FORMATS.get(item.media_type, ""),
            uri=item.file_id,
        )

    @staticmethod
    def file(m: int, p: int, item: Any, saved: dict[str, Any]) -> Part:
        """An image or document (inline or by URL), saving what agentledger has no field for."""
        inline = isinstance(item, pai.BinaryContent)
        media_type = item.media_type
        if not inline and item._media_type is None:
            saved["media_type"] = None  # inferred from the URL, and so it stays
        if item.vendor_metadata is not None:
            saved["vendor_metadata"] = item.vendor_metadata
        if not inline and item.force_download is not False:
            saved["force_download"] = item.force_download
        kind = f"user-prompt {item.kind}"
        if isinstance(item, pai.ImageUrl) or (inline and media_type.startswith("image/")):
            image_format = _IMAGE_FORMATS.get(media_type)
            if image_format is None:
                raise _theirs(m, p, kind, f"{media_type} is not png, jpeg, gif or webp")
            if isinstance(item, pai.BinaryImage):
                saved["narrowed"] = True
            if item._identifier not in (None, _computed_identifier(item)):
                saved["identifier"] = item._identifier
            if inline:
                return ImagePart(format=image_format, data=item.data)  # type: ignore[arg-type]
            return ImagePart(format=image_format, url=item.url)  # type: ignore[arg-type]
        document_format = _DOCUMENT_FORMATS.get(media_type)
        if document_format is None or not isinstance(item, pai.BinaryContent | pai.DocumentUrl):
            raise _theirs(m, p, kind, f"{media_type} is no image or document agentledger holds")
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
            ours, details = _split_details(part)
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
                raise _theirs(m, p, kind, f"{e.field}: expected {e.expected}") from e
        elif kind == "tool-call":
            ours, details = _split_details(part)
            cleaned = dataclasses.replace(part, provider_details=details)
            try:
                arguments = _parse_args(part.args)
                use = ToolUsePart(
                    id=part.tool_call_id,
                    name=part.tool_name,
                    input=arguments,
                    thought_signature=ours.get("thought_signature", ""),
                )
            except (ValueError, TranscriptError) as e:
                raise _theirs(m, p, kind, str(e)) from e
            baseline = pai.ToolCallPart(part.tool_name, arguments, part.tool_call_id)
            fields = self.diff(cleaned, baseline, skip=("tool_call_id",))
            self.names[part.tool_call_id] = part.tool_name
            parts.append(use)
        elif kind == "file" and isinstance(part.content, pai.BinaryContent):
            item: dict[str, Any] = {}
            image = self.file(m, p, part.content, item)
            if not isinstance(image, ImagePart):
                raise _theirs(m, p, kind, "a model response holds images only, not documents")
            fields = self.diff(part, pai.FilePart(part.content), skip=("content",))
            if item:
                saved[str(len(parts))] = {"item": item}
            parts.append(image)
        else:
            raise _theirs(m, p, kind, "agentledger transcripts have no such part")
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
