"""Property tests: round trips, order, robustness to corrupted bytes, validator laws."""

from __future__ import annotations

import re

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentledger.errors import TranscriptError
from agentledger.transcript import (
    Message,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    decode_message,
    decode_messages,
    encode_message,
    encode_messages,
    validate_bedrock,
    validate_planner_transcript,
)

from .strategies import message_lists, messages, planner_transcripts

HEAVY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIGHT = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@HEAVY
@given(message_lists)
def test_any_transcript_round_trips_byte_identically(transcript: list[Message]) -> None:
    """[T4] encode -> decode -> encode gives the same bytes, and decode(encode(x)) == x."""
    data = encode_messages(transcript)
    decoded = decode_messages(data)
    assert decoded == transcript
    assert encode_messages(decoded) == data


@LIGHT
@given(messages)
def test_any_message_round_trips_alone(message: Message) -> None:
    """[T4] a single message round-trips the same way, and as the only element of a list."""
    data = encode_message(message)
    assert decode_message(data) == message
    assert encode_message(decode_message(data)) == data
    assert encode_messages([message]) == b"[" + data + b"]"


@LIGHT
@given(message_lists)
def test_part_order_is_preserved(transcript: list[Message]) -> None:
    """[T3] decoding keeps every message's parts in their original order and kind."""
    decoded = decode_messages(encode_messages(transcript))
    for before, after in zip(transcript, decoded, strict=True):
        assert [type(p) for p in after.parts] == [type(p) for p in before.parts]
        assert list(after.parts) == list(before.parts)


_KEYS = [
    "role", "parts", "meta", "kind", "text", "signature", "redacted", "index", "final", "format",
    "data", "url", "name", "chunks", "uri", "context", "cite", "citations", "title", "source",
    "location", "source_content", "id", "input", "thought_signature", "tool_use_id", "content",
    "is_error", "bogus",
]  # fmt: skip
_KEY = re.compile(rb'"([a-z_]+)":')
_JUNK = st.sampled_from(
    [b'"', b"{", b"}", b"[", b"]", b",", b":", b"\\", b"\\u", b"\xff", b"\xc3", b"\xed\xa0\x80",
     b"1e400", b"-", b"null", b"true", b'"kind":"text"', b"0.1", b"\x00", b" "]
) | st.binary(min_size=1, max_size=4)  # fmt: skip


@st.composite
def corrupted(draw: st.DrawFn) -> bytes:
    """Valid transcript JSON with 1-4 byte flips, deletions, insertions or key renames."""
    data = bytearray(encode_messages(draw(message_lists)))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        operation = draw(st.sampled_from(["flip", "delete", "insert", "rename"]))
        if operation == "flip" and data:
            at = draw(st.integers(min_value=0, max_value=len(data) - 1))
            data[at] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif operation == "delete" and data:
            at = draw(st.integers(min_value=0, max_value=len(data) - 1))
            data[at : at + draw(st.integers(min_value=1, max_value=8))] = b""
        elif operation == "insert":
            at = draw(st.integers(min_value=0, max_value=len(data)))
            data[at:at] = draw(_JUNK)
        else:
            keys = list(_KEY.finditer(data))
            if keys:
                key = draw(st.sampled_from(keys))
                data[key.start(1) : key.end(1)] = draw(st.sampled_from(_KEYS)).encode()
    return bytes(data)


@HEAVY
@given(corrupted())
def test_corrupted_bytes_decode_or_raise_transcript_error(data: bytes) -> None:
    """[T4] any corruption either decodes to messages or raises TranscriptError, nothing else."""
    try:
        decoded = decode_messages(data)
    except TranscriptError:
        return
    # Whatever decodes was valid UTF-8 JSON and is itself a transcript that round-trips.
    data.decode("utf-8")
    assert decode_messages(encode_messages(decoded)) == decoded


@LIGHT
@given(corrupted())
def test_corrupted_single_messages_decode_or_raise_transcript_error(data: bytes) -> None:
    """[T4] the same holds for decode_message on corrupted (mostly array) input."""
    body = data[1:-1] if data.startswith(b"[") else data
    error: TranscriptError | None = None
    try:
        decode_message(body)
    except TranscriptError as e:
        error = e
    assert error is None or error.field.startswith("$")


@LIGHT
@given(planner_transcripts())
def test_generated_planner_transcripts_are_valid(transcript: list[Message]) -> None:
    """[T5] transcripts built by the rules pass, and validation leaves them unchanged."""
    before = encode_messages(transcript)
    validate_planner_transcript(transcript)
    assert encode_messages(transcript) == before


@LIGHT
@given(planner_transcripts(), st.data())
def test_dropping_any_tool_result_is_caught(transcript: list[Message], data: st.DataObject) -> None:
    """[T5] removing one answered result makes the transcript fail, naming that call's id."""
    answered = [
        (m, p)
        for m, message in enumerate(transcript)
        for p, part in enumerate(message.parts)
        if isinstance(part, ToolResultPart)
    ]
    if not answered:
        return
    m, p = data.draw(st.sampled_from(answered))
    victim = transcript[m].parts[p]
    assert isinstance(victim, ToolResultPart)
    parts = transcript[m].parts[:p] + transcript[m].parts[p + 1 :]
    shorter = msgspec.structs.replace(transcript[m], parts=parts)
    with pytest.raises(TranscriptError) as info:
        validate_planner_transcript([*transcript[:m], shorter, *transcript[m + 1 :]])
    if parts:  # (an emptied message is refused as empty, before results are counted)
        assert victim.tool_use_id in info.value.tool_use_ids


@LIGHT
@given(planner_transcripts(), st.data())
def test_duplicating_any_tool_result_is_caught(
    transcript: list[Message], data: st.DataObject
) -> None:
    """[T5] answering one call twice in its user message is refused, naming that id."""
    answering = [m for m, message in enumerate(transcript) if any(
        isinstance(part, ToolResultPart) for part in message.parts)]  # fmt: skip
    if not answering:
        return
    m = data.draw(st.sampled_from(answering))
    first = transcript[m].parts[0]
    assert isinstance(first, ToolResultPart)
    doubled = msgspec.structs.replace(transcript[m], parts=(first, *transcript[m].parts))
    with pytest.raises(TranscriptError) as info:
        validate_planner_transcript([*transcript[:m], doubled, *transcript[m + 1 :]])
    assert info.value.tool_use_ids == (first.tool_use_id,)


@LIGHT
@given(planner_transcripts(thinking_first=True))
def test_thinking_first_transcripts_satisfy_bedrock(transcript: list[Message]) -> None:
    """[T6] with every assistant message starting with thinking, Bedrock's rule holds."""
    validate_bedrock(transcript, thinking_enabled=True)


@LIGHT
@given(planner_transcripts())
def test_bedrock_rule_matches_its_definition(transcript: list[Message]) -> None:
    """[T6] validate_bedrock fails exactly when a tool-use message does not start with thinking."""
    offenders = [
        index
        for index, message in enumerate(transcript)
        if any(isinstance(p, ToolUsePart) for p in message.parts)
        and not isinstance(message.parts[0], ThinkingPart)
    ]
    validate_bedrock(transcript, thinking_enabled=False)
    if not offenders:
        validate_bedrock(transcript, thinking_enabled=True)
        return
    with pytest.raises(TranscriptError) as info:
        validate_bedrock(transcript, thinking_enabled=True)
    assert info.value.message_index == offenders[0]
