"""How much Temporal history a run costs: the numbers the module docstring promises.

A run is one workflow; Temporal ends a workflow at 51,200 history events or
50 MiB. These tests measure, on the real server, the events of a run that
answers at once and of each tool turn, so ``EVENTS_PER_RUN`` and
``EVENTS_PER_TOOL_TURN`` (and the turn counts derived from them in the docs)
stay true, and bound how many times a tool's output is copied into history.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client

from agentledger.engine.temporal.options import (
    EVENTS_PER_EXTRA_CALL,
    EVENTS_PER_PARALLEL_TURN,
    EVENTS_PER_RUN,
    EVENTS_PER_TOOL_TURN,
    tool_turns_before_history_limit,
)
from agentledger.runtime import (
    Agent,
    PlanInput,
    PlanResult,
    PlanResumeInput,
    Runtime,
    ToolCall,
    tool,
    user_message,
)
from agentledger.storage import RunStatus
from agentledger.storage.sqlite import SQLiteStore
from tests.engine.temporal.harness import now_ms, temporal_runtime


@tool
async def echo(n: int, size: int = 0) -> str:
    """Return ``size`` bytes (or the number)."""
    return "z" * size if size else str(n)


class Turns:
    """``turns`` tool turns of ``calls`` parallel calls each, then an answer."""

    def __init__(self, turns: int, calls: int, size: int) -> None:
        self.turns, self.calls, self.size = turns, calls, size

    async def plan_start(self, input: PlanInput) -> PlanResult:
        return self._plan(1)

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        return self._plan(input.run.turn)

    def _plan(self, turn: int) -> PlanResult:
        if turn > self.turns:
            return PlanResult.answer("done")
        calls = (
            ToolCall(id=f"t{turn}c{i}", name="echo", input={"n": i, "size": self.size})
            for i in range(self.calls)
        )
        return PlanResult.call(*calls)


async def _history(
    client: Client, store: SQLiteStore, turns: int, calls: int = 1, size: int = 0
) -> tuple[int, int]:
    """(events, bytes) of one run's finished workflow history."""
    session = f"s-{uuid.uuid4().hex}"
    await store.create_session(session, created_at=now_ms())

    def setup(runtime: Runtime) -> None:
        runtime.register_agent(
            Agent("turns", Turns(turns, calls, size), tools=[echo], max_turns=64)
        )

    async with temporal_runtime(client, store, setup) as runtime:
        out = await runtime.agent_client("turns").run(session, [user_message("go")])
    assert out.status is RunStatus.COMPLETED, out.failure
    described = await client.get_workflow_handle(out.run_id).describe()
    info: Any = described.raw_description.workflow_execution_info
    return described.history_length, int(info.history_size_bytes)


async def test_events_per_run_and_per_tool_turn(temporal_client: Client, tmp_path: Path) -> None:
    """13 events for a run that answers at once or after one one-call tool turn (nothing
    waits behind it: no step to start the session's next turn; the planner turn's activity
    runs the call and the turn after it), 6 more per further one-call tool turn (the call's
    activity runs the turn after it), 12 and 3 to 6 per extra call for a turn of parallel
    calls."""
    store = await SQLiteStore.open(tmp_path / "limits.db", durability="normal")
    try:
        assert (await _history(temporal_client, store, 0))[0] == EVENTS_PER_RUN
        for turns in (1, 3):
            events, _ = await _history(temporal_client, store, turns)
            assert events == EVENTS_PER_RUN + (turns - 1) * EVENTS_PER_TOOL_TURN
        events, _ = await _history(temporal_client, store, 2, calls=3)
        base = EVENTS_PER_RUN + 2 * EVENTS_PER_PARALLEL_TURN
        assert base + 2 * 2 * 3 <= events <= base + 2 * 2 * EVENTS_PER_EXTRA_CALL
    finally:
        await store.close()
    assert tool_turns_before_history_limit() == 8531
    assert tool_turns_before_history_limit(limit=10_240) == 1705
    assert tool_turns_before_history_limit(4) == 1706


async def test_a_tool_output_is_copied_into_history_a_bounded_number_of_times(
    temporal_client: Client, tmp_path: Path
) -> None:
    """Each turn's tool output lands in history about once: the result the call's activity
    carries back (it runs the next planner turn itself, whose input is not in history; it
    records the step's results message itself, so that is not carried either)."""
    store = await SQLiteStore.open(tmp_path / "limits.db", durability="normal")
    try:
        _, small = await _history(temporal_client, store, 2, size=1)
        _, large = await _history(temporal_client, store, 2, size=20_000)
    finally:
        await store.close()
    copies = (large - small) / (2 * 20_000)
    assert 0.8 <= copies <= 1.5, copies


class Answers:
    """Answers every turn at once with a 1 KB text."""

    async def plan_start(self, input: PlanInput) -> PlanResult:
        return PlanResult.answer("a" * 1000)

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        return PlanResult.answer("a" * 1000)


async def test_a_next_turn_workflow_carries_the_reference_not_the_history(
    temporal_client: Client, tmp_path: Path
) -> None:
    """[V1] turn 30's workflow history is the size of turn 2's: its input names the turn
    before, never the conversation."""
    store = await SQLiteStore.open(tmp_path / "turns.db", durability="normal")
    session = f"s-{uuid.uuid4().hex}"
    await store.create_session(session, created_at=now_ms())

    def setup(runtime: Runtime) -> None:
        runtime.register_agent(Agent("chat", Answers()))

    sizes: list[int] = []
    try:
        async with temporal_runtime(temporal_client, store, setup) as runtime:
            client = runtime.agent_client("chat")
            previous = None
            for i in range(30):
                out = await client.run(session, "q" * 1000 + str(i), after=previous)
                assert out.status is RunStatus.COMPLETED, out.failure
                previous = out.run_id
                described = await temporal_client.get_workflow_handle(out.run_id).describe()
                info: Any = described.raw_description.workflow_execution_info
                sizes.append(int(info.history_size_bytes))
            transcript = await runtime.transcript(previous)
    finally:
        await store.close()
    assert len(transcript) == 60
    assert sizes[-1] <= sizes[1] * 1.05, sizes
