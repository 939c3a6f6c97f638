"""The transcript model and its codec: shapes, round trips, invariants ([T1], [T2], [T4])."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest

from agentledger.demo import build_demo_transcript, transcript_tour
from agentledger.errors import TranscriptError
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
    decode_message,
    decode_messages,
    encode_message,
    encode_messages,
)

ONE_OF_EACH: list[Part] = [
    ThinkingPart(text="let me think", signature="sig", index=2, final=True),
    ThinkingPart(signature="only-a-signature"),
    ThinkingPart(redacted=b"\x00\x01secret", signature="sig"),
    TextPart(text="héllo ✓"),
    TextPart(text=""),
    ImagePart(format="png", data=b"\x89PNG\r\n"),
    ImagePart(format="webp", url="https://example.com/cat.webp"),
    DocumentPart(name="a.pdf", format="pdf", data=b"%PDF-1.7", context="the contract", cite=True),
    DocumentPart(name="notes", text="plain text"),
    DocumentPart(name="split", chunks=("part one", "part two")),
    DocumentPart(name="remote", uri="s3://bucket/doc.pdf"),
    CitationsPart(
        text="The sky is blue.",
        citations=(
            Citation(
                title="Sky",
                source="sky.pdf",
                location={"page": 3, "span": [10, 20]},
                source_content=("blue sky",),
            ),
            Citation(),
        ),
    ),
    ToolUsePart(id="toolu_1", name="weather", input={"city": "Paris", "days": 3}),
    ToolUsePart(id="call_2", name="search", input={}, thought_signature="gemini-sig"),
    ToolResultPart(tool_use_id="toolu_1", content={"temp_c": 21, "sky": ["clear"]}),
    ToolResultPart(tool_use_id="call_2", content="boom", is_error=True),
    ToolResultPart(tool_use_id="call_3", content=None),
    CacheCheckpointPart(),
]


@pytest.mark.parametrize("part", ONE_OF_EACH, ids=lambda p: type(p).__name__)
def test_every_part_kind_round_trips(part: Part) -> None:
    """[T2][T4] each part kind decodes back equal and re-encodes to the same bytes."""
    message = Message(role="assistant", parts=(part,))
    data = encode_message(message)
    decoded = decode_message(data)
    assert decoded == message
    assert type(decoded.parts[0]) is type(part)
    assert encode_message(decoded) == data


def test_parts_are_tagged_with_exactly_the_design_kinds() -> None:
    """[T2] the ``kind`` tags are exactly the eight of the design, one per class."""
    tags = {
        type(p).__name__: msgspec.json.decode(encode_message(Message(role="user", parts=(p,))))[
            "parts"
        ][0]["kind"]
        for p in ONE_OF_EACH
    }
    assert tags == {
        "ThinkingPart": "thinking",
        "TextPart": "text",
        "ImagePart": "image",
        "DocumentPart": "document",
        "CitationsPart": "citations",
        "ToolUsePart": "tool_use",
        "ToolResultPart": "tool_result",
        "CacheCheckpointPart": "cache_checkpoint",
    }


def test_exact_json_of_a_simple_user_message() -> None:
    """[T4] the JSON shape is pinned: role, parts with kind first, meta omitted when None."""
    message = Message(role="user", parts=(TextPart(text="hi"), CacheCheckpointPart()))
    assert encode_message(message) == (
        b'{"role":"user","parts":[{"kind":"text","text":"hi"},{"kind":"cache_checkpoint"}]}'
    )


def test_exact_json_of_an_assistant_tool_use_message() -> None:
    """[T4] defaults are omitted, bytes are base64, meta and input are written as given."""
    message = Message(
        role="assistant",
        parts=(
            ThinkingPart(signature="c2ln"),
            ThinkingPart(redacted=b"\xff\x00", index=1),
            TextPart(text="checking"),
            ToolUsePart(id="t1", name="calc", input={"x": 1, "y": [True, None, "z"]}),
        ),
        meta={"provider": "anthropic", "usage": {"in": 10}},
    )
    assert encode_message(message) == (
        b'{"role":"assistant","parts":['
        b'{"kind":"thinking","signature":"c2ln"},'
        b'{"kind":"thinking","redacted":"/wA=","index":1},'
        b'{"kind":"text","text":"checking"},'
        b'{"kind":"tool_use","id":"t1","name":"calc","input":{"x":1,"y":[true,null,"z"]}}],'
        b'"meta":{"provider":"anthropic","usage":{"in":10}}}'
    )


def test_exact_json_of_image_and_document_parts() -> None:
    """[T4] the unused source fields of image and document parts are omitted entirely."""
    message = Message(
        role="user",
        parts=(
            ImagePart(format="png", data=b"\x89PNG"),
            DocumentPart(name="d", format="md", chunks=("a", "b"), cite=True),
        ),
    )
    assert encode_message(message) == (
        b'{"role":"user","parts":[{"kind":"image","format":"png","data":"iVBORw=="},'
        b'{"kind":"document","name":"d","format":"md","chunks":["a","b"],"cite":true}]}'
    )


def test_decoding_accepts_defaults_written_out() -> None:
    """[T4] fields at their default may be present in the JSON; they decode to the same value."""
    verbose = (
        b'{"role":"user","parts":[{"kind":"thinking","text":"","signature":"s",'
        b'"redacted":"","index":0,"final":false},'
        b'{"kind":"image","format":"gif","data":null,"url":"u"}],"meta":null}'
    )
    compact = (
        b'{"role":"user","parts":[{"kind":"thinking","signature":"s"},'
        b'{"kind":"image","format":"gif","url":"u"}]}'
    )
    assert decode_message(verbose) == decode_message(compact)
    assert encode_message(decode_message(verbose)) == compact


def test_message_lists_keep_their_order() -> None:
    """[T1][T4] encode_messages writes one JSON array; decode_messages returns the same list."""
    messages = build_demo_transcript()
    data = encode_messages(messages)
    assert data.startswith(b"[{")
    assert data.endswith(b"}]")
    assert decode_messages(data) == messages
    assert decode_messages(b"[]") == []
    assert encode_messages(iter(messages)) == data  # any iterable


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview], ids=lambda w: w.__name__)
def test_decoding_accepts_bytes_like_input(wrap: Any) -> None:
    """[T4] bytes, bytearray and memoryview are all accepted."""
    data = encode_message(Message(role="user", parts=(TextPart(text="x"),)))
    assert decode_message(wrap(data)).parts == (TextPart(text="x"),)
    assert decode_messages(wrap(b"[" + data + b"]"))[0].role == "user"


def test_decoding_refuses_str_with_a_hint() -> None:
    """[T4] a str is refused: the stored form is UTF-8 bytes, so the caller encodes explicitly."""
    with pytest.raises(TranscriptError, match=r"encode\('utf-8'\)") as info:
        decode_message('{"role":"user","parts":[]}')  # type: ignore[arg-type]
    assert info.value.field == "$"
    with pytest.raises(TranscriptError):
        decode_messages(None)  # type: ignore[arg-type]


def test_decoding_refuses_a_non_contiguous_buffer() -> None:
    """[T4] a strided memoryview cannot be parsed; that is a TranscriptError, not a BufferError."""
    with pytest.raises(TranscriptError, match="contiguous"):
        decode_message(memoryview(b'{"role":"user","parts":[]}  ')[::2])


def test_messages_and_parts_are_immutable() -> None:
    """[T1][T2] messages and parts are frozen: fields cannot be reassigned."""
    message = Message(role="user", parts=(TextPart(text="a"),))
    with pytest.raises(AttributeError):
        message.role = "assistant"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        message.parts[0].text = "b"  # type: ignore[misc,union-attr]


def test_encoding_refuses_what_json_cannot_carry() -> None:
    """[T4] a lone surrogate or a non-Message is a TranscriptError at encode, never bad bytes."""
    with pytest.raises(TranscriptError) as info:
        encode_message(Message(role="user", parts=(TextPart(text="\ud800"),)))
    assert isinstance(info.value.__cause__, UnicodeEncodeError)
    with pytest.raises(TranscriptError):
        encode_message(TextPart(text="a"))  # type: ignore[arg-type]
    with pytest.raises(TranscriptError) as many:
        encode_messages([Message(role="user", parts=()), {"role": "user"}])  # type: ignore[list-item]
    assert many.value.message_index == 1


def test_an_int_beyond_the_conversion_limit_fails_at_encode() -> None:
    """[T4] an int over Python's 4300-digit limit cannot be written; encode says so."""
    part = ToolResultPart(tool_use_id="t", content=10**5000)
    with pytest.raises(TranscriptError, match="4300"):
        encode_message(Message(role="user", parts=(part,)))


INVALID_CONSTRUCTIONS: list[tuple[str, Any, str]] = [
    ("text not str", lambda: TextPart(text=1), "TextPart.text"),
    ("thinking empty", lambda: ThinkingPart(), "ThinkingPart.text"),
    ("thinking text+redacted", lambda: ThinkingPart(text="a", redacted=b"x"),
     "ThinkingPart.redacted"),
    ("thinking negative index", lambda: ThinkingPart(text="a", index=-1), "ThinkingPart.index"),
    ("thinking bool index", lambda: ThinkingPart(text="a", index=True), "ThinkingPart.index"),
    ("thinking redacted str", lambda: ThinkingPart(redacted="x"), "ThinkingPart.redacted"),
    ("image neither", lambda: ImagePart(format="png"), "ImagePart.data"),
    ("image both", lambda: ImagePart(format="png", data=b"x", url="u"), "ImagePart.data"),
    ("image empty data", lambda: ImagePart(format="png", data=b""), "ImagePart.data"),
    ("image empty url", lambda: ImagePart(format="png", url=""), "ImagePart.url"),
    ("image bad format", lambda: ImagePart(format="bmp", data=b"x"), "ImagePart.format"),
    ("document no source", lambda: DocumentPart(name="d"), "DocumentPart.data"),
    ("document two sources", lambda: DocumentPart(name="d", text="t", uri="u"),
     "DocumentPart.data"),
    ("document empty name", lambda: DocumentPart(name="", text="t"), "DocumentPart.name"),
    ("document empty text", lambda: DocumentPart(name="d", text=""), "DocumentPart.text"),
    ("document no chunks", lambda: DocumentPart(name="d", chunks=()), "DocumentPart.chunks"),
    ("document chunk list", lambda: DocumentPart(name="d", chunks=["a"]), "DocumentPart.chunks"),
    ("document chunk not str", lambda: DocumentPart(name="d", chunks=("a", 2)),
     "DocumentPart.chunks[1]"),
    ("citation location list", lambda: Citation(location=[1]), "Citation.location"),
    ("citations list", lambda: CitationsPart(text="t", citations=[]), "CitationsPart.citations"),
    ("citations element", lambda: CitationsPart(text="t", citations=({},)),
     "CitationsPart.citations[0]"),
    ("tool_use empty id", lambda: ToolUsePart(id="", name="n", input={}), "ToolUsePart.id"),
    ("tool_use empty name", lambda: ToolUsePart(id="i", name="", input={}), "ToolUsePart.name"),
    ("tool_use input list", lambda: ToolUsePart(id="i", name="n", input=[]), "ToolUsePart.input"),
    ("tool_result empty id", lambda: ToolResultPart(tool_use_id="", content=1),
     "ToolResultPart.tool_use_id"),
    ("tool_result is_error int", lambda: ToolResultPart(tool_use_id="i", content=1, is_error=1),
     "ToolResultPart.is_error"),
    ("message role", lambda: Message(role="tool", parts=()), "Message.role"),
    ("message role unhashable", lambda: Message(role=["user"], parts=()), "Message.role"),
    ("message parts list", lambda: Message(role="user", parts=[]), "Message.parts"),
    ("message part not a part", lambda: Message(role="user", parts=("hi",)), "Message.parts[0]"),
    ("message meta list", lambda: Message(role="user", parts=(), meta=[]), "Message.meta"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("build", "field"),
    [c[1:] for c in INVALID_CONSTRUCTIONS],
    ids=[c[0] for c in INVALID_CONSTRUCTIONS],
)
def test_invalid_parts_cannot_be_built(build: Any, field: str) -> None:
    """[T2] a part or message breaking its invariants raises TranscriptError naming the field."""
    with pytest.raises(TranscriptError) as info:
        build()
    assert info.value.field == field


def test_thinking_may_carry_only_a_signature() -> None:
    """[T2] Anthropic may send empty thinking text with only a signature; that part is valid."""
    part = ThinkingPart(text="", signature="sig")
    assert decode_message(encode_message(Message(role="assistant", parts=(part,)))).parts == (part,)


def test_invariant_errors_are_transcript_errors_with_data() -> None:
    """[T2] construction errors carry field, expected and got, like every ValidationError."""
    with pytest.raises(TranscriptError) as info:
        ImagePart(format="png", data=b"x", url="u")
    error = info.value
    assert error.expected == "exactly one of data and url"
    assert error.got == "both"
    assert "ImagePart.data" in str(error)


def test_demo_prints_every_part_and_returns_zero(capsys: pytest.CaptureFixture[str]) -> None:
    """[T1]-[T5] the transcript tour validates, round-trips and prints one line per part."""
    assert transcript_tour() == 0
    out = capsys.readouterr().out
    part_lines = [s for s in out.splitlines() if re.match(r" ?\d+  (system|user|assistant) ", s)]
    assert len(part_lines) == sum(len(m.parts) for m in build_demo_transcript())
    for kind in ("thinking", "image", "document", "citations", "tool_use", "tool_result"):
        assert f" {kind} " in out
    assert "bytes" in out.splitlines()[-1]


def test_messages_and_plain_parts_are_not_tracked_by_the_garbage_collector() -> None:
    """A decoded transcript of many messages sets off no collection of the whole process:
    messages and the parts holding only text, bytes and numbers are untracked; a part
    holding a JSON object (tool input, citations) stays tracked."""
    import gc

    decoded = decode_messages(encode_messages([Message(role="user", parts=tuple(ONE_OF_EACH))]))
    assert not any(gc.is_tracked(m) for m in decoded)
    plain = (ThinkingPart, TextPart, ImagePart, DocumentPart, CacheCheckpointPart)
    assert not any(gc.is_tracked(p) for p in decoded[0].parts if isinstance(p, plain))
    assert any(gc.is_tracked(p) for p in decoded[0].parts if isinstance(p, ToolUsePart))
