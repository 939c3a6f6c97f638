"""The app of worker processes in the tool-effects crash test (``--app ...:setup``).

``payer`` calls its ``once`` tool ``charge_slowly`` and answers with the result. The
tool leaves a ``charged-<run>`` marker (its side effect, seen from the test process),
then takes ``$AGENTLEDGER_TEST_SLOW_SECONDS``: the test kills the worker meanwhile.
"""

from __future__ import annotations

import asyncio
import os

from agentledger.runtime import (
    Agent,
    PlanInput,
    PlanResult,
    PlanResumeInput,
    Runtime,
    ToolCall,
    ToolContext,
    tool,
)
from tests.engine.temporal.apps import SLOW_SECONDS_ENV, mark


@tool(effect="once")
async def charge_slowly(cents: int, ctx: ToolContext) -> str:
    """Charge the card (at most once), slowly."""
    mark(f"charged-{ctx.run_id}")
    await asyncio.sleep(float(os.environ.get(SLOW_SECONDS_ENV, "0")))
    return f"charged {cents}"


class Payer:
    """Charges once, then answers with what the charge returned."""

    async def plan_start(self, input: PlanInput) -> PlanResult:
        return PlanResult.call(ToolCall(id="pay-1", name="charge_slowly", input={"cents": 500}))

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        return PlanResult.answer(f"finished: {input.tool_results[0].content}")


def setup(runtime: Runtime) -> None:
    """One agent, ``payer``."""
    runtime.register_agent(Agent("payer", Payer(), tools=[charge_slowly]))
