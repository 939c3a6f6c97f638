"""A long run on two Temporal workers: each worker keeps its own transcript cache.

Planner turns land on either worker; each reads the run from the record it
read last, so every turn sees exactly the log's transcript and the reads of
the whole run grow with its length, not with its square.
"""

from __future__ import annotations

import uuid
from typing import Any

from temporalio.client import Client

from agentledger.engine.temporal import connect
from agentledger.runtime import (
    Agent,
    PlanInput,
    PlanResult,
    PlanResumeInput,
    Runtime,
    ToolCall,
    tool,
)
from agentledger.storage import RunStatus
from agentledger.storage.protocol import Store
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.transcript import ToolResultPart
from tests.engine.temporal.harness import temporal_runtime
from tests.runtime.support import records
from tests.runtime.test_transcript_cache import Counting

TURNS = 30


@tool
async def tick(n: int) -> int:
    """Returns its input."""
    return n


class _Stepper:
    """Calls ``tick`` until the transcript holds ``TURNS - 1`` results, checking each turn's
    transcript against the whole log and noting which worker planned it."""

    def __init__(self, store: Store, worker: str, turns: list[str]) -> None:
        self.store = store
        self.worker = worker
        self.turns = turns

    async def _next(self, input: PlanInput) -> PlanResult:
        messages = await input.prepare_messages()
        assert list(messages) == await build_messages_from_run_log(self.store, input.run.run_id)
        self.turns.append(self.worker)
        done = sum(isinstance(p, ToolResultPart) for m in messages for p in m.parts)
        if done == TURNS - 1:
            return PlanResult.answer(f"{len(messages)} messages")
        return PlanResult.call(ToolCall(id=f"t{done}", name="tick", input={"n": done}))

    async def plan_start(self, input: PlanInput) -> PlanResult:
        return await self._next(input)

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        return await self._next(input)


async def test_a_long_run_moving_between_two_workers(
    temporal_client: Client, temporal_address: str, store: Store, session: str
) -> None:
    """Every planner turn, on whichever worker, gets the log's whole transcript; all the
    turns together read about as many records as the run has, not one log per turn."""
    queue = f"test-{uuid.uuid4().hex[:12]}"
    turns: list[str] = []
    counted = [Counting(store), Counting(store)]

    def setup(worker: int) -> Any:
        def register(runtime: Runtime) -> None:
            planner = _Stepper(store, f"w{worker}", turns)
            runtime.register_agent(Agent("stepper", planner, tools=[tick], max_turns=TURNS + 5))

        return register

    spread: dict[str, Any] = {  # planner turns go through the queue, to either worker
        "task_queue": queue,
        "eager_start": False,
        "disable_eager_activity_execution": True,
    }
    second = await connect(temporal_address)  # one worker per client, as in two processes
    async with (
        temporal_runtime(temporal_client, counted[0], setup(0), **spread) as runtime,  # type: ignore[arg-type]
        temporal_runtime(second, counted[1], setup(1), **spread),  # type: ignore[arg-type]
    ):
        out = await runtime.agent_client("stepper").run(session, "Count.")
    assert out.status is RunStatus.COMPLETED, out.failure
    assert out.text == f"{1 + 2 * (TURNS - 1)} messages"
    assert len(turns) == TURNS
    assert set(turns) == {"w0", "w1"}, turns  # the run moved between the workers
    logged = len(await records(store, out.run_id))
    read = counted[0].listed + counted[1].listed
    # per worker: its first read (whole), each record once more as new, and at most one
    # page again a turn; a whole read every turn would be about TURNS * logged / 2 records
    assert read <= 4 * logged + 32 * TURNS, (read, logged, turns)
