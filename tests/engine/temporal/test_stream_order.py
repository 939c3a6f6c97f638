"""The worker's stream follows the store on the Temporal engine, as it does in process."""

from __future__ import annotations

from temporalio.client import Client

from agentledger.runtime import QueueSink
from agentledger.storage.protocol import Store
from tests.engine.temporal.harness import temporal_runtime
from tests.runtime.ordering import assert_stream_in_commit_order, drive_family, setup_family


async def test_stream_follows_commit_order_with_children_and_suspensions(
    temporal_client: Client, store: Store, session: str
) -> None:
    """Parallel tool calls and child workflows, a confirmation, a child that suspends its
    parent: the worker's stream gets every recorded event in the session's commit order,
    and each planner turn's model deltas after everything recorded before the turn."""
    async with temporal_runtime(temporal_client, store, setup_family) as runtime:
        await drive_family(runtime, session)
        sink = runtime.stream
    assert isinstance(sink, QueueSink)
    await assert_stream_in_commit_order(store, sink.events, session)
