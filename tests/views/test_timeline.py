"""The waterfall of a run: an interrupted tool call is a bar from its scheduling to its
interruption, said to be interrupted, not "0 ms" with an empty bar."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
from msgspec.structs import replace

from agentledger.storage import MemoryStore, RecordBuilder, RunStart, RunStatus
from agentledger.views import timeline

T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def test_an_interrupted_tool_call_runs_until_it_was_interrupted() -> None:
    store = MemoryStore()
    await store.create_session("s", created_at=T0)
    run = RecordBuilder(RunStart(run_id="r", agent_id="a", session_id="s", started_at=T0))
    call = {"tool_call_id": "c1", "tool_name": "search", "input": {}}
    stop = T0 + timedelta(milliseconds=21)
    said = "interrupted: the run was canceled before this tool call finished"
    result = {"tool_call_id": "c1", "tool_name": "search", "content": said, "is_error": True}
    records = (
        run.record("tool_call_scheduled", msgspec.json.encode(call),
                   event_key="turn:1:tool:c1:scheduled", at=T0),
        run.record("tool_result_received", msgspec.json.encode(result),
                   event_key="turn:1:tool:c1:result", at=stop),
    )  # fmt: skip
    await store.start_root_run(replace(run.root_start(), records=records))
    await store.record_run_terminal(run.terminal(RunStatus.CANCELED, at=stop))
    meta = await store.load_run("r")
    log = (await store.list_run_records("r", limit=100)).records
    line = timeline(meta, log, stop)
    (row,) = [r for r in line.rows if r.kind == "tool"]
    assert row.label == "tool · search · interrupted"
    assert line.seconds(row) == 0.021
    assert row.note.startswith("interrupted: the run was canceled")
