"""The same span trees on the Temporal engine: one trace from the client through the worker."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from agentledger.storage.sqlite import SQLiteStore
from tests.engine.temporal.harness import temporal_runtime
from tests.observability.conftest import Spans
from tests.observability.support import (
    SCENARIOS,
    check_store_spans,
    check_turns,
    draw,
    one_trace,
)


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_span_tree(
    name: str, spans: Spans, temporal_client: Client, store: SQLiteStore, session: str
) -> None:
    """Workflow spans (run, agent tool) and activity spans nest as on the in-process engine."""
    scenario = SCENARIOS[name]()
    async with temporal_runtime(temporal_client, store, scenario.setup) as runtime:
        runs = await scenario.drive(runtime, session)
    finished = spans.finished()
    assert draw(finished) == scenario.expected
    one_trace(finished)
    check_turns(finished)
    await check_store_spans(finished, store, runs)
