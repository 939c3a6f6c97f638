"""A transcript tour: a realistic transcript built, validated, encoded and read back.

It exercises every part kind end to end ([T1]-[T5]); it was the first
``agentledger demo`` and stays as a worked example of the transcript model
(the demo now runs a whole agent session, see :mod:`agentledger.demo`).
"""

from __future__ import annotations

from typing import Any

import msgspec

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
    decode_messages,
    encode_messages,
    validate_planner_transcript,
)

__all__ = ["build_demo_transcript", "transcript_tour"]

# A 1x1 transparent PNG: small, but real image bytes.
_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


def build_demo_transcript() -> list[Message]:
    """A support-agent exchange using every part kind, in provider-valid order.

    Returned as a function so tests and the CLI share one realistic example.
    """
    return [
        Message(
            role="system",
            parts=(
                TextPart(text="You are a support agent for Acme. Cite the policy when you refund."),
                CacheCheckpointPart(),  # the system prompt is stable: cache up to here
            ),
        ),
        Message(
            role="user",
            parts=(
                TextPart(text="My order A-1042 arrived broken. Photo and receipt attached."),
                ImagePart(format="png", data=_PNG),
                DocumentPart(
                    name="receipt-A-1042",
                    format="txt",
                    text="Order A-1042\nKettle x1  49.90 EUR\nShipping  4.95 EUR\nTotal  54.85 EUR",
                    cite=True,
                ),
            ),
        ),
        Message(
            role="assistant",
            parts=(
                ThinkingPart(
                    text="I need the order record and the refund policy before answering.",
                    signature="EqQBCkYIBRgCIkB6c2lnbmF0dXJl",
                    final=True,
                ),
                TextPart(text="Let me look up your order and our refund policy."),
                ToolUsePart(id="toolu_01", name="orders.lookup", input={"order_id": "A-1042"}),
                ToolUsePart(
                    id="toolu_02",
                    name="policy.search",
                    input={"query": "damaged item refund", "top_k": 3, "min_score": 0.75},
                ),
            ),
        ),
        Message(
            role="user",
            parts=(
                ToolResultPart(
                    tool_use_id="toolu_01",
                    content={
                        "order_id": "A-1042",
                        "total": JsonNumber("54.85"),
                        "currency": "EUR",
                        "delivered": True,
                    },
                ),
                ToolResultPart(
                    tool_use_id="toolu_02",
                    content="policy index unavailable: timeout after 5s",
                    is_error=True,
                ),
                TextPart(text="Also, can I get the refund to my original card?"),
            ),
        ),
        Message(
            role="assistant",
            parts=(
                CitationsPart(
                    text="Your receipt shows a total of 54.85 EUR for order A-1042.",
                    citations=(
                        Citation(
                            title="receipt-A-1042",
                            source="receipt-A-1042",
                            location={"start_char": 0, "end_char": 64},
                            source_content=("Total  54.85 EUR",),
                        ),
                    ),
                ),
                TextPart(
                    text="I have issued a full refund of 54.85 EUR to your original card; "
                    "expect it within 5 business days."
                ),
            ),
            meta={"provider": "anthropic", "stop_reason": "end_turn"},
        ),
    ]


def _literal(value: Any) -> Any:
    """Show a JsonNumber as the JSON it came from."""
    if isinstance(value, JsonNumber):
        return msgspec.Raw(value.literal.encode())
    raise TypeError(type(value).__name__)


def _json(value: Any) -> str:
    """A JSON value on one line, as stored."""
    return msgspec.json.encode(value, enc_hook=_literal).decode()


def _summary(part: Part) -> str:
    """One short line describing a part."""
    match part:
        case ThinkingPart():
            body = part.text or f"<redacted {len(part.redacted)} bytes>"
            text = f"{body!r} signed={bool(part.signature)}"
        case TextPart():
            text = repr(part.text)
        case ImagePart():
            where = f"{len(part.data)} bytes" if part.data else part.url
            text = f"{part.format}, {where}"
        case DocumentPart():
            text = f"{part.name!r} ({part.format or 'unknown format'}) cite={part.cite}"
        case CitationsPart():
            text = f"{part.text!r} [{len(part.citations)} citation(s)]"
        case ToolUsePart():
            text = f"{part.name}({_json(part.input)}) id={part.id}"
        case ToolResultPart():
            text = (
                f"for {part.tool_use_id}{' ERROR' if part.is_error else ''}: {_json(part.content)}"
            )
        case CacheCheckpointPart():
            text = "-- prompt cache boundary --"
    return text if len(text) <= 90 else text[:87] + "..."


def transcript_tour() -> int:
    """Build, validate, encode, decode and print the demo transcript; return the exit status."""
    messages = build_demo_transcript()
    validate_planner_transcript(messages)
    encoded = encode_messages(messages)
    decoded = decode_messages(encoded)
    if decoded != messages or encode_messages(decoded) != encoded:
        raise AssertionError("demo transcript did not round-trip exactly")
    for index, message in enumerate(decoded):
        for part in message.parts:
            kind = part.__struct_config__.tag
            print(f"{index:>2}  {message.role:<9}  {kind:<16}  {_summary(part)}")
    print(f"{len(decoded)} messages valid; JSON {len(encoded)} bytes; decoded copy is identical")
    return 0
