"""``agentledger transcript`` of a fork: a branch of its source at the message it leaves
it after, numbered as the listing numbers it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentledger.storage.sqlite import SQLiteStore
from tests.cli.conftest import run_cli
from tests.views.test_conversation import forked_session


async def _seed(db: Path) -> None:
    store = await SQLiteStore.open(str(db))
    try:
        await forked_session(store)
    finally:
        await store.close()


def test_a_fork_is_a_branch_of_its_source_at_a_message(tmp_path: Path) -> None:
    db = tmp_path / "branch.db"
    asyncio.run(_seed(db))
    done = run_cli("--db", str(db), "transcript", "fork")
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    assert lines[0] == "fork is a branch of two at message #2 (cut after its record 3)"
    assert lines[1] == "two follows one"
    # message #2 is the source's user message, the last before the cut
    assert lines[lines.index("#2 user  (two record 3, by reference)") + 1] == "    again"
    assert lines[lines.index("#3 user  (fork record 3)") + 1] == "    instead"
