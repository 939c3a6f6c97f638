"""The identity types: a stored run's start is rebuilt from its RunMeta in one place."""

from __future__ import annotations

from datetime import UTC, datetime

from agentledger.storage import MemoryStore, RecordBuilder, RunStart

AT = datetime(2026, 1, 1, tzinfo=UTC)


async def test_a_runs_start_comes_back_from_its_meta() -> None:
    store = MemoryStore()
    await store.create_session("s", created_at=AT)
    start = RunStart(
        run_id="r1", agent_id="chat", session_id="s", started_at=AT, labels={"tenant": "acme"}
    )
    await store.start_root_run(RecordBuilder(start).root_start())
    meta = await store.load_run("r1")
    assert RunStart.of(meta) == start
    assert RunStart.of(meta).labels is not meta.labels  # a copy: the start owns its labels
    assert RunStart.of(meta, predecessor_run_id="r0").predecessor_run_id == "r0"
