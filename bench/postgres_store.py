"""Benchmark: PostgresStore against raw psycopg doing the same work on the same server.

Run as ``.venv/bin/python bench/postgres_store.py`` (or ``make bench``). It is not a
test: it prints a table of medians over five interleaved repetitions and the
ratio of ours to raw. The raw side is the physical limit: the same statements
on the same schema, over one async psycopg connection, with no store around it.

- appends: ``append_run_record``, one ~500-byte record per call on one running
  run of a session, against raw psycopg writing the same record row in one
  transaction per record (BEGIN, INSERT, COMMIT: three round trips). The store
  also locks the session and the run, checks the event key, and moves the
  run's and the session's counters: one statement on a run the handle wrote
  last, else two round trips [B3]. Both commit with ``synchronous_commit=on``.
  Target >= 0.85x. A third side, the physical floor, sends the same INSERT alone
  in autocommit (one round trip, nothing else checked); target >= 0.85x of it too.
  On a local server the CPU both sides spend per append (this process and
  its server backend, from ``/proc``) is shown too: unlike the rate, it does
  not move with what else the machine runs;
- reload: a 10,000-record run (the store's rows, bulk-written) paged to the end
  with ``limit=1000`` (records rebuilt), against SELECTs of the same rows (tuples);
- load: 16 workers, each with its own store (a pool of one connection), each
  running ``--runs`` runs (start, 20 appends, terminal) in four shared sessions,
  as ``tests/storage/postgres/test_load.py``; afterwards the totals are checked
  to be exact (nothing lost, duplicated or out of order).

The server is ``AGENTLEDGER_TEST_PG_DSN`` if set (a fresh database is created on
it and dropped afterwards), else a throwaway cluster from
``tests/storage/postgres/server.py`` started with ``fsync=on`` (the figure that
matters to users; ``--no-fsync`` measures round trips and CPU only). Ratios are
taken per repetition, then the median.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import psycopg
from psycopg import AsyncConnection

from agentledger.storage import RecordBuilder, RunStart
from agentledger.storage.postgres import PostgresStore, search
from agentledger.storage.postgres.apply import (
    _ALLOCATE,
    _INSERT_RECORDS,
    _RECORD_VALUES,
)
from agentledger.storage.postgres.rows import (
    RECORD_COLUMNS,
    RUN_COLUMNS,
    record_params,
    run_from_row,
)
from agentledger.storage.state import RunRow
from agentledger.storage.types import RunStatus

ROOT = Path(__file__).resolve().parent.parent
PG_DSN_ENV = "AGENTLEDGER_TEST_PG_DSN"
REPETITIONS = 5
APPENDS = 500
RELOAD_RECORDS = 10_000
WORKERS = 16
SESSIONS = 4  # four workers share each session, so they contend for its lock
LOAD_APPENDS = 20
_FILLER = b"the ledger keeps every record in commit order. " * 11
PAYLOAD = b'{"text": "' + _FILLER[:488] + b'"}'  # 500 bytes of JSON
T0 = datetime(2026, 1, 1, tzinfo=UTC)
_INSERT_RECORD = _INSERT_RECORDS + _RECORD_VALUES
_UPDATE_RUN = "UPDATE agentledger_runs SET last_seq = %s WHERE run_id = %s"
_SELECT_RUN = f"SELECT {RUN_COLUMNS} FROM agentledger_runs WHERE run_id = %s"
_SELECT_SESSION_SEQ = "SELECT last_seq FROM agentledger_sessions WHERE id = %s"
_PAGE = (
    f"SELECT {RECORD_COLUMNS} FROM agentledger_records "
    "WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s"
)


class Clock:
    """Strictly increasing millisecond timestamps."""

    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> datetime:
        self.ms += 1
        return T0 + timedelta(milliseconds=self.ms)


@contextmanager
def _database(fsync: bool) -> Iterator[str]:
    """A fresh database on the configured or a throwaway server; dropped afterwards."""
    sys.path.insert(0, str(ROOT))
    from tests.storage.postgres.server import PostgresServer, create_database, drop_database

    server = None
    base = os.environ.get(PG_DSN_ENV, "")
    if not base:
        server = PostgresServer(fsync=fsync)
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


async def _started_run(store: PostgresStore, run_id: str, clock: Clock) -> RecordBuilder:
    session = f"{run_id}-session"
    await store.create_session(session, created_at=clock())
    run = RecordBuilder(
        RunStart(run_id=run_id, agent_id="agent", session_id=session, started_at=clock()),
        turn_id="turn-1",
    )
    await store.start_root_run(run.root_start())
    return run


# Appends ---------------------------------------------------------------------


async def _ours_appends(store: PostgresStore, run: RecordBuilder, n: int, clock: Clock) -> float:
    records = [
        run.record("planner_note", PAYLOAD, event_key=f"note-{clock.ms}-{i}", at=clock())
        for i in range(n)
    ]
    started = time.perf_counter()
    for record in records:
        await store.append_run_record(record)
    return n / (time.perf_counter() - started)


class RawRun:
    """The state a raw appender keeps: the run row and the session's newest position."""

    def __init__(self, run: RecordBuilder, row: RunRow, session_seq: int) -> None:
        self.run = run
        self.row = row
        self.session_seq = session_seq


async def _raw_run(conn: AsyncConnection[Any], run: RecordBuilder) -> RawRun:
    cur = await conn.execute(_SELECT_RUN, (run.run.run_id,))
    row = await cur.fetchone()
    assert row is not None
    cur = await conn.execute(_SELECT_SESSION_SEQ, (run.run.session_id,))
    seq = await cur.fetchone()
    assert seq is not None
    return RawRun(run, run_from_row(row), int(seq[0]))


async def _raw_appends(
    conn: AsyncConnection[Any], state: RawRun, n: int, clock: Clock, *, transaction: bool = True
) -> float:
    """``n`` transactions of one INSERT of the same record row (``transaction``: BEGIN, INSERT,
    COMMIT; else the INSERT alone in autocommit, one round trip); parameters built beforehand."""
    rows = []
    for i in range(n):
        record = state.run.record(
            "planner_note", PAYLOAD, event_key=f"note-{clock.ms}-{i}", at=clock()
        )
        state.row = msgspec.structs.replace(state.row, last_seq=state.row.last_seq + 1)
        record = msgspec.structs.replace(record, id=str(state.row.last_seq))
        state.session_seq += 1
        words = search.record_words(record)  # the same search words the store writes
        rows.append((*record_params(record, state.session_seq), words, words))
    started = time.perf_counter()
    for row in rows:
        if transaction:
            async with conn.transaction():
                await conn.execute(_INSERT_RECORD, row)
        else:
            await conn.execute(_INSERT_RECORD, row)
    return n / (time.perf_counter() - started)


def _backend_cpu(pid: int) -> float | None:
    """CPU seconds a local server backend has used (None if its /proc entry is unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Cpu:
    """Client (this process) plus server (the side's backend) CPU seconds over a block."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.spent: list[float] = []

    @contextmanager
    def measure(self) -> Iterator[None]:
        client, server = time.process_time(), _backend_cpu(self.pid)
        yield
        after = _backend_cpu(self.pid)
        if server is not None and after is not None:
            self.spent.append(time.process_time() - client + after - server)


async def _bench_appends(
    dsn: str,
) -> tuple[list[float], list[float], list[float], list[float], list[float], list[float]]:
    """Append rates of the three sides (ours, raw transactions, raw autocommit INSERTs), then
    the client + server CPU seconds per append of each, in the same order."""
    clock = Clock()
    ours: list[float] = []
    raw: list[float] = []
    floor: list[float] = []
    async with (
        await PostgresStore.open(dsn, min_size=1, max_size=1) as store,
        await AsyncConnection.connect(dsn, autocommit=True) as conn,
    ):
        async with store._pool.connection() as pooled:
            ours_cpu, raw_cpu = Cpu(pooled.info.backend_pid), Cpu(conn.info.backend_pid)
        floor_cpu = Cpu(conn.info.backend_pid)
        run = await _started_run(store, "bench-run", clock)
        state = await _raw_run(conn, await _started_run(store, "raw-run", clock))
        bare = await _raw_run(conn, await _started_run(store, "floor-run", clock))
        await _ours_appends(store, run, APPENDS // 5, clock)  # warm up all three
        await _raw_appends(conn, state, APPENDS // 5, clock)
        await _raw_appends(conn, bare, APPENDS // 5, clock, transaction=False)
        for rep in range(REPETITIONS):
            sides = ("ours", "raw", "floor")
            for side in sides[rep % 3 :] + sides[: rep % 3]:
                if side == "ours":
                    with ours_cpu.measure():
                        ours.append(await _ours_appends(store, run, APPENDS, clock))
                elif side == "raw":
                    with raw_cpu.measure():
                        raw.append(await _raw_appends(conn, state, APPENDS, clock))
                else:
                    with floor_cpu.measure():
                        floor.append(
                            await _raw_appends(conn, bare, APPENDS, clock, transaction=False)
                        )
        total = 1 + APPENDS // 5 + REPETITIONS * APPENDS
        cur = await conn.execute(
            "SELECT count(*), max(seq), max(session_seq) FROM agentledger_records "
            "WHERE run_id = %s",
            ("bench-run",),
        )
        assert await cur.fetchone() == (total, total, total)  # whole and gap-free
    per_append = [
        [spent / APPENDS for spent in side.spent] for side in (ours_cpu, raw_cpu, floor_cpu)
    ]
    return ours, raw, floor, per_append[0], per_append[1], per_append[2]


# Reload ----------------------------------------------------------------------


async def _seed_reload_run(store: PostgresStore, conn: AsyncConnection[Any]) -> str:
    """A 10,000-record run: started by the store, its records bulk-written in one transaction.

    The rows are the ones the store would write (its parameters, its INSERT); writing
    them one append at a time would only make the benchmark slower.
    """
    clock = Clock()
    run = await _started_run(store, "reload-run", clock)
    state = await _raw_run(conn, run)
    params = []
    for i in range(1, RELOAD_RECORDS):
        record = run.record("planner_note", PAYLOAD, event_key=f"note-{i}", at=clock())
        record = msgspec.structs.replace(record, id=str(state.row.last_seq + i))
        words = search.record_words(record)
        params.append((*record_params(record, state.session_seq + i), words, words))
    added = len(params)
    final = msgspec.structs.replace(state.row, last_seq=state.row.last_seq + added)
    async with conn.transaction():
        async with conn.cursor() as cur:
            await cur.executemany(_INSERT_RECORD, params)
        await conn.execute(_UPDATE_RUN, (final.last_seq, final.run_id))
        size = len(PAYLOAD) * added  # [G3] the bytes the rows count (their records: last_seq)
        await conn.execute(
            "UPDATE agentledger_runs SET usage_bytes = usage_bytes + %s WHERE run_id = %s",
            (size, final.run_id),
        )
        allocate = (state.session_seq + added, size, run.run.session_id, state.session_seq)
        await conn.execute(_ALLOCATE, allocate)
    return run.run.run_id


async def _ours_full_reload(store: PostgresStore, run_id: str) -> float:
    started = time.perf_counter()
    cursor, count = "", 0
    while True:
        page = await store.list_run_records(run_id, cursor=cursor, limit=1000)
        count += len(page.records)
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    elapsed = time.perf_counter() - started
    assert count == RELOAD_RECORDS, count
    return count / elapsed


async def _raw_full_reload(conn: AsyncConnection[Any], run_id: str) -> float:
    started = time.perf_counter()
    after, count = 0, 0
    while True:
        cur = await conn.execute(_PAGE, (run_id, after, 1000))
        rows = await cur.fetchall()
        count += len(rows)
        if len(rows) < 1000:
            break
        after = rows[-1][8]
    elapsed = time.perf_counter() - started
    assert count == RELOAD_RECORDS, count
    return count / elapsed


async def _bench_reload(dsn: str) -> tuple[list[float], list[float]]:
    ours: list[float] = []
    raw: list[float] = []
    async with (
        await PostgresStore.open(dsn, min_size=1, max_size=1) as store,
        await AsyncConnection.connect(dsn, autocommit=True) as conn,
    ):
        run_id = await _seed_reload_run(store, conn)
        await conn.execute("VACUUM ANALYZE agentledger_records")
        pair: tuple[Callable[[], Awaitable[float]], Callable[[], Awaitable[float]]] = (
            lambda: _ours_full_reload(store, run_id),
            lambda: _raw_full_reload(conn, run_id),
        )
        for measure in pair:  # warm up
            await measure()
        for rep in range(REPETITIONS):
            first, second = pair if rep % 2 == 0 else pair[::-1]
            a, b = await first(), await second()
            ours.append(a if rep % 2 == 0 else b)
            raw.append(b if rep % 2 == 0 else a)
    return ours, raw


# Load ------------------------------------------------------------------------


async def _load_once(
    stores: list[PostgresStore],
    conn: AsyncConnection[Any],
    rep: int | str,
    runs: int,
    sessions: int = SESSIONS,
) -> tuple[float, float]:
    """One round of the 16-worker load (worker ``w`` on ``stores[w % len(stores)]``, in
    session ``w % sessions``); (writes/s, runs/s), after checking the totals."""
    clock = Clock()
    admin = stores[0]
    sids = [f"load{rep}-s{i}" for i in range(sessions)]
    for sid in sids:
        await admin.create_session(sid, created_at=clock())

    async def worker(w: int) -> None:
        store, sid = stores[w % len(stores)], sids[w % sessions]
        for n in range(runs):
            run = RecordBuilder(
                RunStart(
                    run_id=f"load{rep}-w{w}-r{n}",
                    agent_id="agent",
                    session_id=sid,
                    started_at=clock(),
                ),
                turn_id="turn-1",
            )
            assert (await store.start_root_run(run.root_start())).started.id == "1"
            for i in range(LOAD_APPENDS):
                note = run.record("planner_note", PAYLOAD, event_key=f"n{i}", at=clock())
                assert (await store.append_run_record(note)).id == str(i + 2)
            end = run.terminal(RunStatus.COMPLETED, at=clock())
            assert (await store.record_run_terminal(end)).id == str(LOAD_APPENDS + 2)

    began = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(WORKERS)))
    seconds = time.perf_counter() - began
    _check_load(await _load_totals(conn, rep), runs, sessions)
    total_runs = WORKERS * runs
    return total_runs * (LOAD_APPENDS + 2) / seconds, total_runs / seconds


async def _load_totals(conn: AsyncConnection[Any], rep: int | str) -> list[tuple[Any, ...]]:
    pattern = f"load{rep}-%"
    cur = await conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE last_seq = %s AND status = %s), "
        "(SELECT count(*) FROM agentledger_records WHERE run_id LIKE %s), "
        "(SELECT count(DISTINCT (run_id, seq)) FROM agentledger_records WHERE run_id LIKE %s), "
        "(SELECT count(DISTINCT (run_id, event_key)) FROM agentledger_records "
        " WHERE run_id LIKE %s AND seq BETWEEN 1 AND %s) "
        "FROM agentledger_runs WHERE run_id LIKE %s",
        (
            LOAD_APPENDS + 2,
            RunStatus.COMPLETED.value,
            pattern,
            pattern,
            pattern,
            LOAD_APPENDS + 2,
            pattern,
        ),
    )
    rows = [tuple(r) for r in await cur.fetchall()]
    cur = await conn.execute(
        "SELECT s.last_seq, count(x.session_seq), max(x.session_seq) "
        "FROM agentledger_sessions s LEFT JOIN agentledger_records x ON x.session_id = s.id "
        "WHERE s.id LIKE %s GROUP BY s.id ORDER BY s.id",
        (pattern,),
    )
    rows.extend(tuple(r) for r in await cur.fetchall())
    return rows


def _check_load(rows: list[tuple[Any, ...]], runs: int, sessions: int) -> None:
    """Every run complete with ids 1..22, every session log gap-free and whole."""
    total_runs, per_run = WORKERS * runs, LOAD_APPENDS + 2
    records = total_runs * per_run
    expected_runs = (total_runs, total_runs, records, records, records)
    assert rows[0] == expected_runs, (rows[0], expected_runs)
    per_session = records // sessions
    assert rows[1:] == [(per_session, per_session, per_session)] * sessions, rows[1:]


async def _bench_load(dsn: str, runs: int) -> tuple[list[float], list[float]]:
    writes: list[float] = []
    rates: list[float] = []
    stores = list(
        await asyncio.gather(
            *(PostgresStore.open(dsn, min_size=1, max_size=1) for _ in range(WORKERS))
        )
    )
    try:
        async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
            await _load_once(stores, conn, 0, 1)  # warm up
            for rep in range(1, REPETITIONS + 1):
                w, r = await _load_once(stores, conn, rep, runs)
                writes.append(w)
                rates.append(r)
    finally:
        await asyncio.gather(*(s.close() for s in stores))
    return writes, rates


class _Ungrouped:
    """A store whose appends to one session each commit alone (as before they were grouped)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    async def run(self, session_id: str, statement: Any) -> Any:
        return (await self.store._send([statement]))[0]


async def _bench_one_session(dsn: str, runs: int) -> dict[str, list[float]]:
    """16 runs in one session against 16 runs in 16 sessions, interleaved (writes/s): on
    one shared store (as the in-process runtime and ``serve`` write), the same with each
    append committing alone (no grouping), and on 16 stores of one connection each (as 16
    processes would)."""
    shared = [await PostgresStore.open(dsn, min_size=WORKERS, max_size=WORKERS)]
    ungrouped = [await PostgresStore.open(dsn, min_size=WORKERS, max_size=WORKERS)]
    ungrouped[0]._commits = _Ungrouped(ungrouped[0])  # type: ignore[assignment]
    apart = list(
        await asyncio.gather(
            *(PostgresStore.open(dsn, min_size=1, max_size=1) for _ in range(WORKERS))
        )
    )
    sides = {
        "shared, 1 session": (shared, 1),
        "shared, 16 sessions": (shared, WORKERS),
        "ungrouped, 1 session": (ungrouped, 1),
        "apart, 1 session": (apart, 1),
        "apart, 16 sessions": (apart, WORKERS),
    }
    found: dict[str, list[float]] = {name: [] for name in sides}
    try:
        async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
            for rep in range(REPETITIONS + 1):
                order = list(sides) if rep % 2 == 0 else list(sides)[::-1]
                for i, name in enumerate(order):
                    stores, sessions = sides[name]
                    tag = f"one{rep}-{i}"
                    writes, _ = await _load_once(stores, conn, tag, runs, sessions)
                    if rep:  # the first round warms up
                        found[name].append(writes)
    finally:
        await asyncio.gather(*(s.close() for s in [*shared, *ungrouped, *apart]))
    return found


# Report ----------------------------------------------------------------------


def _row(
    name: str, unit: str, ours: list[float], raw: list[float], target: float | None = None
) -> list[str]:
    """Medians of both sides and the median of the per-repetition ratios."""
    ratio = statistics.median(o / r for o, r in zip(ours, raw, strict=True))
    verdict = "" if target is None else f">= {target}x " + ("ok" if ratio >= target else "MISSED")
    return [
        name,
        f"{statistics.median(ours):,.0f} {unit}",
        f"{statistics.median(raw):,.0f} {unit}",
        f"{ratio:.2f}x",
        verdict,
    ]


async def _server_settings(dsn: str) -> tuple[str, str]:
    """The server's version and its ``fsync`` setting."""
    async with await AsyncConnection.connect(dsn) as conn:
        found = []
        for name in ("server_version", "fsync"):
            cur = await conn.execute(f"SHOW {name}")
            row = await cur.fetchone()
            assert row is not None
            found.append(str(row[0]).split()[0])
        return found[0], found[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", type=int, default=10, help="runs per worker in the 16-worker load (default 10)"
    )
    parser.add_argument(
        "--no-fsync",
        action="store_true",
        help="start the throwaway server with fsync=off (round trips and CPU only)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    rows: list[list[str]] = []
    with _database(fsync=not args.no_fsync) as dsn:
        version, fsync = asyncio.run(_server_settings(dsn))
        versions = (
            f"PostgreSQL {version} fsync={fsync}, psycopg {psycopg.__version__}, "
            f"Python {sys.version.split()[0]}"
        )
        print(f"PostgresStore vs raw psycopg ({versions}, {os.cpu_count()} CPUs)")
        print(
            f"{REPETITIONS} interleaved repetitions, medians (ratio: median of the "
            f"per-repetition ratios); payload {len(PAYLOAD)} bytes\n"
        )
        ours, raw, floor, ours_cpu, raw_cpu, floor_cpu = asyncio.run(_bench_appends(dsn))
        rows.append(_row(f"append_run_record (x{APPENDS})", "rec/s", ours, raw, 0.85))
        rows.append(_row("  raw: one autocommit INSERT each", "rec/s", ours, floor, 0.85))
        if len(ours_cpu) == len(raw_cpu) == REPETITIONS:  # a local server: its CPU is readable
            per_cpu = ([1 / c for c in ours_cpu], [1 / c for c in raw_cpu])
            rows.append(_row("  per CPU second, client + server", "rec", *per_cpu))
            per_cpu = ([1 / c for c in ours_cpu], [1 / c for c in floor_cpu])
            rows.append(_row("    raw: one autocommit INSERT each", "rec", *per_cpu))
        ours, raw = asyncio.run(_bench_reload(dsn))
        rows.append(_row(f"reload {RELOAD_RECORDS:,} records (limit 1000)", "rec/s", ours, raw))
        writes, rates = asyncio.run(_bench_load(dsn, args.runs))
        one = asyncio.run(_bench_one_session(dsn, args.runs))
    header = ["operation", "agentledger", "raw psycopg", "ratio", "target"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for line in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    ops = WORKERS * args.runs * (LOAD_APPENDS + 2)
    print(
        f"\n{WORKERS} workers x {args.runs} runs (start, {LOAD_APPENDS} appends, terminal; "
        f"{SESSIONS} shared sessions): {ops:,} writes per repetition"
    )
    print(
        f"  {statistics.median(writes):,.0f} writes/s, {statistics.median(rates):,.1f} runs/s; "
        f"totals exact in all {REPETITIONS} repetitions"
    )
    print(f"\n{WORKERS} runs of one session vs in {WORKERS} sessions (writes/s, medians):")
    labels = {
        "shared": "one store",
        "ungrouped": "one store, each append committing alone",
        "apart": f"{WORKERS} stores",
    }
    for where, label in labels.items():
        single = one[f"{where}, 1 session"]
        many = one[f"{'shared' if where == 'ungrouped' else where}, 16 sessions"]
        ratio = statistics.median(a / b for a, b in zip(single, many, strict=True))
        print(
            f"  {label}: {statistics.median(single):,.0f} vs {statistics.median(many):,.0f}"
            f" = {ratio:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
