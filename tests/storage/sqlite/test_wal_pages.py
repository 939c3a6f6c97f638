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


async def _append_pages(path: Path, labels: dict[str, str]) -> list[Counter[str]]:
    """The b-trees each of eight lone appends' commits wrote, with their pages."""
    async with await SQLiteStore.open(path, durability="full") as store:
        world = World(store, namespace="p")
        sid = await world.session("s", labels=labels)
        run = await world.root("root", session=sid)
        before = len(_commits(path))
        for i in range(8):
            await store.append_run_record(world.note(run, f"n{i}"))
        commits = _commits(path)[before:]
        with sqlite3.connect(path) as conn:
            trees = dict(conn.execute("SELECT pageno, name FROM dbstat"))
    assert len(commits) == 8
    return [Counter(trees[page] for page in pages) for pages in commits]


async def test_a_lone_append_writes_no_counter_page(tmp_path: Path) -> None:
    """Its run's and its session's counters are on the record itself: the append writes
    the record's own b-trees (and the file's header page when the file grows), no more."""
    for written in await _append_pages(tmp_path / "pages.db", {}):
        assert set(written) - {"sqlite_schema"} <= _RECORD_TREES, written
        assert written["records"] >= 1, written


async def test_a_labelled_sessions_append_adds_to_its_labels_totals(tmp_path: Path) -> None:
    """With labels, one more b-tree: the labels' totals (both labels' rows on one page)."""
    labels = {"tenant": "acme", "tier": "gold"}
    for written in await _append_pages(tmp_path / "pages.db", labels):
        assert written["usage_labels"] == 1, written
        assert set(written) - {"sqlite_schema", "usage_labels"} <= _RECORD_TREES, written
