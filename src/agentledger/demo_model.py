"""DemoModel: a small deterministic ModelClient for ``agentledger demo``.

It plays a travel concierge and a research assistant well enough to show
every runtime feature offline: it calls tools (several at once), delegates
to another agent, asks before booking, and composes answers from tool
results. Same transcript in, same answer out; no network, no key.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from agentledger.providers.model import (
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    StreamEnd,
    TextDelta,
    ToolUseStart,
    Usage,
)
from agentledger.transcript import Message, Part, TextPart, ToolResultPart, ToolUsePart

__all__ = ["DemoModel"]

CITIES = ("Paris", "Tokyo", "Lisbon", "New York", "Sydney", "Rome")

FACTS = {
    "eiffel": "The Eiffel Tower was built between 1887 and 1889 by Gustave Eiffel's company "
    "for the 1889 World's Fair; at 300 m it was the tallest structure in the world until 1930.",
    "tokyo": "Tokyo became Japan's capital in 1868, when the emperor moved there from Kyoto.",
}


def _text(message: Message) -> str:
    return " ".join(p.text for p in message.parts if isinstance(p, TextPart))


def _response(parts: list[Part], request: ModelRequest) -> ModelResponse:
    message = Message(role="assistant", parts=tuple(parts))
    seen = sum(len(_text(m)) for m in request.messages)
    uses = any(isinstance(p, ToolUsePart) for p in parts)
    return ModelResponse(
        message=message,
        stop_reason="tool_use" if uses else "end_turn",
        usage=Usage(input_tokens=seen // 4 + 1, output_tokens=len(_text(message)) // 4 + 1),
        model=request.model,
    )


class DemoModel:
    """Answers as ``demo-concierge`` or ``demo-research`` (the request's model name)."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The deterministic answer to ``request``."""
        last = request.messages[-1]
        results = [p for p in last.parts if isinstance(p, ToolResultPart)]
        if results:
            return _response([TextPart(text=self._summarize(request, results))], request)
        ask = _text(last)
        if request.model.endswith("research"):
            return _response([TextPart(text=self._research(ask))], request)
        return _response(self._concierge(request, ask), request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """The same answer, as text deltas and tool-use starts, ending with StreamEnd."""
        response = await self.complete(request)
        for index, part in enumerate(response.message.parts):
            if isinstance(part, TextPart):
                for word in re.findall(r"\S+\s*", part.text):
                    yield TextDelta(index=index, text=word)
            elif isinstance(part, ToolUsePart):
                yield ToolUseStart(index=index, id=part.id, name=part.name)
        yield StreamEnd(response=response)

    # ------------------------------------------------------------------ roles

    @staticmethod
    def _next_ids(request: ModelRequest, count: int) -> list[str]:
        used = sum(isinstance(p, ToolUsePart) for m in request.messages for p in m.parts)
        return [f"call_{used + i + 1}" for i in range(count)]

    def _concierge(self, request: ModelRequest, ask: str) -> list[Part]:
        lower = ask.lower()
        tools = {t.name for t in request.tools}
        if "weather" in lower and "get_weather" in tools:
            cities = [c for c in CITIES if c.lower() in lower] or ["Paris"]
            ids = self._next_ids(request, len(cities))
            return [
                TextPart(text=f"Let me check the weather in {' and '.join(cities)}."),
                *(
                    ToolUsePart(id=i, name="get_weather", input={"city": c})
                    for i, c in zip(ids, cities, strict=True)
                ),
            ]
        if ("research" in lower or "when was" in lower) and "research" in tools:
            question = ask.split(":", 1)[-1].strip()
            (call_id,) = self._next_ids(request, 1)
            return [
                TextPart(text="I'll ask the research agent."),
                ToolUsePart(id=call_id, name="research", input={"request": question}),
            ]
        if "book" in lower and "book_table" in tools:
            people = re.search(r"(\d+)\s*(?:people|persons|guests)?", ask)
            place = re.search(r"\bat ([A-Z][\w' ]+?)(?: at |[.,]|$)", ask)
            when = re.search(r"(\d{1,2}:\d{2})", ask)
            (call_id,) = self._next_ids(request, 1)
            booking: dict[str, Any] = {
                "restaurant": place.group(1).strip() if place else "Le Jules Verne",
                "people": int(people.group(1)) if people else 2,
                "time": when.group(1) if when else "20:00",
            }
            return [
                TextPart(
                    text=f"I can book {booking['restaurant']} for {booking['people']} at "
                    f"{booking['time']}. Shall I go ahead?"
                ),
                ToolUsePart(id=call_id, name="book_table", input=booking),
            ]
        if "flight" in lower and "search_flights" in tools:
            cities = [c for c in CITIES if c.lower() in lower] or ["Paris", "Tokyo"]
            (call_id,) = self._next_ids(request, 1)
            route = {"origin": cities[0], "destination": cities[-1]}
            return [
                TextPart(text="Searching every airline for you; this can take a while."),
                ToolUsePart(id=call_id, name="search_flights", input=route),
            ]
        said = " ".join(ask.split())
        if not said:
            return [TextPart(text="I can check the weather, research a topic, or book a table.")]
        if len(said) > 80:
            said = said[:79] + "…"
        return [
            TextPart(
                text=f"You said: “{said}”. I am the demo concierge: I can check the weather "
                "(try “weather in Lisbon”), research a topic (“research: when was the Eiffel "
                "Tower built?”) or book a table (“book a table for 2 at 19:00”)."
            )
        ]

    @staticmethod
    def _research(ask: str) -> str:
        lower = ask.lower()
        for key, fact in FACTS.items():
            if key in lower:
                return fact
        return f"I found nothing reliable about {ask!r}."

    @staticmethod
    def _summarize(request: ModelRequest, results: list[ToolResultPart]) -> str:
        names = {
            p.id: p.name for m in request.messages for p in m.parts if isinstance(p, ToolUsePart)
        }
        lines = []
        for result in results:
            name = names.get(result.tool_use_id, "tool")
            content = result.content
            if result.is_error:
                lines.append(f"{name} did not work out ({content}).")
            elif name == "get_weather" and isinstance(content, dict):
                lines.append(f"{content['city']}: {content['temp_c']}°C, {content['conditions']}.")
            elif name == "research":
                lines.append(f"From the research agent: {content}")
            elif name == "book_table":
                lines.append(f"Done: {content}.")
            else:
                lines.append(f"{name}: {content}")
        return " ".join(lines)
