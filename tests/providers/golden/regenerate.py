"""Rewrite the golden request files: ``python -m tests.providers.golden.regenerate``.

Each file is what one adapter sends for one canonical transcript
(`tests.providers.cases`), or the refusal it raises instead. Regenerating is
only the first step: read every changed file against the provider's documented
request format before committing it; a golden file is only as good as that
review.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.providers.cases import CASES, TARGETS, render

ROOT = Path(__file__).parent


def main() -> None:
    for target in TARGETS:
        folder = ROOT / target
        folder.mkdir(exist_ok=True)
        for case in CASES:
            text = json.dumps(render(case, target), indent=2, ensure_ascii=False) + "\n"
            path = folder / f"{case}.json"
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                path.write_text(text, encoding="utf-8")
                print(f"wrote {path.relative_to(ROOT)}")


def responses() -> dict[str, dict[str, tuple[object, list[object]]]]:
    """Provider answers to decode, with the stream each provider sends for the same answer.

    Built with the stubs' builders, which follow each provider's documented
    response and event shapes; review them like the request files.
    """
    from agentledger.testing.providers import anthropic, bedrock, openai

    weather = "weather_get_xb8affdae"
    anthropic_body = anthropic.message(
        anthropic.thinking_block("Let me check.", "sig-1"),
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
        {
            "type": "text",
            "text": "The sky is blue.",
            "citations": [
                {
                    "type": "char_location",
                    "cited_text": "The sky is blue.",
                    "document_index": 0,
                    "document_title": "Handbook",
                    "start_char_index": 0,
                    "end_char_index": 16,
                }
            ],
        },
        anthropic.tool_use_block("toolu_1", weather, {"city": "Paris", "days": 1.5}),
        usage={
            "input_tokens": 20,
            "output_tokens": 9,
            "cache_read_input_tokens": 4,
            "cache_creation_input_tokens": 2,
        },
    )
    bedrock_body = bedrock.converse_response(
        {"reasoningContent": {"reasoningText": {"text": "Let me check.", "signature": "sig-1"}}},
        {"reasoningContent": {"redactedContent": "RW13S0FoZ0JFZ3kzdmEzcHppeA=="}},
        {
            "citationsContent": {
                "content": [{"text": "The sky is blue."}],
                "citations": [
                    {
                        "title": "Handbook",
                        "sourceContent": [{"text": "The sky is blue."}],
                        "location": {"documentChar": {"documentIndex": 0, "start": 0, "end": 16}},
                    }
                ],
            }
        },
        {"toolUse": {"toolUseId": "tooluse_1", "name": weather, "input": {"city": "Paris"}}},
        usage={
            "inputTokens": 20,
            "outputTokens": 9,
            "totalTokens": 29,
            "cacheReadInputTokens": 4,
            "cacheWriteInputTokens": 2,
        },
    )
    chat_body = openai.completion(
        "Checking.",
        [("call_1", weather, {"city": "Paris"}), ("call_2", "clock_now", {})],
        usage={
            "prompt_tokens": 20,
            "completion_tokens": 9,
            "total_tokens": 29,
            "prompt_tokens_details": {"cached_tokens": 4},
        },
    )
    responses_body = openai.response(
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Let me check."}],
            "encrypted_content": "gAAAAenc-1",
        },
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [
                {
                    "type": "output_text",
                    "text": "The sky is blue.",
                    "annotations": [
                        {
                            "type": "url_citation",
                            "url": "https://example.com/sky",
                            "title": "Sky facts",
                            "start_index": 0,
                            "end_index": 16,
                        }
                    ],
                }
            ],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": weather,
            "arguments": '{"city":"Paris"}',
            "status": "completed",
        },
        usage={
            "input_tokens": 20,
            "input_tokens_details": {"cached_tokens": 4},
            "output_tokens": 9,
            "total_tokens": 29,
        },
    )
    return {
        "anthropic": {"answer": (anthropic_body, anthropic.message_events(anthropic_body))},
        "bedrock": {"answer": (bedrock_body, bedrock.converse_events(bedrock_body))},
        "openai_chat": {"answer": (chat_body, openai.chat_chunks(chat_body))},
        "openai_responses": {"answer": (responses_body, openai.response_events(responses_body))},
    }


def write_responses() -> None:
    for target, answers in responses().items():
        folder = ROOT / target / "responses"
        folder.mkdir(parents=True, exist_ok=True)
        for name, (body, events) in answers.items():
            for path, value in (
                (folder / f"{name}.json", body),
                (folder / f"{name}.stream.json", events),
            ):
                text = json.dumps(value, indent=2, ensure_ascii=False) + "\n"
                if not path.exists() or path.read_text(encoding="utf-8") != text:
                    path.write_text(text, encoding="utf-8")
                    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
    write_responses()
