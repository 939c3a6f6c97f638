"""Benchmark: SQLiteStore against raw sqlite3 doing the same work on the same machine.

Run as ``.venv/bin/python bench/sqlite_store.py`` (or ``make bench``). It is not a
test: it prints a table of medians over five interleaved repetitions and the
ratio of ours to raw. The raw side is the physical limit: the same INSERT (or
SELECT) on the same schema with the same pragmas, with no store around it.

- appends: ``append_run_record``, one ~500-byte record per call, against a loop
  of ``BEGIN IMMEDIATE; INSERT; COMMIT``, for durability ``full`` and ``normal``;
- reloads: a 10,000-record run paged to the end with ``limit=1000``, and its
  last 50 records from a cursor, against SELECTs of the same rows.

Targets: appends >= 0.6x raw, reloads >= 0.5x raw.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from agentledger.storage import RecordBuilder, RunStart
from agentledger.storage.sqlite import Durability, SQLiteStore
from agentledger.storage.sqlite.connection import check_durability
from agentledger.storage.sqlite.schema import migrate

REPETITIONS = 5
APPENDS = {"full": 200, "normal": 1000}
RELOAD_RECORDS = 10_000
TAIL = 50
TAIL_CALLS = 200
_FILLER = b"the ledger keeps every record in commit order. " * 11
PAYLOAD = b'{"text": "' + _FILLER[:488] + b'"}'  # 500 bytes of JSON
T0 = datetime(2026, 1, 1, tzinfo=UTC)
_INSERT = (
    "INSERT INTO records (run_id, seq, agent_id, session_id, turn_id, event_key, type, "
    "timestamp, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_PAGE = (
    "SELECT run_id, seq, agent_id, session_id, turn_id, event_key, type, timestamp, payload "
    "FROM records WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?"
)


class Clock:
    """Strictly increasing millisecond timestamps."""

    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> datetime:
        self.ms += 1
        return T0 + timedelta(milliseconds=self.ms)


def _raw_connection(path: str, durability: str) -> sqlite3.Connection:
    """A bare connection with the store's pragmas on a file with the store's schema."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {check_durability(durability)}")
    conn.execute("PRAGMA busy_timeout = 5000")
    migrate(conn)
    return conn


async def _started_run(store: SQLiteStore, run_id: str, clock: Clock) -> RecordBuilder:
    session = f"{run_id}-session"
    await store.create_session(session, created_at=clock())
    run = RecordBuilder(
        RunStart(run_id=run_id, agent_id="agent", session_id=session, started_at=clock()),
        turn_id="turn-1",
    )
    await store.start_root_run(run.root_start())
    return run


async def _ours_appends(store: SQLiteStore, run: RecordBuilder, n: int, clock: Clock) -> float:
    records = [
        run.record("planner_note", PAYLOAD, event_key=f"note-{clock.ms}-{i}", at=clock())
        for i in range(n)
    ]
    started = time.perf_counter()
    for record in records:
        await store.append_run_record(record)
    return n / (time.perf_counter() - started)


def _raw_appends(conn: sqlite3.Connection, n: int, state: dict[str, int]) -> float:
    rows = []
    for _ in range(n):
        state["seq"] += 1
        seq = state["seq"]
        rows.append(
            (
                "raw-run",
                seq,
                "agent",
                "raw-session",
                "turn-1",
                f"note-{seq}",
                "planner_note",
                seq,
                PAYLOAD,
            )
        )
    started = time.perf_counter()
    for row in rows:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(_INSERT, row)
        conn.execute("COMMIT")
    return n / (time.perf_counter() - started)


async def _bench_appends(workdir: str, durability: Durability) -> tuple[list[float], list[float]]:
    clock = Clock()
    ours: list[float] = []
    raw: list[float] = []
    n = APPENDS[durability]
    async with await SQLiteStore.open(
        os.path.join(workdir, f"ours-{durability}.db"), durability=durability
    ) as store:
        run = await _started_run(store, "bench-run", clock)
        conn = _raw_connection(os.path.join(workdir, f"raw-{durability}.db"), durability)
        state = {"seq": 0}
        try:
            await _ours_appends(store, run, n // 5, clock)  # warm up both
            _raw_appends(conn, n // 5, state)
            for rep in range(REPETITIONS):
                if rep % 2 == 0:
                    ours.append(await _ours_appends(store, run, n, clock))
                    raw.append(_raw_appends(conn, n, state))
                else:
                    raw.append(_raw_appends(conn, n, state))
                    ours.append(await _ours_appends(store, run, n, clock))
        finally:
            conn.close()
    return ours, raw


async def _seed_reload_run(path: str) -> str:
    """A 10,000-record run written through the store (normal durability, for speed)."""
    clock = Clock()
    async with await SQLiteStore.open(path, durability="normal") as store:
        run = await _started_run(store, "reload-run", clock)
        batch = [
            run.record("planner_note", PAYLOAD, event_key=f"note-{i}", at=clock())
            for i in range(RELOAD_RECORDS - 1)
        ]
        await asyncio.gather(*(store.append_run_record(r) for r in batch))
    return run.run.run_id


async def _ours_full_reload(store: SQLiteStore, run_id: str) -> float:
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


def _raw_full_reload(conn: sqlite3.Connection, run_id: str) -> float:
    started = time.perf_counter()
    after, count = 0, 0
    while True:
        rows = conn.execute(_PAGE, (run_id, after, 1000)).fetchall()
        count += len(rows)
        if len(rows) < 1000:
            break
        after = rows[-1][1]
    elapsed = time.perf_counter() - started
    assert count == RELOAD_RECORDS, count
    return count / elapsed


async def _tail_cursor(store: SQLiteStore, run_id: str) -> str:
    cursor = ""
    for limit in [1000] * 9 + [RELOAD_RECORDS - 9000 - TAIL]:
        cursor = (await store.list_run_records(run_id, cursor=cursor, limit=limit)).next_cursor
    return cursor


async def _ours_tail(store: SQLiteStore, run_id: str, cursor: str) -> float:
    started = time.perf_counter()
    for _ in range(TAIL_CALLS):
        page = await store.list_run_records(run_id, cursor=cursor, limit=TAIL)
    elapsed = time.perf_counter() - started
    assert len(page.records) == TAIL
    assert page.next_cursor == ""
    return TAIL_CALLS / elapsed


def _raw_tail(conn: sqlite3.Connection, run_id: str) -> float:
    started = time.perf_counter()
    for _ in range(TAIL_CALLS):
        rows = conn.execute(_PAGE, (run_id, RELOAD_RECORDS - TAIL, TAIL)).fetchall()
    elapsed = time.perf_counter() - started
    assert len(rows) == TAIL
    return TAIL_CALLS / elapsed


async def _bench_reloads(workdir: str) -> dict[str, tuple[list[float], list[float]]]:
    path = os.path.join(workdir, "reload.db")
    run_id = await _seed_reload_run(path)
    results: dict[str, tuple[list[float], list[float]]] = {"full": ([], []), "tail": ([], [])}
    async with await SQLiteStore.open(path) as store:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            cursor = await _tail_cursor(store, run_id)
            pairs: list[tuple[str, Callable[[], Awaitable[float]], Callable[[], float]]] = [
                (
                    "full",
                    lambda: _ours_full_reload(store, run_id),
                    lambda: _raw_full_reload(conn, run_id),
                ),
                (
                    "tail",
                    lambda: _ours_tail(store, run_id, cursor),
                    lambda: _raw_tail(conn, run_id),
                ),
            ]
            for _, ours, raw in pairs:  # warm up
                await ours()
                raw()
            for rep in range(REPETITIONS):
                for name, ours, raw in pairs:
                    if rep % 2 == 0:
                        results[name][0].append(await ours())
                        results[name][1].append(raw())
                    else:
                        results[name][1].append(raw())
                        results[name][0].append(await ours())
        finally:
            conn.close()
    return results


def _row(name: str, unit: str, ours: list[float], raw: list[float], target: float) -> list[str]:
    o, r = statistics.median(ours), statistics.median(raw)
    ratio = o / r
    verdict = "ok" if ratio >= target else "MISSED"
    return [
        name,
        f"{o:,.0f} {unit}",
        f"{r:,.0f} {unit}",
        f"{ratio:.2f}x",
        f">= {target}x {verdict}",
    ]


def main() -> int:
    versions = f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}"
    print(f"SQLiteStore vs raw sqlite3 ({versions}, {os.cpu_count()} CPUs)")
    print(f"{REPETITIONS} interleaved repetitions, medians; payload {len(PAYLOAD)} bytes\n")
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory(
        prefix="agentledger-bench-", dir=os.environ.get("BENCH_DIR")
    ) as workdir:
        durabilities: tuple[Durability, ...] = ("full", "normal")
        for durability in durabilities:
            ours, raw = asyncio.run(_bench_appends(workdir, durability))
            rows.append(_row(f"append_run_record ({durability})", "rec/s", ours, raw, 0.6))
        reloads = asyncio.run(_bench_reloads(workdir))
    rows.append(
        _row(f"reload {RELOAD_RECORDS:,} records (limit 1000)", "rec/s", *reloads["full"], 0.5)
    )
    rows.append(_row(f"reload last {TAIL} (from a cursor)", "calls/s", *reloads["tail"], 0.5))
    header = ["operation", "agentledger", "raw sqlite3", "ratio", "target"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for line in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
