"""Exact numbers: JsonNumber and the codec keep every JSON number as written ([T4])."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from agentledger.errors import TranscriptError
from agentledger.transcript import (
    Citation,
    CitationsPart,
    JsonNumber,
    Message,
    ToolResultPart,
    ToolUsePart,
    decode_message,
    encode_message,
)

LITERALS = ["12345678901234567890123", "0.1", "1e400", "1.0", "-0.0", "2.50E-7", "-1E+5", "0"]


def _tool_use(input_json: bytes) -> bytes:
    return b'{"role":"assistant","parts":[{"kind":"tool_use","id":"t","name":"n","input":' + (
        input_json + b"}]}"
    )


@pytest.mark.parametrize("literal", LITERALS)
def test_numbers_in_nested_tool_input_round_trip_byte_for_byte(literal: str) -> None:
    """[T4] a number deep in ``input`` is written back exactly as it was read."""
    data = _tool_use(b'{"a":{"b":[1,{"c":' + literal.encode() + b"}]}}")
    assert encode_message(decode_message(data)) == data


@pytest.mark.parametrize("literal", LITERALS)
def test_numbers_in_tool_result_content_round_trip_byte_for_byte(literal: str) -> None:
    """[T4] a number in ``content`` (bare or nested) survives decode and encode unchanged."""
    for content in (literal.encode(), b"[" + literal.encode() + b',"x"]'):
        data = (
            b'{"role":"user","parts":[{"kind":"tool_result","tool_use_id":"t","content":'
            + content
            + b"}]}"
        )
        assert encode_message(decode_message(data)) == data


def test_the_three_literals_together_decode_exactly() -> None:
    """[T4] big ints stay ints; 0.1 and 1e400 are exact JsonNumbers (no rounding, no inf)."""
    data = _tool_use(b'{"big":12345678901234567890123,"tenth":0.1,"huge":1e400}')
    part = decode_message(data).parts[0]
    assert isinstance(part, ToolUsePart)
    big, tenth, huge = part.input["big"], part.input["tenth"], part.input["huge"]
    assert type(big) is int
    assert big == 12345678901234567890123
    assert type(tenth) is JsonNumber
    assert tenth == Decimal("0.1")
    assert tenth.literal == "0.1"
    assert type(huge) is JsonNumber
    assert huge == Decimal("1e400")
    assert huge.is_finite()
    assert encode_message(decode_message(data)) == data


def test_meta_and_citation_locations_keep_numbers_too() -> None:
    """[T4] the other JSON-valued fields (meta, citation location) are exact as well."""
    data = (
        b'{"role":"assistant","parts":[{"kind":"citations","text":"t","citations":'
        b'[{"location":{"score":0.930000000000000000001}}]}],"meta":{"cost":1.10,"n":-0.0}}'
    )
    assert encode_message(decode_message(data)) == data


def test_plain_floats_encode_shortest_and_decode_equal() -> None:
    """[T4] a caller's float encodes in its shortest form and reads back as an equal JsonNumber."""
    message = Message(
        role="user", parts=(ToolResultPart(tool_use_id="t", content=[0.1, 1e16, -0.0, 2.5]),)
    )
    data = encode_message(message)
    assert data.endswith(b'"content":[0.1,1e16,-0.0,2.5]}]}')
    decoded = decode_message(data)
    assert decoded == message
    part = decoded.parts[0]
    assert isinstance(part, ToolResultPart)
    assert all(type(v) is JsonNumber for v in part.content)


def test_plain_decimals_encode_as_json_numbers() -> None:
    """[T4] a Decimal is written as a number (not a string), with its digits."""
    message = Message(
        role="user", parts=(ToolResultPart(tool_use_id="t", content=Decimal("1.10")),)
    )
    data = encode_message(message)
    assert data.endswith(b'"content":1.10}]}')
    assert decode_message(data) == message


@pytest.mark.parametrize(
    "bad", [float("nan"), float("inf"), -float("inf"), Decimal("NaN"), Decimal("-Infinity")]
)
def test_non_finite_numbers_are_refused_not_written_as_null(bad: Any) -> None:
    """[T4] NaN/infinity would become ``null`` silently; every JSON-valued field refuses them."""
    builders: dict[str, Callable[[], object]] = {
        "ToolUsePart.input.x[0]": lambda: ToolUsePart(id="i", name="n", input={"x": [bad]}),
        "ToolResultPart.content.y": lambda: ToolResultPart(tool_use_id="i", content={"y": bad}),
        "Message.meta.z": lambda: Message(role="user", parts=(), meta={"z": bad}),
        "Citation.location.w": lambda: Citation(location={"w": bad}),
    }  # fmt: skip
    for field, build in builders.items():
        with pytest.raises(TranscriptError, match="finite") as info:
            build()
        assert info.value.field == field


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({1: "int key"}, "ToolResultPart.content"),
        ({"a": (1, 2)}, "ToolResultPart.content.a"),
        ([{"b": {1, 2}}], "ToolResultPart.content[0].b"),
        ({"odd key": [object()]}, "ToolResultPart.content['odd key'][0]"),
        (b"bytes", "ToolResultPart.content"),
    ],
)
def test_non_json_values_are_refused_with_their_path(value: Any, field: str) -> None:
    """[T4] only plain JSON goes into content: no tuples, sets, bytes, objects or non-str keys."""
    with pytest.raises(TranscriptError) as info:
        ToolResultPart(tool_use_id="t", content=value)
    assert info.value.field == field


def test_a_self_containing_value_is_refused() -> None:
    """[T4] a container holding itself is not JSON; the check fails cleanly instead of looping."""
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(TranscriptError, match="nested less deeply"):
        ToolResultPart(tool_use_id="t", content=loop)


def test_a_nested_citations_part_checks_locations() -> None:
    """[T4] citations inside a part obey the same JSON rule (checked when the Citation is built)."""
    with pytest.raises(TranscriptError):
        CitationsPart(text="t", citations=(Citation(location={"p": float("nan")}),))


def test_json_number_keeps_its_literal_and_value() -> None:
    """[T4] a JsonNumber is a Decimal with the exact JSON spelling attached."""
    number = JsonNumber("1.50e3")
    assert isinstance(number, Decimal)
    assert number == 1500
    assert number.literal == "1.50e3"
    assert repr(number) == "JsonNumber('1.50e3')"
    assert number + 1 == Decimal("1501")


def test_json_number_equality_is_by_value() -> None:
    """[T4] equal to Decimals, ints and the float of the same shortest spelling; hash as Decimal."""
    assert JsonNumber("1.0") == JsonNumber("1.00") == Decimal(1) == 1
    assert JsonNumber("0.1") == 0.1
    assert 0.1 == JsonNumber("0.1")  # noqa: SIM300 - the reflected comparison is the point
    assert JsonNumber("-0.0") == -0.0
    # A float equals its shortest spelling only: 0.10000000000000001 is a different decimal.
    assert JsonNumber("0.10000000000000001") != 0.1
    assert JsonNumber("1e400") != float("inf")
    assert JsonNumber("0.1") != Decimal("0.10000000000000001")
    assert hash(JsonNumber("2.0")) == hash(Decimal("2.0")) == hash(2)
    assert JsonNumber("1.5") != "1.5"
    assert (JsonNumber("1.5") == "1.5") is False


@pytest.mark.parametrize(
    "literal", ["NaN", "Infinity", "01", "1.", ".5", "+1", " 1", "1_000", "0x10", "", "1e"]
)
def test_json_number_refuses_what_is_not_a_json_literal(literal: str) -> None:
    """[T4] the literal is written back verbatim, so it must be valid JSON number syntax."""
    with pytest.raises(TranscriptError):
        JsonNumber(literal)


def test_json_number_refuses_non_str_and_out_of_range() -> None:
    """[T4] a float is not a literal, and an exponent beyond Decimal's range is refused."""
    with pytest.raises(TranscriptError):
        JsonNumber(0.5)  # type: ignore[arg-type]
    with pytest.raises(TranscriptError, match="Decimal can hold"):
        JsonNumber("1e99999999999999999999")


def test_json_number_survives_copy_and_pickle() -> None:
    """[T4] copies keep the spelling (Decimal's own pickling would rewrite 1e400 as 1E+400)."""
    number = JsonNumber("1e400")
    for clone in (copy.copy(number), copy.deepcopy(number), pickle.loads(pickle.dumps(number))):
        assert type(clone) is JsonNumber
        assert clone.literal == "1e400"
    message = decode_message(_tool_use(b'{"x":1e400}'))
    assert encode_message(copy.deepcopy(message)) == encode_message(message)
