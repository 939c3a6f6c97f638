"""Benchmark: accounting [G3], reads of the usage counters and what keeping them costs.

Run as ``.venv/bin/python bench/usage.py [--quick] [--postgres DSN]``. It is not a test.
A store is filled with ``--sessions`` sessions (10,000; 1,000 with ``--quick``), each
with a root run of a few records, one of them a ``model_usage`` record, spread over
10 tenants; one more session holds a long log (``--long`` records, 2,000). Then:

- ``session usage``: ``load_session_usage`` of a small session and of the long one,
  p50/p99 (goal: <= 2 ms, the same for both: one counter row, whatever the log holds);
- ``label usage``: ``usage_by_label`` for one tenant (a tenth of the sessions), and
  grouped by tenant over every session, p50/p99 (goal: <= 2 ms; this one is a sum over
  the matching sessions' counters, so it grows with how many sessions match);
- ``append``: ``append_run_record`` of a 300-byte note with the counters kept, and with
  them switched off (the counter upserts dropped from each write, for this measure
  only), at ``synchronous=FULL`` on SQLite (PostgreSQL: fsync on, its default), mean
  per append over ``--appends`` appends, alternating (goal: the ratio close to 1).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentledger.storage import RecordBuilder, RunStart
from agentledger.storage.accounting import MODEL_USAGE, UsageChange
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.protocol import AdminStore
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.sqlite import apply as sqlite_apply
from agentledger.storage.usage_sql import UsageTables

T0 = datetime(2026, 1, 1, tzinfo=UTC)
_TICK = iter(range(10**9))


def _now() -> datetime:
    return T0 + timedelta(milliseconds=next(_TICK))


def _builder(run_id: str, session_id: str) -> RecordBuilder:
    return RecordBuilder(
        RunStart(run_id=run_id, agent_id="agent", session_id=session_id, started_at=_now())
    )


_USAGE_BODY = b'{"model":"m","input_tokens":1200,"output_tokens":300,"cache_read_tokens":800}'
_NOTE = b'{"note":"' + b"x" * 288 + b'"}'


async def _fill(store: AdminStore, prefix: str, sessions: int, long: int) -> tuple[str, str]:
    """``sessions`` small sessions over 10 tenants and one with ``long`` records."""
    for i in range(sessions):
        sid = f"{prefix}-s{i}"
        await store.create_session(sid, created_at=_now(), labels={"tenant": f"t{i % 10}"})
        run = _builder(f"{sid}-r", sid)
        await store.start_root_run(run.root_start())
        await store.append_run_records(
            [
                run.record("planner_note", _NOTE, event_key="n1", at=_now()),
                run.record(MODEL_USAGE, _USAGE_BODY, event_key="u1", at=_now()),
                run.record("planner_note", _NOTE, event_key="n2", at=_now()),
            ]
        )
        await store.record_run_terminal(run.terminal(_completed(), at=_now()))
        if i and i % 2000 == 0:
            print(f"  filled {i} sessions", flush=True)
    sid = f"{prefix}-long"
    await store.create_session(sid, created_at=_now(), labels={"tenant": "long"})
    run = _builder(f"{sid}-r", sid)
    await store.start_root_run(run.root_start())
    for start in range(0, long, 100):
        await store.append_run_records(
            [run.record("planner_note", _NOTE, event_key=f"n{k}", at=_now())
             for k in range(start, min(start + 100, long))]
        )  # fmt: skip
    return f"{prefix}-s1", sid


def _completed() -> Any:
    from agentledger.storage import RunStatus

    return RunStatus.COMPLETED


async def _timed(call: Callable[[], Awaitable[object]], n: int) -> tuple[float, float]:
    """p50 and p99 of ``n`` calls, in milliseconds (after 10 warm-up calls)."""
    for _ in range(10):
        await call()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[min(n - 1, int(n * 0.99))]


class _NoCounters(UsageTables):
    """The counter tables with every write's upserts dropped (the "without" measure)."""

    def changes(self, change: UsageChange) -> list[tuple[str, list[tuple[Any, ...]]]]:
        return []


async def _append_cost(
    store: AdminStore, prefix: str, appends: int, switch: Any
) -> tuple[float, float]:
    """Mean ms per append with the counters and without, alternating blocks of 50."""
    sid = f"{prefix}-append"
    await store.create_session(sid, created_at=_now())
    run = _builder(f"{sid}-r", sid)
    await store.start_root_run(run.root_start())
    spent = {True: 0.0, False: 0.0}
    done = {True: 0, False: 0}
    k = 0
    for block in range(appends // 50):
        counted = block % 2 == 0
        switch(counted)
        start = time.perf_counter()
        for _ in range(50):
            k += 1
            await store.append_run_record(
                run.record("planner_note", _NOTE, event_key=f"a{k}", at=_now())
            )
        spent[counted] += time.perf_counter() - start
        done[counted] += 50
    switch(True)
    return spent[True] / done[True] * 1000, spent[False] / done[False] * 1000


async def _bench(name: str, store: AdminStore, args: argparse.Namespace, switch: Any) -> None:
    prefix = f"b{int(time.time())}"
    started = time.perf_counter()
    small, long = await _fill(store, prefix, args.sessions, args.long)
    print(f"{name}: filled {args.sessions} sessions + one of {args.long} records "
          f"in {time.perf_counter() - started:.0f} s")  # fmt: skip
    n = args.reads
    rows = [
        ("session usage, small session", lambda: store.load_session_usage(small)),
        (f"session usage, {args.long}-record session", lambda: store.load_session_usage(long)),
        (f"label usage, one tenant ({args.sessions // 10} sessions)",
         lambda: store.usage_by_label(labels={"tenant": "t3"})),
        (f"label usage, by tenant over all {args.sessions + 1}",
         lambda: store.usage_by_label("tenant")),
    ]  # fmt: skip
    for label, call in rows:
        p50, p99 = await _timed(call, n)
        print(f"  {label:<52} p50 {p50:7.3f} ms   p99 {p99:7.3f} ms")
    with_, without = await _append_cost(store, prefix, args.appends, switch)
    print(f"  append at FULL: {with_:.3f} ms with counters, {without:.3f} ms without "
          f"({with_ / without:.2f}x)")  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 sessions, fewer calls")
    parser.add_argument("--sessions", type=int, default=0)
    parser.add_argument("--long", type=int, default=2000)
    parser.add_argument("--reads", type=int, default=0)
    parser.add_argument("--appends", type=int, default=0)
    parser.add_argument("--postgres", default="", help="also on this PostgreSQL DSN")
    args = parser.parse_args()
    args.sessions = args.sessions or (1000 if args.quick else 10_000)
    args.reads = args.reads or (200 if args.quick else 1000)
    args.appends = args.appends or (200 if args.quick else 1000)
    original = sqlite_apply.USAGE
    off = _NoCounters(**dataclasses.asdict(original))

    def switch_sqlite(on: bool) -> None:
        sqlite_apply.USAGE = original if on else off

    with tempfile.TemporaryDirectory() as tmp:
        async with await SQLiteStore.open(Path(tmp) / "usage.db", durability="full") as store:
            await _bench("SQLite", store, args, switch_sqlite)
    if args.postgres:
        from agentledger.storage.postgres import apply as pg_apply
        from agentledger.storage.postgres import one_statement

        pg_original, statement = pg_apply.USAGE, one_statement._usage

        def switch_pg(on: bool) -> None:
            pg_apply.USAGE = pg_original if on else _NoCounters(**dataclasses.asdict(pg_original))
            one_statement._usage = statement if on else (lambda session: "")  # type: ignore[assignment]
            one_statement._statement.cache_clear()

        dsn = await _fresh_database(args.postgres)
        try:
            async with await PostgresStore.open(dsn) as store:
                await _bench("PostgreSQL", store, args, switch_pg)
        finally:
            await _drop_database(args.postgres, dsn)


async def _fresh_database(dsn: str) -> str:
    """A new database on the server of ``dsn`` (the benchmark's own, dropped after)."""
    import psycopg
    from psycopg import conninfo

    name = f"agentledger_bench_usage_{int(time.time())}"
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f'CREATE DATABASE "{name}"')
    return conninfo.make_conninfo(dsn, dbname=name)


async def _drop_database(admin: str, dsn: str) -> None:
    import psycopg
    from psycopg import conninfo

    name = conninfo.conninfo_to_dict(dsn)["dbname"]
    async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


if __name__ == "__main__":
    asyncio.run(main())
