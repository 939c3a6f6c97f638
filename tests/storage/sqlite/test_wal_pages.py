"""The pages one lone append writes: every page a commit dirties is written to the WAL
(and synced at ``synchronous=FULL``), so each b-tree an append touches costs a page.

Read from the real WAL file of a real store: each commit's frames, each frame's page
mapped to its table or index by SQLite's ``dbstat``.
"""

from __future__ import annotations

import sqlite3
import struct
from collections import Counter
from pathlib import Path

from agentledger.storage.conformance import World
from agentledger.storage.sqlite import SQLiteStore

_RECORD_TREES = {
    "records",
    "sqlite_autoindex_records_1",  # UNIQUE (run_id, seq)
    "sqlite_autoindex_records_2",  # UNIQUE (run_id, event_key)
    "records_by_session",
}


def _commits(path: Path) -> list[list[int]]:
    """The page numbers of each commit in the WAL, oldest first."""
    data = (path.parent / f"{path.name}-wal").read_bytes()
    page_size, salts = struct.unpack(">I", data[8:12])[0], data[16:24]
    commits: list[list[int]] = []
    pages: list[int] = []
    offset = 32
    while offset + 24 + page_size <= len(data) and data[offset + 8 : offset + 16] == salts:
        page, size = struct.unpack(">II", data[offset : offset + 8])
        pages.append(page)
        if size:  # a commit's last frame holds the database's size in pages
            commits.append(pages)
            pages = []
        offset += 24 + page_size
    return commits


async def test_a_lone_append_writes_one_counter_page(tmp_path: Path) -> None:
    """Its run's counters and its session's are one page of one table; with labels, one
    more for the labels' totals; nothing else beside the record's own b-trees."""
    path = tmp_path / "pages.db"
    async with await SQLiteStore.open(path, durability="full") as store:
        world = World(store, namespace="p")
        sid = await world.session("s", labels={"tenant": "acme", "tier": "gold"})
        run = await world.root("root", session=sid)
        before = len(_commits(path))
        appends = 8
        for i in range(appends):
            await store.append_run_record(world.note(run, f"n{i}"))
        commits = _commits(path)[before:]
        with sqlite3.connect(path) as conn:
            trees = dict(conn.execute("SELECT pageno, name FROM dbstat"))
    assert len(commits) == appends
    for pages in commits:
        written = Counter(trees[page] for page in pages)
        assert written["usage_counts"] == 1, written
        assert written["usage_labels"] == 1, written
        rest = set(written) - _RECORD_TREES - {"usage_counts", "usage_labels", "sqlite_schema"}
        assert rest == set(), written
