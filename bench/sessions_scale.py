"""Benchmark: label-filtered ``list_sessions`` pages over 100,000 sessions, both backends.

Run as ``.venv/bin/python bench/sessions_scale.py [--sessions 100000] [--reads 200]``.
It is not a test. One SQLite file and one PostgreSQL database each hold
``--sessions`` sessions, one second apart, made through the store (PostgreSQL's
in bulk SQL, then checked exact): ``tenant=t0|t1`` alternately (a common label:
one session in 2), ``rare=yes`` on one session in 1,000 (spread evenly), and
every third session ended. Each is read in process and through ``agentledger
serve`` (four sides, all open at once); every round reads each page once on each
side, interleaved, and p50/p99 are taken over ``--reads`` rounds. Pages hold 50
sessions. Goal: p99 <= 10 ms. ``--replaced`` also times, interleaved, SQLite's
statement from before the label index on the same file (a reference).

PostgreSQL is ``AGENTLEDGER_TEST_PG_DSN`` if set (a fresh database is created and
dropped), else a throwaway cluster from ``tests/storage/postgres/server.py``.
It prints each backend's query plan for the label-filtered pages.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.service.process import ServiceProcess  # noqa: E402

from agentledger.service import StoreClient  # noqa: E402
from agentledger.service.auth import add_token  # noqa: E402
from agentledger.storage import SessionStatus  # noqa: E402
from agentledger.storage.listing import session_query  # noqa: E402
from agentledger.storage.postgres import PostgresStore  # noqa: E402
from agentledger.storage.postgres import session_list as pg_list  # noqa: E402
from agentledger.storage.postgres.check import check_invariants  # noqa: E402
from agentledger.storage.sqlite import SQLiteStore  # noqa: E402
from agentledger.storage.sqlite import session_list as sqlite_list  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ENDED = (SessionStatus.ENDED,)
ACTIVE = (SessionStatus.ACTIVE,)
PAGES: dict[str, tuple[tuple[SessionStatus, ...], dict[str, str]]] = {
    "first page": ((), {}),
    "first page, active": (ACTIVE, {}),
    "common label": ((), {"tenant": "t1"}),
    "common label, ended": (ENDED, {"tenant": "t1"}),
    "rare label": ((), {"rare": "yes"}),
    "rare label, ended": (ENDED, {"rare": "yes"}),
    "rare + common labels": ((), {"rare": "yes", "tenant": "t0"}),
}
PG_DSN_ENV = "AGENTLEDGER_TEST_PG_DSN"


def labels_of(i: int) -> dict[str, str]:
    labels = {"tenant": f"t{i % 2}"}
    if i % 1000 == 500:
        labels["rare"] = "yes"
    return labels


async def fill(store: Any, count: int, batch: int) -> None:
    """``count`` sessions through the store, every third ended."""
    for base in range(0, count, batch):
        ids = range(base, min(count, base + batch))
        await asyncio.gather(*(
            store.create_session(f"s{i:07d}", created_at=T0 + timedelta(seconds=i),
                                 labels=labels_of(i))
            for i in ids
        ))  # fmt: skip
        await asyncio.gather(*(
            store.end_session(f"s{i:07d}", ended_at=T0 + timedelta(seconds=i + 1))
            for i in ids if i % 3 == 0
        ))  # fmt: skip


async def fill_postgres(dsn: str, count: int) -> None:
    """The same sessions in bulk SQL (the store makes ~150 a second on a shared machine),
    their label index rows as migration 11 backfills them; check confirms both exact."""
    await (await PostgresStore.open(dsn)).close()  # the schema
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO agentledger_sessions (id, status, created_at, ended_at, labels) "
            "SELECT 's' || lpad(i::text, 7, '0'), "
            "CASE WHEN i %% 3 = 0 THEN 'ended' ELSE 'active' END, "
            "%(t0)s + i * interval '1 second', "
            "CASE WHEN i %% 3 = 0 THEN %(t0)s + (i + 1) * interval '1 second' END, "
            "jsonb_build_object('tenant', 't' || (i %% 2)) || CASE WHEN i %% 1000 = 500 "
            "THEN '{\"rare\": \"yes\"}'::jsonb ELSE '{}'::jsonb END "
            "FROM generate_series(0, %(n)s - 1) AS i",
            {"t0": T0, "n": count},
        )
        await conn.execute(
            "INSERT INTO agentledger_session_labels (session_id, key, value, status, created_at) "
            "SELECT s.id, l.key, l.value, s.status, s.created_at "
            "FROM agentledger_sessions s, jsonb_each_text(s.labels) l"
        )
        await conn.execute("VACUUM ANALYZE")
    problems = await check_invariants(dsn)
    assert problems == [], problems[:5]


@contextmanager
def postgres() -> Iterator[str]:
    from tests.storage.postgres.server import PostgresServer, create_database, drop_database

    server = None
    base = os.environ.get(PG_DSN_ENV, "")
    if not base:
        server = PostgresServer()
        base = server.start()
    try:
        dsn = create_database(base, prefix="agentledger_bench")
        try:
            yield dsn
        finally:
            drop_database(dsn)
    finally:
        if server is not None:
            server.stop()


def sqlite_plans(db: str) -> None:
    conn = sqlite3.connect(db)
    try:
        for name, (statuses, labels) in PAGES.items():
            sql, params = sqlite_list.page_sql(conn, session_query(statuses, labels, "", 50))
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
            print(f"sqlite plan, {name}: {'; '.join(plan)}")
    finally:
        conn.close()


async def postgres_plans(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for name, (statuses, labels) in PAGES.items():
            sql, params = pg_list.page_sql(session_query(statuses, labels, "", 50))
            cur = await conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, params)  # type: ignore[arg-type]
            lines = [row[0].strip() for row in await cur.fetchall()]
            print(f"postgres plan, {name}: {' | '.join(lines)}")


class ReplacedSQL:
    """SQLite's listing before the label index (each label a ``json_each`` probe per session,
    newest first), run on a plain connection: the reference the index is measured against."""

    def __init__(self, db: str) -> None:
        self.conn = sqlite3.connect(db)

    async def list_sessions(
        self, statuses: tuple[SessionStatus, ...], labels: dict[str, str], limit: int
    ) -> list[Any]:
        where = ["EXISTS (SELECT 1 FROM json_each(sessions.labels) WHERE json_each.key = ? "
                 "AND json_each.value = ?)" for _ in labels]  # fmt: skip
        params: list[object] = [part for item in labels.items() for part in item]
        if statuses:
            where.append("status = ?")
            params.append(str(statuses[0]))
        sql = "SELECT id, status, created_at, ended_at, labels FROM sessions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, id DESC LIMIT ?"
        return self.conn.execute(sql, (*params, limit + 1)).fetchall()


def reads(store: Any) -> dict[str, Callable[[], Awaitable[object]]]:
    def page(statuses: tuple[SessionStatus, ...], labels: dict[str, str]) -> Callable[[], Any]:
        return lambda: store.list_sessions(statuses, labels=labels, limit=50)

    chosen = {name: page(*spec) for name, spec in PAGES.items()}
    if isinstance(store, ReplacedSQL):
        return chosen

    async def next_rare() -> None:
        first = await store.list_sessions(labels={"rare": "yes"}, limit=50)
        await store.list_sessions(labels={"rare": "yes"}, cursor=first.next_cursor, limit=50)

    chosen["rare label, pages 1+2"] = next_rare
    return chosen


async def measure(sides: dict[str, Any], rounds: int) -> None:
    table = {side: reads(store) for side, store in sides.items()}
    took: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for name in next(iter(table.values())):
            for side, pages in table.items():
                if name not in pages:
                    continue
                started = time.perf_counter()
                await pages[name]()
                took.setdefault((side, name), []).append(time.perf_counter() - started)
    for (side, name), times in sorted(took.items(), key=lambda item: item[0]):
        times.sort()
        p99 = times[min(len(times) - 1, round(len(times) * 0.99))]
        print(f"{side:18} {name:24} p50 {statistics.median(times) * 1000:7.2f} ms   "
              f"p99 {p99 * 1000:7.2f} ms")  # fmt: skip


async def run(db: str, dsn: str, tmp: Path, rounds: int, replaced: bool) -> None:
    tokens = tmp / "tokens.json"
    token = add_token(tokens, "host")
    with ServiceProcess(db, tokens) as lite, ServiceProcess(dsn, tokens) as pg:
        sqlite_store = await SQLiteStore.open(db)
        pg_store = await PostgresStore.open(dsn)
        try:
            async with (
                StoreClient(lite.url, token=token) as c1,
                StoreClient(pg.url, token=token) as c2,
            ):
                sides = {"sqlite": sqlite_store, "sqlite serve": c1,
                         "postgres": pg_store, "postgres serve": c2}  # fmt: skip
                if replaced:
                    sides["sqlite, replaced SQL"] = ReplacedSQL(db)
                await measure(sides, rounds)
        finally:
            await sqlite_store.close()
            await pg_store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument(
        "--replaced", action="store_true", help="also time the SQL the label index replaced"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, postgres() as dsn:
        db = str(Path(tmp) / "scale.db")

        async def fill_both() -> None:
            started = time.perf_counter()
            store = await SQLiteStore.open(db, durability="normal")
            try:
                await fill(store, args.sessions, 500)
            finally:
                await store.close()
            print(f"sqlite: {args.sessions} sessions in {time.perf_counter() - started:.0f} s")
            started = time.perf_counter()
            await fill_postgres(dsn, args.sessions)
            print(f"postgres: {args.sessions} sessions in {time.perf_counter() - started:.0f} s")

        asyncio.run(fill_both())
        sqlite_plans(db)
        asyncio.run(postgres_plans(dsn))
        asyncio.run(run(db, dsn, Path(tmp), args.reads, args.replaced))


if __name__ == "__main__":
    main()
