"""The writer thread's checkpoints let the write-ahead log start over.

A log that is never copied to its end is never restarted: it grows, and every
commit then extends the file. Commits are counted from the log's current
generation (see ``wal_commits``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentledger.storage.conformance import World
from agentledger.storage.sqlite import SQLiteStore, check_invariants
from agentledger.storage.sqlite.group import CHECKPOINT_EVERY
from tests.storage.sqlite.test_group_commit import wal_commits


@pytest.mark.parametrize("durability", ["full", "normal"])
async def test_the_log_starts_over_while_appends_go_on(
    db_path: Path, durability: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Appends never stop, so every checkpoint runs beside them: the log still starts
    over, and holds the commits of a checkpoint interval or two, not all of them."""
    from agentledger.storage.sqlite import group

    monkeypatch.setattr(group, "HERE_COMMIT_SECONDS", float("inf"))  # every disk is fast
    async with await SQLiteStore.open(db_path, durability=durability) as store:
        world = World(store)
        run = await world.root("r", session=await world.session("s"))
        writer = store._writer
        assert writer is not None
        for i in range(6 * CHECKPOINT_EVERY):
            await store.append_run_record(world.note(run, f"k{i}"))
        assert writer.checkpoints >= 2
        assert wal_commits(db_path) < 3 * CHECKPOINT_EVERY
    assert check_invariants(db_path) == []
