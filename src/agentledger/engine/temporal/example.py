"""A small app for the Temporal engine: an ``adder`` agent and a script that runs it.

``setup`` is what ``agentledger worker`` loads by default (``--app
agentledger.engine.temporal.example:setup``): one agent, ``adder``, whose
planner needs no model: it asks the ``add`` tool to sum the numbers in the
user's message, then answers with the sum. Running this module starts one
run from a third terminal and prints how it ended::

    python -m agentledger.engine.temporal.example --temporal 127.0.0.1:7233 \\
        --db ledger.db "what is 2 + 3 + 4?"

It exits 0 after a completed run, 1 otherwise.
"""

from __future__ import annotations

import asyncio
import re
import sys
import uuid
from datetime import UTC, datetime

import click

from agentledger.runtime.agent import Agent
from agentledger.runtime.planner import PlanInput, PlanResult, PlanResumeInput, ToolCall
from agentledger.runtime.runtime import Runtime
from agentledger.runtime.tools import tool
from agentledger.storage.types import RunStatus
from agentledger.transcript import Message, TextPart

__all__ = ["AGENT_ID", "SumPlanner", "add", "main", "setup"]

AGENT_ID = "adder"
_NUMBER = re.compile(r"-?\d+")


@tool
async def add(numbers: list[int]) -> int:
    """Add up a list of integers."""
    return sum(numbers)


class SumPlanner:
    """Calls ``add`` with the integers of the last user message, then answers with the sum."""

    async def plan_start(self, input: PlanInput) -> PlanResult:
        """First turn: one ``add`` call."""
        messages = await input.prepare_messages()
        text = " ".join(p.text for p in messages[-1].parts if isinstance(p, TextPart))
        numbers = [int(n) for n in _NUMBER.findall(text)]
        if not numbers:
            return PlanResult.answer("Give me some numbers to add.")
        return PlanResult.call(ToolCall(id="add-1", name="add", input={"numbers": numbers}))

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        """Second turn: the answer."""
        result = input.tool_results[0]
        if result.is_error:
            return PlanResult.answer(f"I could not add them: {result.content}")
        return PlanResult.answer(f"The sum is {result.content}.")


def setup(runtime: Runtime) -> None:
    """Register the ``adder`` agent and its ``add`` tool."""
    runtime.register_agent(Agent(AGENT_ID, SumPlanner(), tools=[add], description="Adds numbers."))


def _now_ms() -> datetime:
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


async def run_once(temporal: str, db: str, question: str, *, task_queue: str) -> int:
    """Start one ``adder`` run in a new session through Temporal and print its answer."""
    from agentledger.engine.temporal.client import connect
    from agentledger.engine.temporal.engine import TemporalEngine
    from agentledger.target import Target

    store = await Target.parse(db, default=False).open()
    try:
        client = await connect(temporal)
        runtime = Runtime(store, engine=TemporalEngine(client, task_queue=task_queue))
        setup(runtime)
        session_id = f"example-{uuid.uuid4().hex[:12]}"
        await store.create_session(session_id, created_at=_now_ms())
        message = Message(role="user", parts=(TextPart(text=question),))
        out = await runtime.agent_client(AGENT_ID).run(session_id, [message])
        print(f"run {out.run_id} (session {session_id}): {out.status}")
        print(out.text)
        return 0 if out.status is RunStatus.COMPLETED else 1
    finally:
        await store.close()


@click.command(help="Start one adder run through Temporal.")
@click.option("--temporal", required=True, metavar="HOST:PORT", help="the Temporal frontend")
@click.option("--db", "--store", "target", required=True, metavar="TARGET",
              help="the workers' store (a service URL takes $AGENTLEDGER_TOKEN)")  # fmt: skip
@click.option("--task-queue", default="agentledger", show_default=True)
@click.argument("question", default="what is 2 + 3 + 4?")
def main(temporal: str, target: str, task_queue: str, question: str) -> None:
    """Run once and exit without Temporal's teardown race."""
    from agentledger.engine.temporal.cli import exit_now

    try:
        code = asyncio.run(run_once(temporal, target, question, task_queue=task_queue))
    except Exception as e:  # a one-line reason, as the CLI does
        print(f"agentledger example: {type(e).__name__}: {e}", file=sys.stderr)
        code = 1
    exit_now(code)


if __name__ == "__main__":
    main()
