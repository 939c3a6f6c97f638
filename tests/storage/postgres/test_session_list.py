"""A list_sessions page on PostgreSQL reads an index range ordered as the page is [D6].

20,000 sessions with statistics (ANALYZE): the planner's choice for each page
(first, later, rare and common labels, one status, two labels) is an index
scan with no sort and no sequential scan, and a rare label's page touches the
same number of buffers over 20,000 sessions as the first page does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from agentledger.storage import SessionStatus
from agentledger.storage.listing import session_query
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.postgres.check import check_invariants
from agentledger.storage.postgres.session_list import page_sql
from tests.storage.postgres.server import create_database, drop_database

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ACTIVE, ENDED = SessionStatus.ACTIVE, SessionStatus.ENDED
COUNT = 20_000


async def _fill(dsn: str) -> None:
    """Sessions one second apart: tenant t0/t1 (1 in 2), rare=yes (1 in 1,000), one in 25
    active; through the store for the newest 30 (the write path), in bulk for the rest."""
    await (await PostgresStore.open(dsn)).close()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO agentledger_sessions (id, status, created_at, ended_at, labels) "
            "SELECT 's' || lpad(i::text, 6, '0'), "
            "CASE WHEN i %% 25 = 0 THEN 'active' ELSE 'ended' END, "
            "%(t0)s + i * interval '1 second', "
            "CASE WHEN i %% 25 <> 0 THEN %(t0)s + (i + 1) * interval '1 second' END, "
            "jsonb_build_object('tenant', 't' || (i %% 2)) || CASE WHEN i %% 1000 = 500 "
            "THEN '{\"rare\": \"yes\"}'::jsonb ELSE '{}'::jsonb END "
            "FROM generate_series(0, %(n)s - 1) AS i",
            {"t0": T0, "n": COUNT - 30},
        )
        await conn.execute(
            "INSERT INTO agentledger_session_labels (session_id, key, value, status, created_at) "
            "SELECT s.id, l.key, l.value, s.status, s.created_at "
            "FROM agentledger_sessions s, jsonb_each_text(s.labels) l"
        )
    async with await PostgresStore.open(dsn) as store:
        for i in range(COUNT - 30, COUNT):
            labels = {"tenant": f"t{i % 2}", **({"rare": "yes"} if i % 10 == 0 else {})}
            sid = f"s{i:06d}"
            await store.create_session(sid, created_at=T0.replace(year=2027), labels=labels)
            if i % 2:
                await store.end_session(sid, ended_at=T0.replace(year=2027))
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("VACUUM ANALYZE")
    assert await check_invariants(dsn) == []


@pytest.fixture(scope="module")
def filled(postgres_dsn: str) -> Iterator[str]:
    dsn = create_database(postgres_dsn, prefix="agentledger_listing")
    try:
        asyncio.run(_fill(dsn))
        yield dsn
    finally:
        drop_database(dsn)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The plan's nodes that ran, but the probe (the ``driver`` CTE of several labels,
    which counts at most LABEL_PROBE entries of each label)."""
    if plan.get("Subplan Name", "").startswith("CTE driver") or plan["Actual Loops"] == 0:
        return
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


async def _plan(
    dsn: str, statuses: tuple[SessionStatus, ...], labels: dict[str, str], paged: bool
) -> list[dict[str, Any]]:
    cursor = ""
    if paged:
        async with await PostgresStore.open(dsn) as store:
            page = await store.list_sessions(statuses, labels=labels, limit=3)
            cursor = page.next_cursor
            assert cursor
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        sql, params = page_sql(session_query(statuses, labels, cursor, 50))
        cur = await conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params)  # type: ignore[arg-type]
        row = await cur.fetchone()
    assert row is not None
    found = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return list(_nodes(found[0]["Plan"]))


FILTERS = [
    ((), {}, "agentledger_sessions_newest_first"),
    ((ACTIVE,), {}, "agentledger_sessions_by_status"),
    ((), {"rare": "yes"}, "agentledger_session_labels_newest_first"),
    ((), {"tenant": "t1"}, "agentledger_session_labels_newest_first"),
    ((ACTIVE,), {"rare": "yes"}, "agentledger_session_labels_by_status"),
    ((ACTIVE,), {"tenant": "t1"}, "agentledger_session_labels_by_status"),
    ((ENDED,), {"tenant": "t1"}, "agentledger_session_labels_"),
    ((ACTIVE, ENDED), {"tenant": "t1"}, "agentledger_session_labels_newest_first"),
    ((), {"tenant": "t0", "rare": "yes"}, "agentledger_session_labels_newest_first"),
]


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize(("statuses", "labels", "index"), FILTERS)
async def test_a_page_reads_an_index_range_without_sorting(
    filled: str,
    statuses: tuple[SessionStatus, ...],
    labels: dict[str, str],
    index: str,
    paged: bool,
) -> None:
    """[D6] the planner, with statistics, reads one index range in the page's order (the
    cursor is where the range starts): no sequential scan, no sort, no bitmap of a label."""
    nodes = await _plan(filled, statuses, labels, paged)
    types = [node["Node Type"] for node in nodes]
    assert "Seq Scan" not in types, types
    # (A branch of several labels that the probe gated off may hold a sort of nothing.)
    assert not [n for n in nodes if n["Node Type"] == "Sort" and n["Actual Rows"]], types
    assert not any(t.startswith("Bitmap") for t in types), types
    scans = [node for node in nodes if "Index Name" in node and node["Actual Rows"]]
    driver = scans[0]
    assert driver["Index Name"].startswith(index), [n.get("Index Name") for n in scans]
    if paged:
        assert "<" in driver["Index Cond"], driver["Index Cond"]  # the cursor bounds the range
    # One page: the index entries read are the page's (plus one), not the label's.
    assert driver["Actual Rows"] <= 51, driver["Actual Rows"]
