"""One store transaction per activity: a one-tool run, both engines.

Every store write is one transaction [L1]-[L8]/[B1], and ``TracedStore`` opens
one span per store call, so the write spans of a run are its transactions.
A one-tool run has five activities (start, planner turn, tool call, planner
turn, completion), each committing its records, the lifecycle records included,
in one write. What a planner turn writes before it asks the model (the turn's
phase, the last step's results message, the steering messages waiting) rides
with the write before it: the start for turn 1, the lone tool call's result
for turn 2, so the stream still shows them before the model's live output.
So five.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from temporalio.client import Client

from agentledger.runtime import Runtime
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
    """In process: five activities, five write transactions, the usual records."""
    scenario = SCENARIOS["tool_loop"]()
    runtime = Runtime(store)
    scenario.setup(runtime)
    [run_id] = await scenario.drive(runtime, session)
    await runtime.close()
    assert _writes(spans.finished(), run_id) == WRITES
    assert await types(store, run_id) == ONE_CALL


async def test_one_tool_run_on_temporal(
    spans: Spans, temporal_client: Client, store: SQLiteStore, session: str
) -> None:
    """On Temporal: the same five write transactions for the same five activities."""
    scenario = SCENARIOS["tool_loop"]()
    async with temporal_runtime(temporal_client, store, scenario.setup) as runtime:
        [run_id] = await scenario.drive(runtime, session)
    assert _writes(spans.finished(), run_id) == WRITES
    assert await types(store, run_id) == ONE_CALL
