"""The parts a transcript message is made of ([T2]) and the invariants each one keeps.

Parts are immutable msgspec Structs tagged by ``kind`` in JSON. Each checks its
invariants in ``__post_init__``, which msgspec runs both when a caller builds a
part and when the codec decodes one, so a part that exists is a valid part.

A failed check raises a `TranscriptError`. The exception raised is `InvariantError`, a
subclass that is also a ``ValueError``: msgspec wraps a ``ValueError`` raised
while decoding with the JSON path of the part, which the codec turns back into a
`TranscriptError` naming that path (e.g. ``$.parts[2].data``).

JSON-valued fields (`ToolUsePart.input`, `ToolResultPart.content`,
`Citation.location`, and `Message.meta`) must hold plain JSON: ``dict`` with
``str`` keys, ``list``, ``str``, ``int``, ``bool``, ``None``, finite ``float`` and
finite ``Decimal`` (including `JsonNumber`). Anything else — NaN or infinity
(msgspec would write ``null``), a tuple (it would read back as a list), a non-str
key, a subclass, an arbitrary object — is refused, because it would not read back
as it was written. These containers are not frozen: mutating them after
construction bypasses the check.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from decimal import Decimal
from typing import Any, Literal, NoReturn, TypeAlias

import msgspec

from agentledger.errors import TranscriptError

__all__ = [
    "CacheCheckpointPart",
    "Citation",
    "CitationsPart",
    "DocumentPart",
    "ImagePart",
    "Part",
    "TextPart",
    "ThinkingPart",
    "ToolResultPart",
    "ToolUsePart",
]


_VERIFIED: ContextVar[bool] = ContextVar("agentledger_transcript_verified", default=False)
"""True only while the codec decodes stored bytes already checked on write.

Set and reset around one synchronous msgspec decode (see
``codec.decode_verified_messages``), so no caller code runs while it is set;
a context variable, so other threads and tasks never see it.
"""


checks_skipped: Callable[[], bool] = _VERIFIED.get
"""Whether constructors skip their checks now: only inside :func:`verified_decoding`.

The context variable's own ``get``, not a function wrapping it: every ``__post_init__``
calls it first, and a verified decode of 10,000 messages would otherwise spend more
time entering that wrapper than building the messages' parts.
"""


@contextlib.contextmanager
def verified_decoding() -> Iterator[None]:
    """Within it, parts and messages skip their constructor checks [R2].

    Only for one synchronous decode of bytes a verifying store returned (checked
    on write, checksummed on read): ``codec.decode_verified_messages``.
    """
    token = _VERIFIED.set(True)
    try:
        yield
    finally:
        _VERIFIED.reset(token)


class InvariantError(TranscriptError, ValueError):
    """A part (or message) invariant failed while building it.

    Also a ``ValueError`` so that msgspec, when decoding, reports it with the
    JSON path of the offending object instead of letting it escape without one.

    Attributes:
        relative_field: the field inside the object (``"data"``, ``"input.a[0]"``),
            which the codec appends to the JSON path.
    """

    def __init__(self, *, owner: str, relative_field: str, expected: str, got: object) -> None:
        super().__init__(field=f"{owner}.{relative_field}", expected=expected, got=got)
        self.relative_field = relative_field


def fail_invariant(owner: str, field: str, expected: str, got: object) -> NoReturn:
    """Raise the invariant error for ``owner.field``."""
    raise InvariantError(owner=owner, relative_field=field, expected=expected, got=got)


class _NotJson(Exception):
    """Internal: a value is not plain JSON; ``path`` is filled in while unwinding."""

    def __init__(self, expected: str, got: object) -> None:
        super().__init__(expected)
        self.expected = expected
        self.got = got
        self.path: list[str | int] = []


_FINITE = "a finite number (JSON has no NaN or infinity)"
_JSON_TYPES = "plain JSON (dict with str keys, list, str, int, float, Decimal, bool, None)"


_SCALARS = frozenset((str, int, bool, type(None)))


def _is_json(value: object) -> bool:
    """Fast check that ``value`` is plain JSON; recurses only into containers."""
    if type(value) in _SCALARS:
        return True
    if type(value) is dict:
        for key, item in value.items():
            if type(key) is not str:
                return False
            if type(item) not in _SCALARS and not _is_json(item):
                return False
        return True
    if type(value) is list:
        for item in value:  # noqa: SIM110 - an explicit loop beats all() on this hot path
            if type(item) not in _SCALARS and not _is_json(item):
                return False
        return True
    if type(value) is float:
        return math.isfinite(value)
    if isinstance(value, Decimal):
        return value.is_finite()
    return False


def _walk(value: object) -> None:
    """Find where ``value`` stops being plain JSON (the slow path, run only after a failure)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return
    if type(value) is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise _NotJson("str object keys", key)
            try:
                _walk(item)
            except _NotJson as bad:
                bad.path.append(key)
                raise
        return
    if type(value) is list:
        for index, item in enumerate(value):
            try:
                _walk(item)
            except _NotJson as bad:
                bad.path.append(index)
                raise
        return
    if type(value) is float:
        if math.isfinite(value):
            return
        raise _NotJson(_FINITE, value)
    if isinstance(value, Decimal):
        if value.is_finite():
            return
        raise _NotJson(_FINITE, value)
    raise _NotJson(_JSON_TYPES, value)


def _render(field: str, path: list[str | int]) -> str:
    """Turn a reversed list of keys and indexes into ``field.key[3]['odd key']``."""
    text = field
    for step in reversed(path):
        if isinstance(step, int):
            text += f"[{step}]"
        elif step.isidentifier():
            text += f".{step}"
        else:
            text += f"[{step!r}]"
    return text


def check_json(owner: str, field: str, value: object) -> None:
    """Raise the invariant error unless ``value`` is plain JSON (see the module docstring).

    Shared with `Message` so metadata obeys the same rule as tool input.
    """
    try:
        if _is_json(value):
            return
        _walk(value)
    except _NotJson as bad:
        fail_invariant(owner, _render(field, bad.path), bad.expected, bad.got)
    except RecursionError:
        pass
    # Too deep to check (or a container that holds itself).
    fail_invariant(owner, field, "JSON nested less deeply", "a value too deep to check")


def _check_str(owner: str, field: str, value: object, *, non_empty: bool = False) -> None:
    """Raise unless ``value`` is a str (and non-empty when asked)."""
    if not isinstance(value, str):
        fail_invariant(owner, field, "a str", value)
    if non_empty and not value:
        fail_invariant(owner, field, "a non-empty str", value)


def _check_bool(owner: str, field: str, value: object) -> None:
    """Raise unless ``value`` is a bool (not merely truthy)."""
    if type(value) is not bool:
        fail_invariant(owner, field, "a bool", value)


class _Part(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    omit_defaults=True,
    repr_omit_defaults=True,
    tag_field="kind",
):
    """Common options of every part: immutable, keyword-only, strict, tagged by ``kind``."""


class ThinkingPart(_Part, tag="thinking", frozen=True, gc=False):
    """Provider reasoning: signed text or redacted bytes, never shown to users.

    Kept so a later request can hand the provider its own reasoning back verbatim,
    which providers with extended thinking require around tool use.

    Invariants: ``text`` and ``redacted`` are mutually exclusive; at least one of
    ``text``, ``signature``, ``redacted`` is non-empty (Anthropic may send empty
    thinking text with only a signature); ``index >= 0``.
    """

    text: str = ""
    """The reasoning text; empty when only a signature or redacted bytes came."""
    signature: str = ""
    """The provider's signature over the reasoning, replayed unchanged."""
    redacted: bytes = b""
    """Encrypted reasoning the provider redacted (base64 in JSON)."""
    index: int = 0
    """Position of this block in the provider's response (>= 0)."""
    final: bool = False
    """True once the provider finished this block (streams deliver it in pieces)."""

    def __post_init__(self) -> None:
        if checks_skipped():
            return
        _check_str("ThinkingPart", "text", self.text)
        _check_str("ThinkingPart", "signature", self.signature)
        if not isinstance(self.redacted, bytes):
            fail_invariant("ThinkingPart", "redacted", "bytes", self.redacted)
        if type(self.index) is not int or self.index < 0:
            fail_invariant("ThinkingPart", "index", "an int >= 0", self.index)
        _check_bool("ThinkingPart", "final", self.final)
        if self.text and self.redacted:
            fail_invariant("ThinkingPart", "redacted", "empty when text is set", self.redacted)
        if not (self.text or self.signature or self.redacted):
            fail_invariant("ThinkingPart", "text", "one of text, signature, redacted non-empty", "")


class TextPart(_Part, tag="text", frozen=True, gc=False):
    """Plain text written by a user, the system prompt or the model.

    The most common part; providers all carry it directly.
    """

    text: str
    """The text, as written (may be empty)."""

    def __post_init__(self) -> None:
        if checks_skipped():
            return
        _check_str("TextPart", "text", self.text)


ImageFormat: TypeAlias = Literal["png", "jpeg", "gif", "webp"]
_IMAGE_FORMATS = frozenset(("png", "jpeg", "gif", "webp"))


class ImagePart(_Part, tag="image", frozen=True, gc=False):
    """An image, inline as bytes or by URL (exactly one of ``data`` and ``url``).

    Providers take either form; holding both would leave it unclear which one is meant.
    """

    format: ImageFormat
    """Image encoding: ``png``, ``jpeg``, ``gif`` or ``webp``."""
    data: bytes | None = None
    """The image bytes (base64 in JSON), non-empty; or None when ``url`` is set."""
    url: str | None = None
    """Where the image lives, non-empty; or None when ``data`` is set."""

    def __post_init__(self) -> None:
        if checks_skipped():
            return
        if not isinstance(self.format, str) or self.format not in _IMAGE_FORMATS:
            fail_invariant("ImagePart", "format", "one of png, jpeg, gif, webp", self.format)
        if (self.data is None) == (self.url is None):
            got = "both" if self.data is not None else "neither"
            fail_invariant("ImagePart", "data", "exactly one of data and url", got)
        if self.data is not None and (not isinstance(self.data, bytes) or not self.data):
            fail_invariant("ImagePart", "data", "non-empty bytes", self.data)
        if self.url is not None:
            _check_str("ImagePart", "url", self.url, non_empty=True)


_DOCUMENT_SOURCES = ("data", "text", "chunks", "uri")


class DocumentPart(_Part, tag="document", frozen=True, gc=False):
    """A document handed to the model: bytes, text, pre-split chunks or a URI (exactly one).

    ``name`` is required because providers (Bedrock) demand one and citations refer to it.
    """

    name: str
    """A non-empty name for the document, unique within the request."""
    format: str = ""
    """File format such as pdf, csv, doc, docx, xls, xlsx, html, txt, md ("" = unknown)."""
    data: bytes | None = None
    """The raw document bytes (base64 in JSON), non-empty."""
    text: str | None = None
    """The document as plain text, non-empty."""
    chunks: tuple[str, ...] | None = None
    """The document already split into text chunks (at least one)."""
    uri: str | None = None
    """Where the document lives (e.g. an s3:// or https:// URI), non-empty."""
    context: str = ""
    """Extra context about the document for the model."""
    cite: bool = False
    """Whether the model should cite this document."""

    def __post_init__(self) -> None:
        if checks_skipped():
            return
        _check_str("DocumentPart", "name", self.name, non_empty=True)
        _check_str("DocumentPart", "format", self.format)
        _check_str("DocumentPart", "context", self.context)
        _check_bool("DocumentPart", "cite", self.cite)
        given = [name for name in _DOCUMENT_SOURCES if getattr(self, name) is not None]
        if len(given) != 1:
            fail_invariant("DocumentPart", "data", "exactly one of data, text, chunks, uri", given)
        if self.data is not None and (not isinstance(self.data, bytes) or not self.data):
            fail_invariant("DocumentPart", "data", "non-empty bytes", self.data)
        if self.text is not None:
            _check_str("DocumentPart", "text", self.text, non_empty=True)
        if self.uri is not None:
            _check_str("DocumentPart", "uri", self.uri, non_empty=True)
        if self.chunks is not None:
            if type(self.chunks) is not tuple or not self.chunks:
                fail_invariant("DocumentPart", "chunks", "a non-empty tuple of str", self.chunks)
            for index, chunk in enumerate(self.chunks):
                _check_str("DocumentPart", f"chunks[{index}]", chunk)


class Citation(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    omit_defaults=True,
    repr_omit_defaults=True,
):
    """Where a piece of cited text came from.

    Providers describe locations differently (page ranges, character spans,
    URLs), so ``location`` is free-form JSON rather than one fixed shape.
    """

    title: str = ""
    """Title of the cited source."""
    source: str = ""
    """Name or URL of the cited source (e.g. a DocumentPart name)."""
    location: dict[str, Any] | None = None
    """Provider-specific position inside the source (plain JSON object)."""
    source_content: tuple[str, ...] = ()
    """The cited passages, verbatim."""

    def __post_init__(self) -> None:
        if checks_skipped():
            return
        _check_str("Citation", "title", self.title)
        _check_str("Citation", "source", self.source)
        if self.location is not None:
            if type(self.location) is not dict:
                fail_invariant(
                    "Citation", "location", "a JSON object (dict) or None", self.location
                )
            check_json("Citation", "location", self.location)
        if type(self.source_content) is not tuple:
            fail_invariant("Citation", "source_content", "a tuple of str", self.source_content)
        for index, passage in enumerate(self.source_content):
            _check_str("Citation", f"source_content[{index}]", passage)


class CitationsPart(_Part, tag="citations", frozen=True):
    """Model text backed by citations into documents or search results.

    Kept apart from `TextPart` so the sources travel with the sentence they support.
    """

    text: str
    """The cited text as the model wrote it."""
    citations: tuple[Citation, ...]
    """The sources supporting ``text``, in provider order."""

    def __post_init__(self) -> None:
        if checks_skipped():
            return
        _check_str("CitationsPart", "text", self.text)
        if type(self.citations) is not tuple:
            fail_invariant("CitationsPart", "citations", "a tuple of Citation", self.citations)
        for index, citation in enumerate(self.citations):
            if not isinstance(citation, Citation):
                fail_invariant("CitationsPart", f"citations[{index}]", "a Citation", citation)


class ToolUsePart(_Part, tag="tool_use", frozen=True):
    """A tool call the model asked for; answered by a `ToolResultPart` with the same id.

    ``input`` is kept as exact JSON so replaying the call sends the same arguments.
    """

    id: str
    """The provider's call id (non-empty, unique in a transcript)."""
    name: str
    """The canonical tool id (non-empty)."""
    input: dict[str, Any]
    """The call's arguments: a plain JSON object."""
    thought_signature: str = ""
    """Provider signature tying the call to the model's reasoning (Gemini), replayed unchanged."""

    def __post_init__(self) -> None:
        if checks_skipped():
            return
        _check_str("ToolUsePart", "id", self.id, non_empty=True)
        _check_str("ToolUsePart", "name", self.name, non_empty=True)
        _check_str("ToolUsePart", "thought_signature", self.thought_signature)
        if type(self.input) is not dict:
            fail_invariant("ToolUsePart", "input", "a JSON object (dict)", self.input)
        check_json("ToolUsePart", "input", self.input)


class ToolResultPart(_Part, tag="tool_result", frozen=True):
    """The outcome of one tool call, sent back to the model in the next user message.

    ``content`` is any JSON value (error text when ``is_error``), kept exact.
    """

    tool_use_id: str
    """Id of the `ToolUsePart` this answers (non-empty)."""
    content: Any
    """The result: any plain JSON value; the error message when ``is_error``."""
    is_error: bool = False
    """True when the tool failed and ``content`` describes the failure."""

    def __post_init__(self) -> None:
        if checks_skipped():
            return
        _check_str("ToolResultPart", "tool_use_id", self.tool_use_id, non_empty=True)
        _check_bool("ToolResultPart", "is_error", self.is_error)
        check_json("ToolResultPart", "content", self.content)


class CacheCheckpointPart(_Part, tag="cache_checkpoint", frozen=True, gc=False):
    """A prompt-cache boundary: providers may cache everything before it.

    A marker, not content; it carries no fields.
    """


Part: TypeAlias = (
    ThinkingPart
    | TextPart
    | ImagePart
    | DocumentPart
    | CitationsPart
    | ToolUsePart
    | ToolResultPart
    | CacheCheckpointPart
)
"""Any transcript part; decoded by its ``kind`` tag."""

PART_TYPES: tuple[type[_Part], ...] = (
    ThinkingPart,
    TextPart,
    ImagePart,
    DocumentPart,
    CitationsPart,
    ToolUsePart,
    ToolResultPart,
    CacheCheckpointPart,
)
"""The part classes, for isinstance checks (same members as `Part`)."""
