"""Canonical transcripts for the golden tests, and the provider responses they decode.

Reasoning and citations carry provenance, so a case is built for one target
(``anthropic``, ``bedrock``, ``openai_chat``, ``openai_responses``): the
reasoning a target may replay is marked as that provider's, as its decoder
would have marked it. Chat Completions cannot replay reasoning at all, so it
gets Anthropic's and its golden file records the refusal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentledger.providers import ThinkingConfig, ToolDefinition
from agentledger.transcript import (
    CacheCheckpointPart,
    Citation,
    CitationsPart,
    DocumentPart,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
)

TARGETS = ("anthropic", "bedrock", "openai_chat", "openai_responses")
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF"
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\n%%EOF"

TOOLS = (
    ToolDefinition(
        name="weather.get",
        description="Current weather for a city.",
        input_schema={
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    ),
    ToolDefinition(name="clock_now", description="The current time."),
)


def user(*parts: Any) -> Message:
    return Message(role="user", parts=tuple(parts))


def assistant(*parts: Any, meta: dict[str, Any] | None = None) -> Message:
    return Message(role="assistant", parts=tuple(parts), meta=meta)


def system(*parts: Any) -> Message:
    return Message(role="system", parts=tuple(parts))


def _thinking(target: str, part_index: int = 0) -> tuple[ThinkingPart, dict[str, Any]]:
    """A signed reasoning part and the meta that vouches for it, as ``target`` decoded it."""
    if target == "openai_responses":
        item = {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "I need the weather."}],
            "encrypted_content": "gAAAAenc-1",
        }
        part = ThinkingPart(text="I need the weather.", signature="gAAAAenc-1", final=True)
        return part, {"openai": {"reasoning": [{"part_index": part_index, "item": item}]}}
    owner = "bedrock" if target == "bedrock" else "anthropic"
    part = ThinkingPart(text="I need the weather.", signature="EqQBCkYIBxgCKkD", final=True)
    return part, {owner: {"reasoning": [part_index]}}


def system_messages(target: str) -> list[Message]:
    return [
        system(TextPart(text="You are terse."), CacheCheckpointPart()),
        system(TextPart(text="Answer in English.")),
        user(TextPart(text="Hi")),
        assistant(TextPart(text="Hello.")),
        user(TextPart(text="Bye")),
    ]


def parallel_tool_calls(target: str) -> list[Message]:
    return [
        user(TextPart(text="Weather in Paris and Rome, and the time?")),
        assistant(
            TextPart(text="Checking."),
            ToolUsePart(id="call_1", name="weather.get", input={"city": "Paris"}),
            ToolUsePart(id="call_2", name="weather.get", input={"city": "Rome"}),
            ToolUsePart(id="call_3", name="clock_now", input={}),
        ),
        user(
            ToolResultPart(tool_use_id="call_2", content={"temp_c": 21.5, "sky": "clear"}),
            ToolResultPart(tool_use_id="call_1", content={"temp_c": 18}),
            ToolResultPart(tool_use_id="call_3", content="12:00"),
        ),
        assistant(TextPart(text="Paris 18°C, Rome 21.5°C, it is noon.")),
    ]


def error_tool_results(target: str) -> list[Message]:
    return [
        user(TextPart(text="What is the weather in Atlantis?")),
        assistant(ToolUsePart(id="call_1", name="weather.get", input={"city": "Atlantis"})),
        user(
            ToolResultPart(tool_use_id="call_1", content="unknown city: Atlantis", is_error=True),
            TextPart(text="Try somewhere real."),
        ),
    ]


def thinking_tool_use(target: str) -> list[Message]:
    part, meta = _thinking(target)
    return [
        user(TextPart(text="Weather in Paris?")),
        assistant(
            part, ToolUsePart(id="call_1", name="weather.get", input={"city": "Paris"}), meta=meta
        ),
        user(ToolResultPart(tool_use_id="call_1", content={"temp_c": 18})),
    ]


def redacted_thinking(target: str) -> list[Message]:
    owner = "bedrock" if target == "bedrock" else "anthropic"
    return [
        user(TextPart(text="Weather in Paris?")),
        assistant(
            ThinkingPart(redacted=b"EmwKAhgBEgy3va3pzix", final=True),
            ToolUsePart(id="call_1", name="weather.get", input={"city": "Paris"}),
            meta={owner: {"reasoning": [0]}},
        ),
        user(ToolResultPart(tool_use_id="call_1", content={"temp_c": 18})),
    ]


def images(target: str) -> list[Message]:
    return [
        user(
            TextPart(text="What is in these pictures?"),
            ImagePart(format="png", data=PNG),
            ImagePart(format="jpeg", data=JPEG),
        )
    ]


def image_urls(target: str) -> list[Message]:
    return [
        user(
            TextPart(text="Describe this."),
            ImagePart(format="png", url="https://example.com/cat.png"),
        )
    ]


def documents(target: str) -> list[Message]:
    return [
        user(
            DocumentPart(name="Quarterly report", format="pdf", data=PDF),
            TextPart(text="Summarise the report."),
        )
    ]


def _citation(target: str) -> Citation:
    if target == "bedrock":
        return Citation(
            title="Handbook",
            source_content=("The sky is blue.",),
            location={"documentChar": {"documentIndex": 0, "start": 0, "end": 16}},
        )
    if target == "openai_responses":
        return Citation(
            title="Sky facts",
            source="https://example.com/sky",
            location={
                "type": "url_citation",
                "url": "https://example.com/sky",
                "title": "Sky facts",
                "start_index": 0,
                "end_index": 16,
            },
        )
    return Citation(
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
    )


def citations(target: str) -> list[Message]:
    return [
        user(
            DocumentPart(
                name="Handbook", text="The sky is blue.", context="Company handbook", cite=True
            ),
            TextPart(text="What colour is the sky?"),
        ),
        assistant(
            TextPart(text="According to the handbook,"),
            CitationsPart(text="the sky is blue.", citations=(_citation(target),)),
        ),
        user(TextPart(text="Thanks.")),
    ]


def cache_checkpoints(target: str) -> list[Message]:
    return [
        system(TextPart(text="You are a weather bot."), CacheCheckpointPart()),
        user(TextPart(text="Weather in Paris?"), CacheCheckpointPart()),
        assistant(ToolUsePart(id="call_1", name="weather.get", input={"city": "Paris"})),
        user(ToolResultPart(tool_use_id="call_1", content={"temp_c": 18}), CacheCheckpointPart()),
        assistant(TextPart(text="18°C.")),
        user(TextPart(text="And Rome?"), CacheCheckpointPart()),
    ]


def too_many_cache_checkpoints(target: str) -> list[Message]:
    return [
        system(TextPart(text="One."), CacheCheckpointPart()),
        user(TextPart(text="Two."), CacheCheckpointPart()),
        assistant(TextPart(text="Three."), CacheCheckpointPart()),
        user(TextPart(text="Four."), CacheCheckpointPart()),
        assistant(TextPart(text="Five.")),
        user(TextPart(text="Six."), CacheCheckpointPart()),
    ]


CASES: dict[str, Callable[[str], list[Message]]] = {
    "system_messages": system_messages,
    "parallel_tool_calls": parallel_tool_calls,
    "error_tool_results": error_tool_results,
    "thinking_tool_use": thinking_tool_use,
    "redacted_thinking": redacted_thinking,
    "images": images,
    "image_urls": image_urls,
    "documents": documents,
    "citations": citations,
    "cache_checkpoints": cache_checkpoints,
    "too_many_cache_checkpoints": too_many_cache_checkpoints,
}

MODELS = {
    "anthropic": "claude-sonnet-test",
    "bedrock": "anthropic.claude-sonnet-test-v1:0",
    "openai_chat": "gpt-test",
    "openai_responses": "gpt-test",
}


def options(case: str, target: str) -> dict[str, Any]:
    """The encode options of a case: thinking cases turn thinking on."""
    chosen: dict[str, Any] = {"model": MODELS[target], "max_tokens": 4096}
    if case in ("thinking_tool_use", "redacted_thinking"):
        chosen["thinking"] = ThinkingConfig(budget_tokens=2048)
    return chosen


def encoder(target: str) -> Callable[..., dict[str, Any]]:
    from agentledger.providers import anthropic, bedrock, openai_chat, openai_responses

    return {
        "anthropic": anthropic.encode,
        "bedrock": bedrock.encode,
        "openai_chat": openai_chat.encode,
        "openai_responses": openai_responses.encode,
    }[target]


def render(case: str, target: str) -> Any:
    """The golden value of ``case`` for ``target``: the payload as wire JSON, or the refusal."""
    import json

    from agentledger.errors import TranscriptError, ValidationError
    from agentledger.providers._json import dumps

    try:
        payload = encoder(target)(CASES[case](target), TOOLS, options(case, target))
    except TranscriptError as error:
        return {
            "refused": {
                "error": type(error).__name__,
                "field": error.field,
                "message_index": error.message_index,
                "part_index": error.part_index,
                "tool_use_ids": list(error.tool_use_ids),
                "message": error.message,
            }
        }
    except ValidationError as error:
        return {
            "refused": {
                "error": type(error).__name__,
                "field": error.field,
                "message": error.message,
            }
        }
    return json.loads(dumps(payload))  # bytes as base64, exactly as on the wire
