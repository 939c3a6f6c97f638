"""Model-call spans: GenAI attributes, streaming, and no content unless opted in."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from agentledger.observability import CAPTURE_CONTENT_ENV
from agentledger.runtime import Agent, ModelPlanner, Runtime, user_message
from agentledger.storage import RunStatus
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.observability.conftest import Spans
from tests.observability.support import weather

SECRET = "my card number is 4111"


async def _chat_spans(
    store: SQLiteStore, session: str, spans: Spans, **planner: object
) -> list[ReadableSpan]:
    model = ScriptedModel(
        [
            tool_calls(("c1", "weather", {"city": "Paris"})),
            reply("21C in Paris.", input_tokens=30, output_tokens=7),
        ]
    )
    runtime = Runtime(store)
    runtime.register_model("m", model)
    runtime.register_agent(
        Agent(
            "chat",
            ModelPlanner("m", model="scripted-1", system="Be brief.", **planner),
            tools=[weather],
        )  # type: ignore[arg-type]
    )
    out = await runtime.agent_client("chat").run(session, [user_message(SECRET)])
    assert out.status is RunStatus.COMPLETED
    return sorted(
        (s for s in spans.finished() if s.name.startswith("chat ")), key=lambda s: s.start_time or 0
    )


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_gen_ai_attributes(
    spans: Spans, store: SQLiteStore, session: str, stream: bool
) -> None:
    """Provider, request model, usage and finish reason; nothing of the conversation."""
    first, second = await _chat_spans(store, session, spans, stream=stream)
    assert first.name == "chat scripted-1"
    assert first.kind is SpanKind.CLIENT
    attributes = dict(second.attributes or {})
    assert attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "ScriptedModel",
        "gen_ai.request.model": "scripted-1",
        "gen_ai.request.max_tokens": 1024,
        "agentledger.model.id": "m",
        "gen_ai.response.finish_reasons": ("end_turn",),
        "gen_ai.usage.input_tokens": 30,
        "gen_ai.usage.output_tokens": 7,
    }
    assert (first.attributes or {})["gen_ai.response.finish_reasons"] == ("tool_use",)
    every = [json.dumps(dict(s.attributes or {})) for s in spans.finished()]
    assert not any("4111" in a for a in every)


async def test_content_only_when_opted_in(
    spans: Spans, store: SQLiteStore, session: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the GenAI capture switch on, prompts and completions go on the model spans."""
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    first, second = await _chat_spans(store, session, spans)
    sent = json.loads(str((first.attributes or {})["gen_ai.input.messages"]))
    assert [m["role"] for m in sent] == ["system", "user"]
    assert SECRET in json.dumps(sent)
    answered = json.loads(str((second.attributes or {})["gen_ai.output.messages"]))
    assert answered[0]["parts"][0]["text"] == "21C in Paris."
