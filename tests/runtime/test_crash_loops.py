"""Reading a crash-loop pause from a suspended run's checkpoint (runtime/crash_loops.py)."""

from __future__ import annotations

import pytest

from agentledger.errors import CorruptRecordError
from agentledger.runtime.checkpoint import checkpoint_id
from agentledger.runtime.crash_loops import load_crash_loop, load_crash_loops
from agentledger.storage import MemoryStore, RecordBuilder, RunStart
from agentledger.storage.types import Checkpoint
from tests.runtime.support import now_ms


async def _suspended(store: MemoryStore, run_id: str, checkpoint: Checkpoint) -> None:
    run = RunStart(run_id=run_id, agent_id="a", session_id="s", started_at=now_ms())
    builder = RecordBuilder(run)
    await store.start_root_run(builder.root_start())
    await store.record_run_suspension(builder.suspension(checkpoint, at=now_ms()))


async def test_a_checkpoint_another_writer_stored_is_its_own_not_a_crash_loop() -> None:
    store = MemoryStore()
    await store.create_session("s", created_at=now_ms())
    await _suspended(store, "r1", Checkpoint(id="theirs", data=b"\x00 not ours"))
    assert await load_crash_loop(store, "r1") is None
    assert await load_crash_loops(store, await store.list_runs_by_session("s")) == {}


async def test_the_runtimes_own_checkpoint_that_cannot_be_read_is_corrupt() -> None:
    store = MemoryStore()
    await store.create_session("s", created_at=now_ms())
    await _suspended(store, "r1", Checkpoint(id=checkpoint_id("r1"), data=b"\x00 damaged"))
    with pytest.raises(CorruptRecordError) as caught:
        await load_crash_loop(store, "r1")
    assert caught.value.run_id == "r1"
