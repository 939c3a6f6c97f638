"""Golden tests: canonical transcripts encoded per provider, provider answers decoded ([T7]).

Request files are written by ``tests/providers/golden/regenerate.py`` and were
reviewed against each provider's documented request format; a difference here
means an adapter changed what it sends.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentledger.providers import (
    ModelResponse,
    StreamEnd,
    Usage,
    anthropic,
    bedrock,
    openai_chat,
    openai_responses,
)
from agentledger.providers._json import loads
from agentledger.providers._names import ToolNames
from agentledger.transcript import (
    Citation,
    CitationsPart,
    Message,
    TextPart,
    ThinkingPart,
    ToolUsePart,
)
from tests.providers.cases import CASES, TARGETS, TOOLS, render

GOLDEN = Path(__file__).parent / "golden"
NAMES = ToolNames(tool.name for tool in TOOLS)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("target", TARGETS)
def test_request_matches_golden(target: str, case: str) -> None:
    """[T3] [T7] Each canonical transcript encodes (or is refused) exactly as reviewed."""
    expected = json.loads((GOLDEN / target / f"{case}.json").read_text(encoding="utf-8"))
    assert render(case, target) == expected


def _answer(target: str) -> tuple[Any, list[Any]]:
    folder = GOLDEN / target / "responses"
    body = loads((folder / "answer.json").read_bytes())
    events = loads((folder / "answer.stream.json").read_bytes())
    return body, events


_USAGE = Usage(input_tokens=20, output_tokens=9, cache_read_tokens=4, cache_write_tokens=2)

EXPECTED: dict[str, ModelResponse] = {
    "anthropic": ModelResponse(
        message=Message(
            role="assistant",
            parts=(
                ThinkingPart(text="Let me check.", signature="sig-1", index=0, final=True),
                ThinkingPart(redacted=b"EmwKAhgBEgy3va3pzix", index=1, final=True),
                CitationsPart(
                    text="The sky is blue.",
                    citations=(
                        Citation(
                            title="Handbook",
                            source="Handbook",
                            location={
                                "type": "char_location",
                                "document_index": 0,
                                "document_title": "Handbook",
                                "start_char_index": 0,
                                "end_char_index": 16,
                            },
                            source_content=("The sky is blue.",),
                        ),
                    ),
                ),
                ToolUsePart(id="toolu_1", name="weather.get", input={"city": "Paris", "days": 1.5}),
            ),
            meta={"anthropic": {"reasoning": [0, 1]}},
        ),
        stop_reason="tool_use",
        usage=_USAGE,
        model="claude-stub",
    ),
    "bedrock": ModelResponse(
        message=Message(
            role="assistant",
            parts=(
                ThinkingPart(text="Let me check.", signature="sig-1", index=0, final=True),
                ThinkingPart(redacted=b"EmwKAhgBEgy3va3pzix", index=1, final=True),
                CitationsPart(
                    text="The sky is blue.",
                    citations=(
                        Citation(
                            title="Handbook",
                            location={"documentChar": {"documentIndex": 0, "start": 0, "end": 16}},
                            source_content=("The sky is blue.",),
                        ),
                    ),
                ),
                ToolUsePart(id="tooluse_1", name="weather.get", input={"city": "Paris"}),
            ),
            meta={"bedrock": {"reasoning": [0, 1]}},
        ),
        stop_reason="tool_use",
        usage=_USAGE,
        model="anthropic.claude-test-v1:0",
    ),
    "openai_chat": ModelResponse(
        message=Message(
            role="assistant",
            parts=(
                TextPart(text="Checking."),
                ToolUsePart(id="call_1", name="weather.get", input={"city": "Paris"}),
                ToolUsePart(id="call_2", name="clock_now", input={}),
            ),
        ),
        stop_reason="tool_use",
        usage=Usage(input_tokens=20, output_tokens=9, cache_read_tokens=4),
        model="gpt-stub",
    ),
    "openai_responses": ModelResponse(
        message=Message(
            role="assistant",
            parts=(
                ThinkingPart(text="Let me check.", signature="gAAAAenc-1", index=0, final=True),
                CitationsPart(
                    text="The sky is blue.",
                    citations=(
                        Citation(
                            title="Sky facts",
                            source="https://example.com/sky",
                            location={
                                "type": "url_citation",
                                "url": "https://example.com/sky",
                                "title": "Sky facts",
                                "start_index": 0,
                                "end_index": 16,
                            },
                        ),
                    ),
                ),
                ToolUsePart(id="call_1", name="weather.get", input={"city": "Paris"}),
            ),
            meta={
                "openai": {
                    "reasoning": [
                        {
                            "part_index": 0,
                            "item": {
                                "type": "reasoning",
                                "id": "rs_1",
                                "summary": [{"type": "summary_text", "text": "Let me check."}],
                                "encrypted_content": "gAAAAenc-1",
                            },
                        }
                    ]
                }
            },
        ),
        stop_reason="tool_use",
        usage=Usage(input_tokens=20, output_tokens=9, cache_read_tokens=4),
        model="gpt-stub",
    ),
}


def _decode(target: str, body: Any) -> ModelResponse:
    if target == "bedrock":
        return bedrock.decode(body, NAMES, model="anthropic.claude-test-v1:0")
    module = {
        "anthropic": anthropic,
        "openai_chat": openai_chat,
        "openai_responses": openai_responses,
    }
    return module[target].decode(body, NAMES)  # type: ignore[attr-defined, no-any-return]


def _decode_stream(target: str, events: list[Any]) -> list[Any]:
    if target == "bedrock":
        return bedrock.decode_stream(events, NAMES, model="anthropic.claude-test-v1:0")
    module = {
        "anthropic": anthropic,
        "openai_chat": openai_chat,
        "openai_responses": openai_responses,
    }
    return module[target].decode_stream(events, NAMES)  # type: ignore[attr-defined, no-any-return]


@pytest.mark.parametrize("target", TARGETS)
def test_response_decodes_to_the_exact_message(target: str) -> None:
    """[T7] A provider answer becomes exactly these parts, in the provider's order."""
    body, _ = _answer(target)
    assert _decode(target, body) == EXPECTED[target]


@pytest.mark.parametrize("target", TARGETS)
def test_stream_ends_with_what_decode_gives(target: str) -> None:
    """[T7] Folding the streamed events gives the same message as the whole answer."""
    body, events = _answer(target)
    out = _decode_stream(target, events)
    assert isinstance(out[-1], StreamEnd)
    assert not any(isinstance(event, StreamEnd) for event in out[:-1])
    assert out[-1].response == EXPECTED[target]
    assert out[-1].response == _decode(target, body)
    indexes = [event.index for event in out[:-1]]
    parts = EXPECTED[target].message.parts
    assert all(0 <= index < len(parts) for index in indexes)


@pytest.mark.parametrize("target", TARGETS)
def test_decoded_answer_replays_to_the_same_provider(target: str) -> None:
    """Reasoning decoded from a provider is accepted by that provider's encoder (its provenance)."""
    from agentledger.transcript import ToolResultPart
    from tests.providers.cases import encoder, options

    message = EXPECTED[target].message
    if target == "openai_chat":
        return  # Chat answers carry no reasoning
    results = tuple(
        ToolResultPart(tool_use_id=p.id, content="ok")
        for p in message.parts
        if isinstance(p, ToolUsePart)
    )
    transcript = [
        Message(role="user", parts=(TextPart(text="hi"),)),
        message,
        Message(role="user", parts=results),
    ]
    encoder(target)(transcript, TOOLS, options("thinking_tool_use", target))
