"""A first run on the real Temporal server: a tool loop end to end."""

from __future__ import annotations

import uuid

from temporalio.client import Client

from agentledger.runtime.agent import Agent
from agentledger.runtime.planner import PlanInput, PlanResult, PlanResumeInput, ToolCall
from agentledger.runtime.runtime import Runtime
from agentledger.runtime.tools import tool
from agentledger.storage.protocol import Store
from agentledger.storage.types import RunStatus
from agentledger.transcript import Message, TextPart
from tests.engine.temporal.harness import now_ms, temporal_runtime


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class AddPlanner:
    async def plan_start(self, input: PlanInput) -> PlanResult:
        return PlanResult.call(ToolCall(id="c1", name="add", input={"a": 2, "b": 3}))

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        return PlanResult.answer(f"sum is {input.tool_results[0].content}")


def setup(runtime: Runtime) -> None:
    runtime.register_agent(Agent("calc", AddPlanner(), tools=[add]))


async def test_tool_loop_on_temporal(temporal_client: Client, store: Store) -> None:
    session = f"s-{uuid.uuid4().hex}"
    await store.create_session(session, created_at=now_ms())  # type: ignore[attr-defined]
    async with temporal_runtime(temporal_client, store, setup) as runtime:
        out = await runtime.agent_client("calc").run(
            session, [Message(role="user", parts=(TextPart(text="2+3?"),))]
        )
    assert out.status is RunStatus.COMPLETED
    assert out.text == "sum is 5"
    records = (await store.list_run_records(out.run_id)).records
    assert records[0].type == "run_started"
    assert records[-1].type == "run_completed"
