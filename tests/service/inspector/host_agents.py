"""The host runtime of the inspector's action tests: ``agentledger serve --host-runtime`` loads
``build`` from here, and the tests seed suspended runs with the same agents.

Planners decide from what the run was told, so the service process and the
test process need no shared script:

- ``booker`` asks to confirm a booking, then says whether it was booked;
- ``asker`` asks which city, then answers with the city (at once when the
  conversation already holds its question: a fork after it); told ``slowly``
  it calls a tool that waits a minute instead (a run to cancel);
- ``fetcher`` waits for an outside tool's result, then repeats it;
- ``delegator`` asks ``asker`` (a child run, which asks which city), then
  repeats what it said;
- ``sender`` calls its ``once`` tool ``send_note`` (seeded in doubt: its result's
  write was lost), then repeats what the call returned.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentledger.runtime import (
    Agent,
    AwaitClarification,
    AwaitConfirmation,
    AwaitExternalTools,
    PlanInput,
    PlanResult,
    PlanResumeInput,
    Runtime,
    ToolCall,
    tool,
)
from agentledger.service import RuntimeClientHost
from agentledger.transcript import Message, TextPart

BOOKING = ToolCall(id="book-1", name="book_table", input={"restaurant": "Chez Demo", "people": 2})
FETCH = ToolCall(id="fetch-1", name="stock_level", input={"sku": "A-17"})


def _last_user_text(messages: tuple[Message, ...]) -> str:
    for message in reversed(messages):
        if message.role == "user":
            texts = [p.text for p in message.parts if isinstance(p, TextPart)]
            if texts:
                return texts[-1]
    return ""


class Booker:
    async def plan_start(self, input: PlanInput, /) -> PlanResult:
        return PlanResult(await_=AwaitConfirmation(calls=(BOOKING,), prompt="Book this table?"))

    async def plan_resume(self, input: PlanResumeInput, /) -> PlanResult:
        (outcome,) = input.tool_results
        if outcome.is_error:
            return PlanResult.answer(f"Not booked ({outcome.content}).")
        return PlanResult.answer(f"Booked: {outcome.content}.")


class Asker:
    async def plan_start(self, input: PlanInput, /) -> PlanResult:
        messages = await input.prepare_messages()
        said = _last_user_text(messages)
        if said == "slowly":
            return PlanResult.call(ToolCall(id="nap-1", name="nap", input={}))
        if any(m.role == "assistant" for m in messages):
            return PlanResult.answer(f"The weather in {said} is mild.")
        return PlanResult(await_=AwaitClarification(question="Which city do you mean?"))

    async def plan_resume(self, input: PlanResumeInput, /) -> PlanResult:
        said = _last_user_text(await input.prepare_messages())
        return PlanResult.answer(f"The weather in {said} is mild.")


class Fetcher:
    async def plan_start(self, input: PlanInput, /) -> PlanResult:
        return PlanResult(await_=AwaitExternalTools(calls=(FETCH,)))

    async def plan_resume(self, input: PlanResumeInput, /) -> PlanResult:
        (outcome,) = input.tool_results
        return PlanResult.answer(f"Stock: {outcome.content}")


SEND = ToolCall(id="send-1", name="send_note", input={"to": "ann"})


class Sender:
    async def plan_start(self, input: PlanInput, /) -> PlanResult:
        return PlanResult.call(SEND)

    async def plan_resume(self, input: PlanResumeInput, /) -> PlanResult:
        (outcome,) = input.tool_results
        if outcome.is_error:
            return PlanResult.answer(f"Not sent ({outcome.content}).")
        return PlanResult.answer(f"Sent: {outcome.content}.")


class Delegator:
    async def plan_start(self, input: PlanInput, /) -> PlanResult:
        return PlanResult.call(
            ToolCall(id="ask-child", name="asker", input={"request": "What is the weather?"})
        )

    async def plan_resume(self, input: PlanResumeInput, /) -> PlanResult:
        (outcome,) = input.tool_results
        return PlanResult.answer(f"The asker said: {outcome.content}")


@tool(confirm=True)
async def book_table(restaurant: str, people: int) -> str:
    """Book a table (asks the user first)."""
    return f"{people} at {restaurant}"


@tool
async def nap() -> str:
    """Wait a minute."""
    await asyncio.sleep(60)
    return "rested"


@tool(effect="once")
async def send_note(to: str) -> str:
    """Send a note (at most once)."""
    return f"note to {to}"


@tool
async def stock_level(sku: str) -> int:
    """Answered from outside the runtime."""
    raise AssertionError("an external tool is not run here")


def runtime(store: Any) -> Runtime:
    """The agents over ``store``."""
    built = Runtime(store)
    built.register_agent(Agent("booker", Booker(), tools=[book_table]))
    built.register_agent(Agent("asker", Asker(), tools=[nap]))
    built.register_agent(Agent("fetcher", Fetcher(), tools=[stock_level]))
    built.register_agent(Agent("delegator", Delegator(), agents=["asker"]))
    built.register_agent(Agent("sender", Sender(), tools=[send_note]))
    return built


def build(store: Any) -> RuntimeClientHost:
    """What ``agentledger serve --host-runtime tests.service.inspector.host_agents:build`` calls."""
    return RuntimeClientHost(runtime(store))
