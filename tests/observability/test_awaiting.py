"""A suspended run's span says what the run waits for (``agentledger.run.awaiting``)."""

from __future__ import annotations

from agentledger.runtime import (
    Agent,
    AwaitClarification,
    PlanInput,
    PlanResult,
    PlanResumeInput,
    Runtime,
)
from agentledger.storage import RunStatus
from agentledger.storage.sqlite import SQLiteStore
from tests.observability.conftest import Spans


class _Asker:
    async def plan_start(self, input: PlanInput) -> PlanResult:
        return PlanResult(await_=AwaitClarification(question="Which city?"))

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        return PlanResult.answer("ok")


async def test_a_suspended_run_span_names_what_it_waits_for(
    spans: Spans, store: SQLiteStore, session: str
) -> None:
    """Suspended: ``agentledger.run.awaiting`` is the question's kind (``crash_loop`` for a
    run paused by a turn that kept killing its worker); a completed run has none."""
    runtime = Runtime(store)
    runtime.register_agent(Agent("asker", _Asker()))
    client = runtime.agent_client("asker")
    first = await client.run(session, "Weather?")
    assert first.status is RunStatus.SUSPENDED
    done = await client.resume(session, first.run_id, "Paris")
    await runtime.close()
    runs = {
        (s.attributes or {})["agentledger.run.id"]: s.attributes or {}
        for s in spans.finished()
        if s.name == "agentledger.run"
    }
    assert runs[first.run_id]["agentledger.run.awaiting"] == "clarification"
    assert "agentledger.run.awaiting" not in runs[done.run_id]
