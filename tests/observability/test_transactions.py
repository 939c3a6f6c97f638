"""One store transaction per activity: a one-tool run, both engines.

Every store write is one transaction [L1]-[L8]/[B1], and ``TracedStore`` opens
one span per store call, so the write spans of a run are its transactions.
A one-tool run has five activities (start, planner turn, tool call, planner
turn, completion), each committing its records, the lifecycle records included,
in one write. What a planner turn writes before it asks the model (the turn's
phase, the last step's results message, the steering messages waiting) rides
with the write before it: the start for turn 1, the lone tool call's result
for turn 2, so the stream still shows them before the model's live output.
So five; four in process, where the last planner turn records its final plan with
the run's completion (a Temporal worker looks for the session's next turn in
``complete_run``, so there the completion stays its own write).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from opentelemetry.sdk.trace import ReadableSpan
from temporalio.client import Client

from agentledger.engine import InProcessEngine
from agentledger.engine.base import Activity, Workflow
from agentledger.runtime import Runtime
from agentledger.runtime.wire import BEGIN_RUN, PLAN_TURN, TOOL_CALL
from agentledger.storage.sqlite import SQLiteStore
from tests.engine.temporal.harness import temporal_runtime
from tests.observability.conftest import Spans
from tests.observability.support import SCENARIOS
from tests.runtime.support import ONE_CALL, types

WRITES = [
    "start_root_run",  # begin_run: run_started, prompt, input, phase, turn 1's phase
    "append_run_records",  # plan_turn #1, its plan: usage, assistant message, schedule
    "append_turn_records",  # tool_call: its result, results message, turn 2's phase, steering
    "append_run_records",  # plan_turn #2, its plan: usage, answer
    "record_run_terminal",  # complete_run: run_completed
]
IN_PROCESS = [*WRITES[:3], "record_run_terminal"]  # plan_turn #2: usage, answer, run_completed


def _writes(spans: Sequence[ReadableSpan], run_id: str) -> list[str]:
    """The store writes of ``run_id``, in the order they started."""
    found = []
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        attributes = span.attributes or {}
        method = str(attributes.get("agentledger.store.method", ""))
        if not method or method.startswith(("load_", "list_")):
            continue
        if attributes.get("agentledger.run.id") == run_id:
            found.append(method)
    return found


async def test_one_tool_run_in_process(spans: Spans, store: SQLiteStore, session: str) -> None:
    """In process: four activities, four write transactions, the usual records."""
    scenario = SCENARIOS["tool_loop"]()
    runtime = Runtime(store)
    scenario.setup(runtime)
    [run_id] = await scenario.drive(runtime, session)
    await runtime.close()
    assert _writes(spans.finished(), run_id) == IN_PROCESS
    assert await types(store, run_id) == ONE_CALL


async def test_one_tool_run_on_temporal(
    spans: Spans, temporal_client: Client, store: SQLiteStore, session: str
) -> None:
    """On Temporal: five write transactions for five activities."""
    scenario = SCENARIOS["tool_loop"]()
    async with temporal_runtime(temporal_client, store, scenario.setup) as runtime:
        [run_id] = await scenario.drive(runtime, session)
    assert _writes(spans.finished(), run_id) == WRITES
    assert await types(store, run_id) == ONE_CALL


class _OlderWorker(InProcessEngine):
    """In process, with activities as a worker older than the loop runs them: they ignore
    the loop's requests to record the next turn's first write (fields they do not know)."""

    def bind(self, workflow: Workflow, activities: Mapping[str, Activity]) -> None:
        def older(fn: Activity, **unknown: Any) -> Activity:
            async def run(arg: Any) -> Any:
                return await fn(msgspec.structs.replace(arg, **unknown))

            return run

        table = dict(activities)
        table[BEGIN_RUN] = older(table[BEGIN_RUN], planning=False)
        table[TOOL_CALL] = older(table[TOOL_CALL], then_turn=0)
        table[PLAN_TURN] = older(table[PLAN_TURN], complete=False)
        super().bind(workflow, table)


async def test_a_loop_newer_than_its_worker_writes_the_turns_itself(
    spans: Spans, store: SQLiteStore, session: str
) -> None:
    """Activities that do not take a planner turn's first write along say so (their answer
    lacks the field): the turn writes it, as before, and the run's records are the same."""
    scenario = SCENARIOS["tool_loop"]()
    runtime = Runtime(store, engine=_OlderWorker())
    scenario.setup(runtime)
    [run_id] = await scenario.drive(runtime, session)
    await runtime.close()
    assert _writes(spans.finished(), run_id) == [
        "start_root_run",
        "append_turn_records",  # plan_turn #1, before the model: phase
        "append_run_records",
        "append_run_records",  # tool_call: its result alone
        "append_turn_records",  # plan_turn #2, before the model: results message, phase
        "append_run_records",
        "record_run_terminal",
    ]
    assert await types(store, run_id) == ONE_CALL
