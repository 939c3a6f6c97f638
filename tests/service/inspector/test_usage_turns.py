"""A compaction's summariser tokens count in the turn it compacted, not in a turn 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentledger.runtime import records as rt
from agentledger.runtime.records import KeyKind, parse_event_key
from agentledger.service.inspector.digest import read_log
from agentledger.storage.sqlite import SQLiteStore
from agentledger.views.usage import usage_of
from tests.service.inspector.test_windows import _compacted

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_summariser_usage_is_counted_in_its_turn(tmp_path: Path) -> None:
    last = await _compacted(tmp_path / "compacted.db")
    store = await SQLiteStore.open(tmp_path / "compacted.db")
    try:
        log = await read_log(store.list_run_records, last)
    finally:
        await store.close()
    summariser = [
        r for r in log.records if r.type == rt.MODEL_USAGE and parse_event_key(r.event_key).history
    ]
    assert summariser, "the last turn was compacted"
    turn = parse_event_key(summariser[0].event_key).turn
    assert turn >= 1
    usage = usage_of(log.records)
    assert (last, 0) not in usage.by_turn
    assert usage.by_turn[(last, turn)].calls == 2  # the planner's call and the summariser's
    assert usage.by_model["summariser"].calls == 1
    assert all(
        parse_event_key(r.event_key).kind is KeyKind.USAGE
        for r in log.records
        if r.type == rt.MODEL_USAGE
    )
