"""Strict decoding: every malformed input is a TranscriptError naming its JSON path ([T4])."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentledger.errors import TranscriptError
from agentledger.transcript import Message, TextPart, decode_message, decode_messages

USER = b'{"role":"user","parts":['


def _error(data: bytes) -> TranscriptError:
    """Decode ``data`` as one message and return the TranscriptError it must raise."""
    with pytest.raises(TranscriptError) as info:
        decode_message(data)
    return info.value


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (b'{"role":"user","parts":[],"extra":1}', "$.extra"),
        (USER + b'{"kind":"text","text":"a","colour":"red"}]}', "$.parts[0].colour"),
        (
            USER + b'{"kind":"citations","text":"t","citations":[{"title":"x","page":3}]}]}',
            "$.parts[0].citations[0].page",
        ),
        (USER + b'{"kind":"text","text":"a","odd key":1}]}', "$.parts[0]['odd key']"),
    ],
)
def test_unknown_keys_are_rejected_with_their_path(data: bytes, field: str) -> None:
    """[T4] unknown keys are rejected, at any depth, with their JSON path."""
    error = _error(data)
    assert error.field == field
    assert "unknown field" in str(error)
    assert error.expected == "no unknown keys"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (b'{"parts":[]}', "$.role"),
        (b'{"role":"user"}', "$.parts"),
        (USER + b'{"kind":"text"}]}', "$.parts[0].text"),
        (USER + b'{"kind":"tool_use","id":"i","name":"n"}]}', "$.parts[0].input"),
        (USER + b'{"kind":"tool_result","tool_use_id":"i"}]}', "$.parts[0].content"),
        (USER + b'{"kind":"document","text":"t"}]}', "$.parts[0].name"),
    ],
)
def test_missing_required_keys_are_rejected_with_their_path(data: bytes, field: str) -> None:
    """[T4] a missing required key is named by its JSON path."""
    error = _error(data)
    assert error.field == field
    assert "missing required field" in str(error)


def test_unknown_kind_is_rejected() -> None:
    """[T4] an unknown ``kind`` is an error at ``$.parts[i].kind`` listing the known kinds."""
    error = _error(USER + b'{"kind":"text","text":"ok"},{"kind":"video","url":"u"}]}')
    assert error.field == "$.parts[1].kind"
    assert error.part_index == 1
    assert "tool_use" in error.expected


def test_missing_kind_is_rejected() -> None:
    """[T4] a part without ``kind`` is an error naming the missing key."""
    error = _error(USER + b'{"text":"no kind"}]}')
    assert error.field == "$.parts[0].kind"
    assert "missing required field" in str(error)


@pytest.mark.parametrize(
    ("data", "field", "expected"),
    [
        (b'{"role":1,"parts":[]}', "$.role", "str"),
        (b'{"role":"robot","parts":[]}', "$.role", "one of system, user, assistant"),
        (USER + b'{"kind":"image","format":"bmp","url":"u"}]}', "$.parts[0].format",
         "one of png, jpeg, gif, webp"),
        (b'{"role":"user","parts":{}}', "$.parts", "array"),
        (USER + b'{"kind":7}]}', "$.parts[0].kind", "str"),
        (USER + b'{"kind":"text","text":5}]}', "$.parts[0].text", "str"),
        (USER + b'{"kind":"thinking","text":"a","index":"1"}]}', "$.parts[0].index", "int"),
        (USER + b'{"kind":"tool_result","tool_use_id":"t","content":1,"is_error":"yes"}]}',
         "$.parts[0].is_error", "bool"),
        (b'{"role":"user","parts":[],"meta":[1]}', "$.meta", "object | null"),
        (b'[{"role":"user","parts":[]}]', "$", "object"),
    ],
)  # fmt: skip
def test_wrong_types_are_rejected_with_their_path(data: bytes, field: str, expected: str) -> None:
    """[T4] a value of the wrong JSON type is named by path, with what was expected."""
    error = _error(data)
    assert error.field == field
    assert error.expected == expected


@pytest.mark.parametrize(
    "data",
    [
        b'{"role":"user","parts":[]} {}',
        b'{"role":"user","parts":[]}{"role":"user","parts":[]}',
        b'{"role":"user","parts":[]} 1',
        b'{"role":"user","parts":[]}x',
    ],
)
def test_a_second_value_after_the_first_is_rejected(data: bytes) -> None:
    """[T4] trailing data after the one JSON value is an error, not silently ignored."""
    error = _error(data)
    assert error.field == "$"
    assert "trailing characters" in str(error)


def test_trailing_whitespace_is_not_a_second_value() -> None:
    """[T4] whitespace after the value is allowed by JSON and accepted."""
    assert decode_message(b'{"role":"user","parts":[]}\n \t').parts == ()


@pytest.mark.parametrize(
    "data",
    [
        USER + b'{"kind":"text","text":"caf\xe9"}]}',  # Latin-1, not UTF-8
        USER + b'{"kind":"text","text":"\xc0\x80"}]}',  # overlong NUL
        USER + b'{"kind":"text","text":"\xed\xa0\x80"}]}',  # UTF-8-encoded surrogate
        USER + b'{"kind":"text","text":"\xf4\x90\x80\x80"}]}',  # beyond U+10FFFF
        USER + b'{"kind":"text","text":"\xe2\x82"}]}',  # truncated sequence
        USER + b'{"kind":"text","text":"\xff"}]}',
        USER + b'{"text":"\xff","kind":"text"}]}',  # before the tag
        USER + b'{"kind":"tool_use","id":"i","name":"n","input":{"k\xff":1}}]}',  # in a key
        USER + b'{"kind":"tool_result","tool_use_id":"i","content":["\xfe"]}]}',  # in Any
        b'{"role":"user","parts":[]}\xff',
        b'\xef\xbb\xbf{"role":"user","parts":[]}',  # a BOM is not JSON
    ],
)
def test_invalid_utf8_is_rejected_everywhere(data: bytes) -> None:
    """[T4] invalid UTF-8 anywhere (strings, keys, untyped values, outside strings) is an error."""
    error = _error(data)
    assert error.field == "$"
    assert isinstance(error.__cause__, msgspec.DecodeError)


def test_invalid_utf8_error_names_the_byte() -> None:
    """[T4] msgspec gives no path for bad UTF-8, so the error names the byte offset instead."""
    data = USER + b'{"kind":"text","text":"ok\xff"}]}'
    offset = data.index(b"\xff")
    assert f"byte {offset}" in str(_error(data))


def test_a_lone_surrogate_escape_is_rejected() -> None:
    """[T4] ``"\\ud800"`` names no character UTF-8 can hold; decoding refuses it."""
    _error(USER + b'{"kind":"text","text":"\\ud800"}]}')


_INVALID_UTF8 = st.sampled_from(
    [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc3", b"\xe0\x80\x80", b"\xed\xbf\xbf", b"\xf5\x80\x80\x80",
     b"\xf8", b"\xff", b"\xf0\x9f\x98"]
)  # fmt: skip


_PLAIN = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cc"], exclude_characters='"\\'), max_size=5
)


@settings(max_examples=150)
@given(prefix=_PLAIN, bad=_INVALID_UTF8, suffix=_PLAIN)
def test_invalid_utf8_inside_any_string_is_rejected(prefix: str, bad: bytes, suffix: str) -> None:
    """[T4] an invalid UTF-8 sequence spliced into a valid string value is always rejected."""
    text = prefix.encode() + bad + suffix.encode()
    assert decode_message(USER + b'{"kind":"text","text":"' + prefix.encode() + b'"}]}')
    with pytest.raises(TranscriptError, match="UTF-8"):
        decode_message(USER + b'{"kind":"text","text":"' + text + b'"}]}')


@pytest.mark.parametrize(
    ("data", "got"),
    [
        (USER + b'{"kind":"tool_use","id":"i","name":"n","input":[1]}]}', "array"),
        (USER + b'{"kind":"tool_use","id":"i","name":"n","input":"x"}]}', "str"),
        (USER + b'{"kind":"tool_use","id":"i","name":"n","input":null}]}', "null"),
    ],
)
def test_tool_input_must_be_a_json_object(data: bytes, got: str) -> None:
    """[T4] a tool_use ``input`` that is not a JSON object is rejected at its path."""
    error = _error(data)
    assert error.field == "$.parts[0].input"
    assert error.got == got


@pytest.mark.parametrize(
    ("sources", "got"),
    [
        (b"", []),
        (b',"text":"t","uri":"u"', ["text", "uri"]),
        (b',"data":"eA==","chunks":["c"]', ["data", "chunks"]),
    ],
)
def test_document_needs_exactly_one_source(sources: bytes, got: list[str]) -> None:
    """[T4] a document with zero or two sources is rejected, naming the sources found."""
    error = _error(
        USER + b'{"kind":"text","text":"x"},{"kind":"document","name":"d"' + sources + b"}]}"
    )
    assert error.field == "$.parts[1].data"
    assert error.got == got
    assert error.part_index == 1


@pytest.mark.parametrize(
    ("fields", "got"), [(b"", "neither"), (b',"data":"eA==","url":"https://x"', "both")]
)
def test_image_needs_exactly_one_of_data_and_url(fields: bytes, got: str) -> None:
    """[T4] an image with neither or both of data/url is rejected at its path."""
    error = _error(USER + b'{"kind":"image","format":"png"' + fields + b"}]}")
    assert error.field == "$.parts[0].data"
    assert error.got == got


@pytest.mark.parametrize(
    ("part", "field"),
    [
        (b'{"kind":"thinking"}', "$.parts[0].text"),
        (b'{"kind":"thinking","text":"a","redacted":"eA=="}', "$.parts[0].redacted"),
        (b'{"kind":"thinking","text":"a","index":-1}', "$.parts[0].index"),
        (b'{"kind":"tool_use","id":"","name":"n","input":{}}', "$.parts[0].id"),
        (b'{"kind":"tool_result","tool_use_id":"","content":1}', "$.parts[0].tool_use_id"),
        (b'{"kind":"document","name":"","text":"t"}', "$.parts[0].name"),
        (b'{"kind":"document","name":"d","chunks":[]}', "$.parts[0].chunks"),
        (b'{"kind":"image","format":"png","url":""}', "$.parts[0].url"),
    ],
)
def test_decoded_parts_obey_the_same_invariants_as_built_ones(part: bytes, field: str) -> None:
    """[T2][T4] a decoded part breaking an invariant fails with the path of the field."""
    error = _error(USER + part + b"]}")
    assert error.field == field
    assert error.part_index == 0


def test_bad_base64_is_rejected_at_its_path() -> None:
    """[T4] bytes are base64 in JSON; anything else is an error at that field."""
    error = _error(USER + b'{"kind":"image","format":"png","data":"not base64!"}]}')
    assert error.field == "$.parts[0].data"


@pytest.mark.parametrize("data", [b"", b"   ", b"{", b'{"role":', b"nul", b"\x00", b"NaN"])
def test_malformed_json_is_rejected(data: bytes) -> None:
    """[T4] empty, truncated or non-JSON input is a TranscriptError at ``$``."""
    assert _error(data).field == "$"


def test_non_finite_literals_and_out_of_range_exponents_are_rejected() -> None:
    """[T4] JSON has no NaN/Infinity; an exponent Decimal cannot hold is an error with a path."""
    _error(USER + b'{"kind":"tool_result","tool_use_id":"t","content":NaN}]}')
    error = _error(
        USER + b'{"kind":"tool_result","tool_use_id":"t","content":[1e99999999999999999999]}]}'
    )
    assert error.field.startswith("$.parts[0].content")
    assert "out of range" in str(error)


def test_deep_nesting_is_a_transcript_error() -> None:
    """[T4] input nested deeper than the decoder can follow fails cleanly (no RecursionError)."""
    deep = b"[" * 50_000 + b"]" * 50_000
    error = _error(USER + b'{"kind":"tool_result","tool_use_id":"t","content":' + deep + b"}]}")
    assert isinstance(error.__cause__, RecursionError)


def test_list_decoding_names_the_message_and_part() -> None:
    """[T4] in a list of messages the path starts with the message index, set as message_index."""
    good = b'{"role":"user","parts":[{"kind":"text","text":"a"}]}'
    bad = b'{"role":"user","parts":[{"kind":"text","text":"a"},{"kind":"text"}]}'
    with pytest.raises(TranscriptError) as info:
        decode_messages(b"[" + good + b"," + bad + b"]")
    error = info.value
    assert error.field == "$[1].parts[1].text"
    assert (error.message_index, error.part_index) == (1, 1)
    assert str(error).startswith("messages[1].parts[1]: ")
    with pytest.raises(TranscriptError) as info:
        decode_messages(good)
    assert info.value.expected == "array"


def test_the_decoder_error_is_chained() -> None:
    """[T4] the original msgspec error is kept as ``__cause__`` for debugging."""
    error = _error(USER + b'{"kind":"nope"}]}')
    assert isinstance(error.__cause__, msgspec.ValidationError)


def test_a_valid_message_still_decodes() -> None:
    """[T4] the strict decoder is not over-strict: a well-formed message decodes."""
    data = USER + b'{"kind":"text","text":"fine"}]}'
    assert decode_message(data) == Message(role="user", parts=(TextPart(text="fine"),))
