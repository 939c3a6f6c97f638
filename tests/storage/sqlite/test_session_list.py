"""A list_sessions page on SQLite reads an index range ordered as the page is [D6].

The query plans name the label index (or the status index) and never sort; the
work a page does (SQLite VM steps) does not grow with the table: a page of a rare
label over 4,000 sessions costs what it costs over 1,000.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentledger.storage import SessionStatus
from agentledger.storage.listing import session_query
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.sqlite.session_list import page_sql

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ACTIVE, ENDED = SessionStatus.ACTIVE, SessionStatus.ENDED


async def _fill(path: Path, start: int, stop: int, *, others: bool = False) -> None:
    """Sessions ``start`` to ``stop``: a common label, a rare one (1 in 100), a third ended;
    ``others``: active sessions of another tenant, which none of the tests' filters keep."""
    async with await SQLiteStore.open(path, durability="normal") as store:
        for i in range(start, stop):
            labels = {"tenant": "t9" if others else f"t{i % 2}"}
            if i % 100 == 50 and not others:
                labels["rare"] = "yes"
            sid = f"s{i:05d}"
            await store.create_session(sid, created_at=T0 + timedelta(seconds=i), labels=labels)
            if i % 3 == 0 and not others:
                await store.end_session(sid, ended_at=T0 + timedelta(seconds=i + 1))


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("listing") / "listing.db"
    asyncio.run(_fill(path, 0, 1000))
    return path


def _cursor(path: Path, statuses: tuple[SessionStatus, ...], labels: dict[str, str]) -> str:
    async def first() -> str:
        async with await SQLiteStore.open(path) as store:
            return (await store.list_sessions(statuses, labels=labels, limit=3)).next_cursor

    return asyncio.run(first())


FILTERS = [
    ((), {}, "sessions_newest_first"),
    ((ACTIVE,), {}, "sessions_by_status"),
    ((), {"rare": "yes"}, "session_labels_newest_first"),
    ((), {"tenant": "t1"}, "session_labels_newest_first"),
    ((ENDED,), {"rare": "yes"}, "session_labels_by_status"),
    ((ACTIVE,), {"tenant": "t1"}, "session_labels_by_status"),
    ((ACTIVE, ENDED), {"tenant": "t1"}, "session_labels_newest_first"),
    ((), {"tenant": "t0", "rare": "yes"}, "session_labels_newest_first"),
]


@pytest.mark.parametrize("analyzed", [False, True])
@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize(("statuses", "labels", "index"), FILTERS)
def test_a_page_reads_an_index_range_without_sorting(
    filled: Path,
    tmp_path: Path,
    statuses: tuple[SessionStatus, ...],
    labels: dict[str, str],
    index: str,
    paged: bool,
    analyzed: bool,
) -> None:
    """[D6] first pages and later ones, with and without statistics: one index range, the
    sessions found by id, no full scan of a table and no temporary B-tree for the order."""
    path = filled
    if analyzed:
        path = tmp_path / "analyzed.db"
        with sqlite3.connect(filled) as source, sqlite3.connect(path) as copy:
            source.backup(copy)
            copy.execute("ANALYZE")
    cursor = _cursor(path, statuses, labels) if paged else ""
    conn = sqlite3.connect(path)
    try:
        sql, params = page_sql(conn, session_query(statuses, labels, cursor, 3))
        plan = [str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
    finally:
        conn.close()
    assert index in plan[0], plan
    assert plan[0].startswith("SEARCH") or (not statuses and not labels and not paged), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan
    assert all(step.startswith(("SEARCH", "CORRELATED")) for step in plan[1:]), plan
    if labels:
        assert "(key=? AND value=?" in plan[0], plan


def _steps(path: Path, statuses: tuple[SessionStatus, ...], labels: dict[str, str]) -> int:
    """SQLite VM instructions one page of 5 takes (counted by the progress handler)."""
    conn = sqlite3.connect(path)
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    try:
        sql, params = page_sql(conn, session_query(statuses, labels, "", 5))
        conn.set_progress_handler(count, 1)
        rows = conn.execute(sql, params).fetchall()
        assert len(rows) == 6
    finally:
        conn.close()
    return steps


def test_the_work_of_a_page_does_not_grow_with_the_table(filled: Path, tmp_path: Path) -> None:
    """[D6] a page of a label in 1 of 100 sessions, of one in 2 with a status, of two labels,
    and of a status alone: the same work over 1,000 sessions and over 4,000 whose 3,000
    newest the filter skips (a scan of the sessions newest first would pass them all)."""
    small = {
        (statuses, tuple(labels.items())): _steps(filled, statuses, labels)
        for statuses, labels in [
            ((), {"rare": "yes"}),
            ((ENDED,), {"tenant": "t1"}),
            ((), {"rare": "yes", "tenant": "t0"}),
            ((ENDED,), {}),
        ]
    }
    big = tmp_path / "big.db"
    with sqlite3.connect(filled) as source, sqlite3.connect(big) as copy:
        source.backup(copy)
    asyncio.run(_fill(big, 1000, 4000, others=True))
    for (statuses, labels), steps in small.items():
        grown = _steps(big, statuses, dict(labels))
        assert grown <= steps * 1.2 + 50, (statuses, labels, steps, grown)
