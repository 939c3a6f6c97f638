"""The span tree of each scenario on the in-process engine (the Temporal engine must match)."""

from __future__ import annotations

import pytest

from agentledger.runtime import Runtime
from agentledger.storage.sqlite import SQLiteStore
from tests.observability.conftest import Spans
from tests.observability.support import SCENARIOS, check_store_spans, draw, one_trace


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_span_tree(name: str, spans: Spans, store: SQLiteStore, session: str) -> None:
    """Run, turn, model and tool spans nest as the scenario says; store spans name every record."""
    scenario = SCENARIOS[name]()
    runtime = Runtime(store)
    scenario.setup(runtime)
    runs = await scenario.drive(runtime, session)
    await runtime.close()
    finished = spans.finished()
    assert draw(finished) == scenario.expected
    one_trace(finished)
    await check_store_spans(finished, store, runs)
