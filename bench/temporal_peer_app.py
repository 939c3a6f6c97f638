"""The peer of ``bench/temporal_peers.py``: a one-tool agent on the OpenAI Agents SDK on Temporal.

Imported only in the peer's own venv (``.venv-temporal-peer``): Temporal wants
workflows and activities defined at module level. The model is scripted: it
asks for the tool until the tool's output is in its input, then answers.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from agents import Agent, Model, ModelProvider, ModelResponse, Runner, Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from temporalio import activity, workflow
from temporalio.openai_agents import workflow as agents_workflow


class Reactive(Model):  # type: ignore[misc]
    """Calls the tool until its output is in the input, then answers."""

    async def get_response(self, system_instructions: Any, input: Any, *a: Any, **k: Any) -> Any:
        items = input if isinstance(input, list) else []
        if any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items):
            text = ResponseOutputText(
                text="Sunny, 21C: no umbrella needed.", annotations=[], type="output_text"
            )
            out: Any = ResponseOutputMessage(
                id="", content=[text], role="assistant", status="completed", type="message"
            )
        else:
            out = ResponseFunctionToolCall(
                arguments=json.dumps({"city": "Paris"}),
                call_id="call-1",
                name="weather",
                type="function_call",
                id="",
                status="completed",
            )
        return ModelResponse(output=[out], usage=Usage(), response_id=None)

    def stream_response(self, *a: Any, **k: Any) -> Any:
        raise NotImplementedError


class Provider(ModelProvider):  # type: ignore[misc]
    """Every model name is the scripted model."""

    def get_model(self, model_name: str | None) -> Model:
        return Reactive()


@activity.defn
async def weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny, 21C"


@workflow.defn
class WeatherAgent:
    """One agent turn: question -> weather tool (an activity) -> answer."""

    @workflow.run
    async def run(self, question: str) -> str:
        agent = Agent(
            name="weather",
            instructions="Answer about the weather.",
            tools=[
                agents_workflow.activity_as_tool(
                    weather, start_to_close_timeout=timedelta(seconds=30)
                )
            ],
        )
        result = await Runner.run(agent, question)
        return str(result.final_output)
