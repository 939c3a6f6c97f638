"""Hypothesis strategies for transcripts: JSON values, every part kind, messages, valid transcripts.

Shared so that codec, validator and (later) storage and provider tests draw
from one definition of what a transcript can hold.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import strategies as st

from agentledger.transcript import (
    CacheCheckpointPart,
    Citation,
    CitationsPart,
    DocumentPart,
    ImagePart,
    JsonNumber,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
)

__all__ = [
    "cache_checkpoint_parts",
    "citations_parts",
    "document_parts",
    "image_parts",
    "json_numbers",
    "json_objects",
    "json_values",
    "message_lists",
    "messages",
    "parts",
    "planner_transcripts",
    "text_parts",
    "texts",
    "thinking_parts",
    "tool_result_parts",
    "tool_use_parts",
]

# Short text over an alphabet that exercises JSON escaping and multi-byte UTF-8 (quotes,
# backslash, control characters, U+2028, non-BMP); sampling it is much cheaper than
# st.characters(), which keeps the property tests fast.
_ALPHABET = st.sampled_from(list('ab Z09_-"\\/\x00\n\t\x7fé€\u2028中😀'))
texts = st.text(_ALPHABET, max_size=8)
non_empty_texts = st.text(_ALPHABET, min_size=1, max_size=8)


@st.composite
def _number_literals(draw: st.DrawFn) -> str:
    """A JSON number literal with a fraction, an exponent or both."""
    sign = draw(st.sampled_from(["", "-"]))
    whole = draw(st.sampled_from(["0"]) | st.from_regex(r"[1-9][0-9]{0,24}", fullmatch=True))
    fraction = draw(st.none() | st.from_regex(r"[0-9]{1,24}", fullmatch=True))
    exponent = draw(st.none() | st.from_regex(r"[eE][+-]?[0-9]{1,3}", fullmatch=True))
    if fraction is None and exponent is None:
        fraction = "0"
    return sign + whole + (f".{fraction}" if fraction else "") + (exponent or "")


json_numbers = _number_literals().map(JsonNumber)
"""JsonNumbers such as ``0.1``, ``-0.0``, ``1e400``, ``123.4560E-07``."""

_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | json_numbers
    | texts
)

json_values: st.SearchStrategy[Any] = st.recursive(
    _json_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=5,
)
"""Any plain JSON value, including big ints, floats and exact JsonNumbers."""

json_objects: st.SearchStrategy[dict[str, Any]] = st.dictionaries(texts, json_values, max_size=3)


@st.composite
def thinking_parts(draw: st.DrawFn) -> ThinkingPart:
    """A ThinkingPart in one of its three valid shapes: text, signature only, redacted."""
    shape = draw(st.sampled_from(["text", "signature", "redacted"]))
    index = draw(st.integers(min_value=0, max_value=50))
    final = draw(st.booleans())
    if shape == "text":
        return ThinkingPart(
            text=draw(non_empty_texts), signature=draw(texts), index=index, final=final
        )
    if shape == "signature":
        return ThinkingPart(signature=draw(non_empty_texts), index=index, final=final)
    return ThinkingPart(
        redacted=draw(st.binary(min_size=1, max_size=16)),
        signature=draw(texts),
        index=index,
        final=final,
    )


text_parts = st.builds(TextPart, text=texts)
_image_formats = st.sampled_from(["png", "jpeg", "gif", "webp"])
image_parts = st.builds(
    ImagePart, format=_image_formats, data=st.binary(min_size=1, max_size=16)
) | st.builds(ImagePart, format=_image_formats, url=non_empty_texts)


@st.composite
def document_parts(draw: st.DrawFn) -> DocumentPart:
    """A DocumentPart with exactly one source."""
    source = draw(st.sampled_from(["data", "text", "chunks", "uri"]))
    value: object = {
        "data": st.binary(min_size=1, max_size=16),
        "text": non_empty_texts,
        "chunks": st.lists(texts, min_size=1, max_size=3).map(tuple),
        "uri": non_empty_texts,
    }[source]
    return DocumentPart(
        name=draw(non_empty_texts),
        format=draw(st.sampled_from(["", "pdf", "csv", "docx", "html", "txt", "md"])),
        context=draw(texts),
        cite=draw(st.booleans()),
        **{source: draw(value)},  # type: ignore[arg-type]
    )


citations = st.builds(
    Citation,
    title=texts,
    source=texts,
    location=st.none() | json_objects,
    source_content=st.lists(texts, max_size=2).map(tuple),
)
citations_parts = st.builds(
    CitationsPart, text=texts, citations=st.lists(citations, max_size=2).map(tuple)
)
tool_use_parts = st.builds(
    ToolUsePart,
    id=non_empty_texts,
    name=non_empty_texts,
    input=json_objects,
    thought_signature=texts,
)
tool_result_parts = st.builds(
    ToolResultPart, tool_use_id=non_empty_texts, content=json_values, is_error=st.booleans()
)
cache_checkpoint_parts = st.just(CacheCheckpointPart())

parts: st.SearchStrategy[Part] = st.one_of(
    thinking_parts(),
    text_parts,
    image_parts,
    document_parts(),
    citations_parts,
    tool_use_parts,
    tool_result_parts,
    cache_checkpoint_parts,
)
"""Any part of any kind (no ordering or pairing rules: codec-level data)."""

messages = st.builds(
    Message,
    role=st.sampled_from(["system", "user", "assistant"]),
    parts=st.lists(parts, max_size=4).map(tuple),
    meta=st.none() | json_objects,
)
"""Any structurally valid message (not necessarily a valid planner transcript)."""

message_lists = st.lists(messages, max_size=3)

# Validators look at kinds, ids and order, not at content: planner transcripts draw
# from small fixed pools so that generating them stays cheap.
_user_content: st.SearchStrategy[Part] = st.sampled_from(
    [
        TextPart(text="hi"),
        ImagePart(format="png", data=b"\x89PNG"),
        DocumentPart(name="doc", text="body"),
        CacheCheckpointPart(),
    ]
)
_assistant_content: st.SearchStrategy[Part] = st.sampled_from(
    [TextPart(text="ok"), CitationsPart(text="see", citations=(Citation(source="doc"),))]
)
_thinking: st.SearchStrategy[Part] = st.sampled_from(
    [
        ThinkingPart(text="plan", signature="s"),
        ThinkingPart(signature="s"),
        ThinkingPart(redacted=b"x"),
    ]
)
_inputs: st.SearchStrategy[dict[str, Any]] = st.sampled_from(
    [{}, {"q": "x"}, {"n": [1, 2.5], "deep": {"k": None}}]
)
_contents: st.SearchStrategy[Any] = st.sampled_from(["ok", 3, None, {"rows": [1, 2]}, ["a", 0.5]])


@st.composite
def _assistant_message(
    draw: st.DrawFn, ids: itertools.count[int], thinking_first: bool
) -> tuple[Message, list[str]]:
    """An assistant message, with or without tool uses, in [T3] order."""
    body: list[Part]
    if not draw(st.booleans()):
        body = draw(st.lists(st.one_of(_thinking, _assistant_content), min_size=1, max_size=3))
        if thinking_first and not isinstance(body[0], ThinkingPart):
            body.insert(0, draw(_thinking))
        return Message(role="assistant", parts=tuple(body)), []
    low = 1 if thinking_first else 0
    body = draw(st.lists(_thinking, min_size=low, max_size=2))
    body += draw(st.lists(_assistant_content, max_size=1))
    calls = [f"toolu_{next(ids)}" for _ in range(draw(st.integers(min_value=1, max_value=3)))]
    body += [ToolUsePart(id=i, name="lookup", input=draw(_inputs)) for i in calls]
    if draw(st.booleans()):
        body.append(CacheCheckpointPart())
    return Message(role="assistant", parts=tuple(body)), calls


@st.composite
def planner_transcripts(draw: st.DrawFn, thinking_first: bool = False) -> list[Message]:
    """A transcript that satisfies every planner rule ([T3], [T5]).

    Leading system messages, then turns of (user message, assistant group); a
    group's tool uses are answered, results first and in any order, by the next
    user message, the last group included. With
    ``thinking_first`` every assistant message starts with thinking ([T6]).
    """
    ids = itertools.count()
    transcript = [
        Message(role="system", parts=(draw(text_parts),))
        for _ in range(draw(st.integers(min_value=0, max_value=2)))
    ]
    pending: list[str] = []
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        results: list[Part] = [
            ToolResultPart(tool_use_id=i, content=draw(_contents), is_error=draw(st.booleans()))
            for i in draw(st.permutations(pending))
        ]
        content = draw(st.lists(_user_content, min_size=0 if results else 1, max_size=2))
        transcript.append(Message(role="user", parts=(*results, *content)))
        pending = []
        for _ in range(draw(st.integers(min_value=1, max_value=2))):
            message, calls = draw(_assistant_message(ids, thinking_first))
            transcript.append(message)
            pending += calls
    if pending:  # [T5] a tool-use group is always followed by its results
        answers = [ToolResultPart(tool_use_id=i, content="ok") for i in pending]
        transcript.append(Message(role="user", parts=tuple(answers)))
    return transcript
