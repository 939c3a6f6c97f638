"""A scripted model for the OpenAI Agents SDK: no network, answers fixed in advance."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents import Usage
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputItem,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary


def text(item_id: str, words: str) -> ResponseOutputMessage:
    """An assistant message output item."""
    return ResponseOutputMessage(
        id=item_id,
        content=[ResponseOutputText(annotations=[], text=words, type="output_text")],
        role="assistant",
        status="completed",
        type="message",
    )


def call(call_id: str, name: str, arguments: dict[str, Any]) -> ResponseFunctionToolCall:
    """A function-call output item."""
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}",
        call_id=call_id,
        name=name,
        arguments=json.dumps(arguments),
        type="function_call",
        status="completed",
    )


def reasoning(item_id: str, summary: str) -> ResponseReasoningItem:
    """A reasoning output item with a summary."""
    return ResponseReasoningItem(
        id=item_id, summary=[Summary(text=summary, type="summary_text")], type="reasoning"
    )


class ScriptedModel(Model):
    """Answers each model call with the next scripted output and records what it was sent."""

    def __init__(self, script: list[list[ResponseOutputItem]]) -> None:
        self.script = list(script)
        self.inputs: list[list[TResponseInputItem]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        self.inputs.append(
            [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        )
        if not self.script:
            raise AssertionError("the model was called more often than scripted")
        return ModelResponse(output=self.script.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the tests run the model without streaming")
