"""Benchmark: accounting [G3], reads of the usage counters and what keeping them costs.

Run as ``.venv/bin/python bench/usage.py [--quick] [--postgres DSN]``. It is not a test.
A store is filled with ``--sessions`` sessions (10,000; 1,000 with ``--quick``), each
with a root run of a few records, one of them a ``model_usage`` record, spread over
10 tenants; one more session holds a long log (``--long`` records, 2,000). Then:

- ``session usage``: ``load_session_usage`` of a small session and of the long one,
  p50/p99 (goal: <= 2 ms, the same for both: one counter row, whatever the log holds);
- ``label usage``: ``usage_by_label`` for one tenant (a tenth of the sessions), and
  grouped by tenant over every session, p50/p99 (goal: <= 2 ms, whatever the number
  of sessions: both read the per-label totals), and for contrast one tenant's sessions
  that also carry a second label (summed over those sessions' counters);
- ``append``: ``append_run_record`` of a 300-byte note with the counters kept, and with
  them switched off (the counting triggers dropped, or disabled on PostgreSQL, for this
  measure only; what the append's own statement counts stays: since SQLite schema 21 and
  PostgreSQL 18 a record's bytes and count are added up on the record and its run and
  session rows, so the ratio is the triggers' cost, the label totals' for a labelled
  session), at ``synchronous=FULL`` on SQLite (PostgreSQL: fsync on, its default),
  mean per append over ``--appends`` appends, alternating (goal: the ratio close to 1);
- PostgreSQL only, ``16 sessions of one tenant``: 16 writers appending to 16 sessions
  carrying the same tenant label at once, with the tenant's totals in 64 shard rows,
  in one row (every append then waits for the row lock of the one before it until its
  commit), and with no counters, alternating (see :func:`_concurrent`).

The last lines repeat the two goals: label usage <= 2 ms, append with ÷ without.
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

from agentledger.storage import RecordBuilder, RunStart
from agentledger.storage.accounting import MODEL_USAGE
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.postgres import usage as pg_usage
from agentledger.storage.protocol import AdminStore
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.sqlite import usage as sqlite_usage

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
        labels = {"tenant": f"t{i % 10}", "tier": "gold" if i % 20 < 10 else "free"}
        await store.create_session(sid, created_at=_now(), labels=labels)
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


async def _append_cost(
    store: AdminStore, prefix: str, appends: int, switch: Any
) -> tuple[float, float]:
    """Mean ms per append with the counters and without, alternating blocks of 50 (each
    after 5 appends not counted: switching changes the schema, so statements are
    prepared again). The session carries two labels, as the filled ones do."""
    sid = f"{prefix}-append"
    await store.create_session(sid, created_at=_now(), labels={"tenant": "t0", "tier": "gold"})
    run = _builder(f"{sid}-r", sid)
    await store.start_root_run(run.root_start())
    spent = {True: 0.0, False: 0.0}
    done = {True: 0, False: 0}
    k = 0
    for block in range(appends // 50):
        counted = block % 2 == 0
        await switch(counted)
        for _ in range(5):
            k += 1
            await store.append_run_record(
                run.record("planner_note", _NOTE, event_key=f"a{k}", at=_now())
            )
        start = time.perf_counter()
        for _ in range(50):
            k += 1
            await store.append_run_record(
                run.record("planner_note", _NOTE, event_key=f"a{k}", at=_now())
            )
        spent[counted] += time.perf_counter() - start
        done[counted] += 50
    await switch(True)
    return spent[True] / done[True] * 1000, spent[False] / done[False] * 1000


async def _bench(
    name: str, store: AdminStore, args: argparse.Namespace, switch: Any
) -> tuple[float, float]:
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
        (f"(summed) one tenant's gold tier ({args.sessions // 20} sessions)",
         lambda: store.usage_by_label(labels={"tenant": "t3", "tier": "gold"})),
    ]  # fmt: skip
    worst = 0.0
    for i, (label, call) in enumerate(rows):
        p50, p99 = await _timed(call, n)
        print(f"  {label:<56} p50 {p50:7.3f} ms   p99 {p99:7.3f} ms")
        if i in (2, 3):
            worst = max(worst, p50)
    with_, without = await _append_cost(store, prefix, args.appends, switch)
    print(f"  append at FULL: {with_:.3f} ms with counters, {without:.3f} ms without "
          f"({with_ / without:.2f}x)")  # fmt: skip
    return worst, with_ / without


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 sessions, fewer calls")
    parser.add_argument("--sessions", type=int, default=0)
    parser.add_argument("--long", type=int, default=2000)
    parser.add_argument("--reads", type=int, default=0)
    parser.add_argument("--appends", type=int, default=0)
    parser.add_argument("--postgres", default="", help="also on this PostgreSQL DSN")
    parser.add_argument("--concurrent-appends", type=int, default=0,
                        help="appends per session of the 16 at once (PostgreSQL)")  # fmt: skip
    args = parser.parse_args()
    args.sessions = args.sessions or (1000 if args.quick else 10_000)
    args.reads = args.reads or (200 if args.quick else 1000)
    args.appends = args.appends or (200 if args.quick else 1000)
    args.concurrent_appends = args.concurrent_appends or (20 if args.quick else 100)
    goals: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "usage.db"

        async def switch_sqlite(on: bool) -> None:
            with sqlite3.connect(path) as conn:
                for name, body in sqlite_usage.CLUSTERED_TRIGGERS.items():
                    conn.execute(f"DROP TRIGGER IF EXISTS {name}")
                    if on:
                        conn.execute(f"CREATE TRIGGER {name} {body}")

        async with await SQLiteStore.open(path, durability="full") as store:
            worst, ratio = await _bench("SQLite", store, args, switch_sqlite)
        goals.append(f"SQLite: label usage p50 {worst:.3f} ms (goal <= 2), "
                     f"append with counters / without {ratio:.2f}x")  # fmt: skip
    if args.postgres:
        dsn = await _fresh_database(args.postgres)
        try:
            import psycopg

            admin = await psycopg.AsyncConnection.connect(dsn, autocommit=True)

            async def toggle(on: bool) -> None:
                await _triggers(admin, on)

            async with await PostgresStore.open(dsn) as store:
                worst, ratio = await _bench("PostgreSQL", store, args, toggle)
            goals.append(f"PostgreSQL: label usage p50 {worst:.3f} ms (goal <= 2), "
                         f"append with counters / without {ratio:.2f}x")  # fmt: skip
            await _concurrent(dsn, admin, args.concurrent_appends)
            await admin.close()
        finally:
            await _drop_database(args.postgres, dsn)
    print("goals:")
    for line in goals:
        print(f"  {line}")


_MODES = ("64 shards", "1 row", "no counters")


async def _concurrent(dsn: str, admin: Any, appends: int) -> None:
    """16 sessions of one tenant written at once: the tenant's totals in 64 shard rows, in
    one (the shard function made constant), and no counters (triggers disabled), in
    alternating rounds; the best of two rounds each.

    Two measures: ``append_run_record`` through the store (16 tasks, one process: its
    client CPU may bound it before any lock does), and raw INSERTs of records on 16
    connections, each in a transaction held 1 ms after its INSERT, standing in for the
    commit's flush that a test server without fsync does not do (a row lock is held
    until commit, so this is where one row makes writers queue).
    """
    shard = f"{pg_usage.SHARD_FUNCTION}(session_id text)"
    define = f"CREATE OR REPLACE FUNCTION {shard} RETURNS integer LANGUAGE sql IMMUTABLE AS "
    spread = define + f"$$ SELECT hashtext(session_id) & {pg_usage.SHARDS - 1} $$"
    store_rates: dict[str, list[float]] = {mode: [] for mode in _MODES}
    raw_rates: dict[str, list[float]] = {mode: [] for mode in _MODES}
    for round_ in range(2 * len(_MODES)):
        mode = _MODES[round_ % len(_MODES)]
        await admin.execute(define + "$$ SELECT 0 $$" if mode == "1 row" else spread)
        await _triggers(admin, mode != "no counters")
        async with await PostgresStore.open(dsn, min_size=16, max_size=16) as store:  # fresh plans
            prefix = f"c{round_}-{int(time.time())}"
            runs = []
            for i in range(16):
                sid = f"{prefix}-s{i}"
                await store.create_session(sid, created_at=_now(), labels={"tenant": "busy"})
                run = _builder(f"{sid}-r", sid)
                await store.start_root_run(run.root_start())
                runs.append(run)

            async def writer(run: RecordBuilder) -> None:
                for k in range(appends):
                    await store.append_run_record(
                        run.record("planner_note", _NOTE, event_key=f"a{k}", at=_now())
                    )

            start = time.perf_counter()
            await asyncio.gather(*(writer(run) for run in runs))
            store_rates[mode].append(16 * appends / (time.perf_counter() - start))
        raw_rates[mode].append(await _held_inserts(dsn, prefix, appends))
    await admin.execute(spread)
    await _triggers(admin, True)
    for name, rates in (("appends/s through the store", store_rates),
                        ("raw INSERTs/s, commits held 1 ms", raw_rates)):  # fmt: skip
        best = {mode: max(values) for mode, values in rates.items()}
        print(
            f"  16 sessions of one tenant at once, {name}: "
            + ", ".join(f"{best[mode]:.0f} ({mode})" for mode in _MODES)
            + f"; 64 shards / 1 row {best['64 shards'] / best['1 row']:.2f}x"
        )


async def _triggers(admin: Any, on: bool) -> None:
    verb = "ENABLE" if on else "DISABLE"
    cur = await admin.execute(
        "SELECT tgname FROM pg_trigger WHERE tgname = ANY(%s)", (list(pg_usage.TRIGGERS),)
    )
    present = {name for (name,) in await cur.fetchall()}  # a record's: gone since version 18
    for name, when in pg_usage.TRIGGERS.items():
        if name in present:
            table = when.split(" ON ")[1].split()[0]
            await admin.execute(f"ALTER TABLE {table} {verb} TRIGGER {name}")


_RAW_INSERT = (
    "INSERT INTO agentledger_records (run_id, seq, agent_id, session_id, turn_id, event_key, "
    "type, ts, payload, checksum, session_seq) "
    "VALUES (%s, %s, 'agent', %s, '', %s, 'planner_note', now(), %s, 0, %s)"
)


async def _held_inserts(dsn: str, prefix: str, appends: int) -> float:
    """Records/s of 16 connections inserting into the 16 sessions ``prefix`` names, each
    INSERT in its own transaction, held 1 ms before its commit."""
    import psycopg

    conns = [await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(16)]

    async def writer(i: int, conn: Any) -> None:
        sid = f"{prefix}-s{i}"
        for k in range(1000, 1000 + appends):
            async with conn.transaction():
                await conn.execute(_RAW_INSERT, (f"{sid}-r", k, sid, f"raw{k}", _NOTE, k))
                await conn.execute("SELECT pg_sleep(0.001)")

    start = time.perf_counter()
    await asyncio.gather(*(writer(i, conn) for i, conn in enumerate(conns)))
    spent = time.perf_counter() - start
    for conn in conns:
        await conn.close()
    return 16 * appends / spent


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
