"""Benchmark: listings and a whole-session load at scale, in process and through ``serve``.

Run as ``.venv/bin/python bench/service_scale.py [--sessions 100000]``. It is not a
test. One SQLite file (``full``, as ``serve`` opens it) holds ``--sessions``
sessions, one second apart, labelled ``tenant=t0..t19`` except the 100 oldest
(``tenant=rare``), and a newest session with 3,000 records (about 300 bytes each).
Each figure is read in process, then through the service on the same file, then in
process again; median and worst of 30 reads (10 for the load):

- ``list_sessions`` first page of 50 (goal p99 <= 10 ms);
- a page of 50 filtered by a common label (one session in 20) and by a rare one
  (the 100 oldest: a range of the label index, wherever they are in the listing);
- the 3,000-record session loaded whole with ``limit=1000`` pages (goal <= 50 ms).

It prints SQLite's query plan for both listings.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.service.process import ServiceProcess

from agentledger.service import StoreClient
from agentledger.service.auth import add_token
from agentledger.storage import RecordBuilder, RunStart
from agentledger.storage.listing import session_query
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.sqlite.session_list import page_sql

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PAYLOAD = b'{"text": "' + b"x" * 280 + b'"}'
PLANS = {"first page": {}, "label-filtered page": {"tenant": "rare"}}


async def fill(db: str, count: int) -> str:
    """``count`` sessions and a 3,000-record run in the newest; the newest session's id."""
    store = await SQLiteStore.open(db, durability="normal")  # filling only; read at full
    try:
        for base in range(0, count, 500):
            await asyncio.gather(*(
                store.create_session(f"s{i:07d}", created_at=T0 + timedelta(seconds=i),
                                     labels={"tenant": "rare" if i < 100 else f"t{i % 20}"})
                for i in range(base, min(count, base + 500))
            ))  # fmt: skip
        newest = f"s{count - 1:07d}"
        run = RecordBuilder(RunStart(run_id="big", agent_id="bench", session_id=newest,
                                     started_at=T0))  # fmt: skip
        await store.start_root_run(run.root_start())
        records = [run.record("note", PAYLOAD, event_key=f"n{i}", at=T0) for i in range(2999)]
        for i in range(0, len(records), 500):
            await store.append_run_records(records[i : i + 500])
    finally:
        await store.close()
    return newest


async def load_whole(store: Any, session_id: str) -> None:
    cursor, total = "", 0
    while True:
        page = await store.list_session_run_records(session_id, cursor=cursor, limit=1000)
        total += len(page.records)
        if not (cursor := page.next_cursor):
            break
    assert total == 3000, total


async def measure(store: Any, session_id: str, side: str) -> None:
    reads: list[tuple[str, Callable[[], Awaitable[object]], int]] = [
        ("first page of 50", lambda: store.list_sessions(limit=50), 30),
        ("page, common label", lambda: store.list_sessions(labels={"tenant": "t7"}, limit=50), 30),
        ("page, rare label", lambda: store.list_sessions(labels={"tenant": "rare"}, limit=50), 30),
        ("3,000-record session", lambda: load_whole(store, session_id), 10),
    ]
    for name, read, times in reads:
        took = []
        for _ in range(times):
            started = time.perf_counter()
            await read()
            took.append(time.perf_counter() - started)
        print(f"{side:11} {name:22} median {statistics.median(took) * 1000:8.2f} ms   "
              f"worst {max(took) * 1000:8.2f} ms")  # fmt: skip


async def in_process(db: str, session_id: str) -> None:
    store = await SQLiteStore.open(db)
    try:
        await measure(store, session_id, "in process")
    finally:
        await store.close()


async def served(url: str, token: str, session_id: str) -> None:
    async with StoreClient(url, token=token) as client:
        await measure(client, session_id, "service")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "scale.db")
        started = time.perf_counter()
        newest = asyncio.run(fill(db, args.sessions))
        print(f"{args.sessions} sessions filled in {time.perf_counter() - started:.0f} s")
        with sqlite3.connect(db) as conn:
            for name, labels in PLANS.items():
                sql, params = page_sql(conn, session_query((), labels, "", 50))
                plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
                print(f"plan, {name}: {'; '.join(plan)}")
        asyncio.run(in_process(db, newest))
        tokens = Path(tmp) / "tokens.json"
        token = add_token(tokens, "host")
        with ServiceProcess(db, tokens) as service:
            asyncio.run(served(service.url, token, newest))
        asyncio.run(in_process(db, newest))


if __name__ == "__main__":
    main()
