"""ScriptedModel: a ModelClient that answers from a script, for tests and examples.

It replays a fixed list of responses in order, records every request it got
(for assertions), and fails loudly, naming what it was asked, when the
script runs out: a test that makes one model call too many should say so,
not hang or invent an answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

from agentledger.providers._json import dumps
from agentledger.providers.model import (
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    StreamEnd,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStart,
    Usage,
)
from agentledger.transcript import Message, Part, TextPart, ThinkingPart, ToolUsePart

__all__ = ["ScriptExhaustedError", "ScriptedModel", "reply", "tool_calls"]


class ScriptExhaustedError(AssertionError):
    """The model was called more times than its script has responses."""


def reply(text: str, *, input_tokens: int = 10, output_tokens: int = 5) -> ModelResponse:
    """A scripted final answer of plain text."""
    return ModelResponse(
        message=Message(role="assistant", parts=(TextPart(text=text),)),
        stop_reason="end_turn",
        usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens),
    )


def tool_calls(*calls: tuple[str, str, dict[str, Any]], text: str = "") -> ModelResponse:
    """A scripted answer asking for tool calls, each ``(id, name, input)``."""
    parts: list[Part] = [TextPart(text=text)] if text else []
    parts += [ToolUsePart(id=i, name=n, input=dict(a)) for i, n, a in calls]
    return ModelResponse(
        message=Message(role="assistant", parts=tuple(parts)),
        stop_reason="tool_use",
        usage=Usage(input_tokens=10, output_tokens=5),
    )


class ScriptedModel:
    """Answers each request with the next scripted response.

    Args:
        responses: the script, in call order (a ``Message`` is taken as an
            end-of-turn response with no usage).
        chunk: characters per text delta when streaming.
    """

    def __init__(self, responses: Iterable[ModelResponse | Message], *, chunk: int = 8) -> None:
        self._script: list[ModelResponse] = [
            r if isinstance(r, ModelResponse) else ModelResponse(message=r, stop_reason="end_turn")
            for r in responses
        ]
        self._chunk = max(1, chunk)
        self.requests: list[ModelRequest] = []
        """Every request received, in order."""

    @property
    def remaining(self) -> int:
        """Responses not yet used."""
        return len(self._script) - len(self.requests)

    def _next(self, request: ModelRequest) -> ModelResponse:
        index = len(self.requests)
        self.requests.append(request)
        if index >= len(self._script):
            last = request.messages[-1] if request.messages else None
            raise ScriptExhaustedError(
                f"ScriptedModel has {len(self._script)} scripted response(s) but was called "
                f"{index + 1} times; the unexpected request ends with {last!r}"
            )
        return self._script[index]

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The next scripted response."""
        return self._next(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """The next scripted response as deltas, ending with its StreamEnd."""
        response = self._next(request)
        for index, part in enumerate(response.message.parts):
            if isinstance(part, TextPart | ThinkingPart):
                delta = TextDelta if isinstance(part, TextPart) else ThinkingDelta
                for start in range(0, len(part.text), self._chunk):
                    yield delta(index=index, text=part.text[start : start + self._chunk])
            elif isinstance(part, ToolUsePart):
                yield ToolUseStart(index=index, id=part.id, name=part.name)
                yield ToolInputDelta(index=index, partial_json=dumps(part.input))
        yield StreamEnd(response=response)
