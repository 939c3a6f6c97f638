"""Benchmark: SQLiteStore against raw sqlite3 doing the same work on the same machine.

Run as ``.venv/bin/python bench/sqlite_store.py`` (or ``make bench``; ``--only writes``
or ``--only reads`` for half of it). It is not a
test: it prints a table of medians over seven interleaved repetitions (``--repetitions``);
each ratio is the median of the per-repetition ratios. The raw side is the physical limit:
the same INSERT (or SELECT) on the same schema with the same pragmas, with no
store around it, at the same ``synchronous`` setting.

- appends: ``append_run_record``, one ~500-byte record per call, against a loop
  of ``BEGIN IMMEDIATE; INSERT; COMMIT``, for durability ``full`` and ``normal``
  (at ``normal`` the store runs a small append on the caller's thread and
  checkpoints the WAL on its writer thread, where raw sqlite3 checkpoints inside
  its own loop: the same work, on another thread of the same machine);
- 16 concurrent runs (``full``): 16 tasks of one process appending to their own
  run at once (group commit shares their transactions [B2]) against raw sqlite3
  writing the same records 16 per transaction;
- reloads: a 10,000-record run decoded to ``Message``s
  (``build_messages_from_run_log``) against a SELECT of the same rows plus
  ``json.loads`` of each payload (time ratio: lower is better), and its last 50
  records from a cursor against a SELECT of those rows; that tail and
  ``load_run`` again on a handle opened with ``inline=False`` (every read on a
  reader thread), to show what the caller's-thread reads save;
- transactions per one-tool agent run: the commits (counted in the WAL) of a
  ``Runtime`` run whose scripted model calls one tool once, then answers.

Under each append figure it also prints the process CPU time per record of both
sides: it leaves out waiting (for the disk, for a thread to wake), so it shows what
the store's own work costs, and it moves less than the rates on a shared machine.

Targets (issue 11): appends >= 0.85x (``full``) and >= 0.6x (``normal``),
16 runs >= 0.85x, reload time <= 0.8x, tail >= 0.8x, one transaction per activity.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from agentledger.runtime import Agent, ModelPlanner, QueueSink, Runtime, tool
from agentledger.storage import Record, RecordBuilder, RunStart
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.storage.sqlite import Durability, SQLiteStore
from agentledger.storage.sqlite.connection import check_durability
from agentledger.storage.sqlite.schema import migrate
from agentledger.testing import ScriptedModel, reply, tool_calls
from agentledger.transcript import Message, TextPart, encode_messages

REPETITIONS = 7
APPENDS = {"full": 200, "normal": 1000}
CONCURRENT_RUNS = 16
CONCURRENT_APPENDS = 25  # per run and repetition: 400 records
RELOAD_RECORDS = 10_000
TAIL = 50
TAIL_CALLS = 200
LOAD_CALLS = 1000
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


_CPU: dict[str, list[float]] = {"ours": [], "raw": []}
"""Process CPU seconds per record of each timed append loop, in order (warm-ups too)."""


def _cpu_line(name: str, repetitions: int) -> str:
    """Median CPU per record of the last ``repetitions`` loops of each side, and their ratio.

    CPU time counts every thread of the process (the writer's too) and no waiting
    (for the disk, or for a thread to wake): on a busy machine it moves less than
    the rates do.
    """
    ours, raw = _CPU["ours"][-repetitions:], _CPU["raw"][-repetitions:]
    _CPU["ours"].clear()
    _CPU["raw"].clear()
    ratio = statistics.median(r / o for o, r in zip(ours, raw, strict=True))
    return (
        f"{name}: {statistics.median(ours) * 1e6:,.0f} us against "
        f"{statistics.median(raw) * 1e6:,.0f} us raw ({ratio:.2f}x)"
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
    started, cpu = time.perf_counter(), time.process_time()
    for record in records:
        await store.append_run_record(record)
    _CPU["ours"].append((time.process_time() - cpu) / n)
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
    started, cpu = time.perf_counter(), time.process_time()
    for row in rows:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(_INSERT, row)
        conn.execute("COMMIT")
    _CPU["raw"].append((time.process_time() - cpu) / n)
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


async def _ours_concurrent(store: SQLiteStore, runs: list[RecordBuilder], clock: Clock) -> float:
    """16 runs appending at once, each its own records in order."""
    batches = [
        [
            run.record("planner_note", PAYLOAD, event_key=f"note-{clock.ms}-{i}", at=clock())
            for i in range(CONCURRENT_APPENDS)
        ]
        for run in runs
    ]

    async def writer(records: list[Record]) -> None:
        for record in records:
            await store.append_run_record(record)

    n = len(runs) * CONCURRENT_APPENDS
    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(writer(b) for b in batches))
    _CPU["ours"].append((time.process_time() - cpu) / n)
    return n / (time.perf_counter() - started)


def _raw_concurrent(conn: sqlite3.Connection, state: dict[str, int]) -> float:
    """The same records, 16 per transaction (one from each run), as group commit would."""
    groups = []
    for _ in range(CONCURRENT_APPENDS):
        group = []
        for r in range(CONCURRENT_RUNS):
            state["seq"] += 1
            seq = state["seq"]
            group.append(
                (f"raw-{r}", seq, "agent", "raw-session", "turn-1", f"note-{seq}",
                 "planner_note", seq, PAYLOAD)
            )  # fmt: skip
        groups.append(group)
    n = CONCURRENT_RUNS * CONCURRENT_APPENDS
    started, cpu = time.perf_counter(), time.process_time()
    for group in groups:
        conn.execute("BEGIN IMMEDIATE")
        for row in group:
            conn.execute(_INSERT, row)
        conn.execute("COMMIT")
    _CPU["raw"].append((time.process_time() - cpu) / n)
    return n / (time.perf_counter() - started)


async def _bench_concurrent(workdir: str) -> tuple[list[float], list[float]]:
    clock = Clock()
    ours: list[float] = []
    raw: list[float] = []
    async with await SQLiteStore.open(os.path.join(workdir, "ours-16.db")) as store:
        runs = [await _started_run(store, f"run-{i}", clock) for i in range(CONCURRENT_RUNS)]
        conn = _raw_connection(os.path.join(workdir, "raw-16.db"), "full")
        state = {"seq": 0}
        try:
            await _ours_concurrent(store, runs, clock)  # warm up both
            _raw_concurrent(conn, state)
            for rep in range(REPETITIONS):
                if rep % 2 == 0:
                    ours.append(await _ours_concurrent(store, runs, clock))
                    raw.append(_raw_concurrent(conn, state))
                else:
                    raw.append(_raw_concurrent(conn, state))
                    ours.append(await _ours_concurrent(store, runs, clock))
        finally:
            conn.close()
    return ours, raw


def _message_payload(i: int) -> bytes:
    """One transcript message of about 250 bytes, user and assistant in turn."""
    role: Literal["user", "assistant"] = "user" if i % 2 else "assistant"
    text = "the ledger keeps every record in commit order. " * 4
    return encode_messages([Message(role=role, parts=(TextPart(text=f"{i}: {text}"),))])


async def _seed_reload_run(path: str) -> str:
    """A 10,000-record run of transcript messages written through the store."""
    clock = Clock()
    async with await SQLiteStore.open(path, durability="normal") as store:
        run = await _started_run(store, "reload-run", clock)
        batch = [
            run.record(
                "transcript_messages_appended", _message_payload(i), event_key=f"m-{i}", at=clock()
            )
            for i in range(RELOAD_RECORDS - 1)
        ]
        for i in range(0, len(batch), 500):
            await store.append_run_records(batch[i : i + 500])
    return run.run.run_id


async def _ours_decoded_reload(store: SQLiteStore, run_id: str) -> float:
    """Seconds to page the whole run and replay it as Messages."""
    started = time.perf_counter()
    messages = await build_messages_from_run_log(store, run_id)
    elapsed = time.perf_counter() - started
    assert len(messages) == RELOAD_RECORDS - 1, len(messages)
    return elapsed


def _raw_decoded_reload(conn: sqlite3.Connection, run_id: str) -> float:
    """Seconds to SELECT the same rows (all columns) and ``json.loads`` each payload."""
    started = time.perf_counter()
    after, messages = 0, []
    while True:
        rows = conn.execute(_PAGE, (run_id, after, 1000)).fetchall()
        for row in rows:
            if row[6] == "transcript_messages_appended":
                messages.extend(json.loads(row[8]))
        if len(rows) < 1000:
            break
        after = rows[-1][1]
    elapsed = time.perf_counter() - started
    assert len(messages) == RELOAD_RECORDS - 1, len(messages)
    return elapsed


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


async def _ours_load_run(store: SQLiteStore, run_id: str) -> float:
    started = time.perf_counter()
    for _ in range(LOAD_CALLS):
        meta = await store.load_run(run_id)
    elapsed = time.perf_counter() - started
    assert meta.run_id == run_id
    return LOAD_CALLS / elapsed


def _raw_load_run(conn: sqlite3.Connection, run_id: str) -> float:
    """The run's row by its key (what ``load_run`` reads, without the checks)."""
    started = time.perf_counter()
    for _ in range(LOAD_CALLS):
        row = conn.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    elapsed = time.perf_counter() - started
    assert row is not None
    return LOAD_CALLS / elapsed


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
    names = ["full", "tail", "tail threads", "load_run", "load_run threads"]
    results: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in names}
    # "full" holds seconds (lower is better), the others calls per second.
    async with (
        await SQLiteStore.open(path) as store,
        await SQLiteStore.open(path, inline=False) as threads,
    ):
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            cursor = await _tail_cursor(store, run_id)
            pairs: list[tuple[str, Callable[[], Awaitable[float]], Callable[[], float]]] = [
                (
                    "full",
                    lambda: _ours_decoded_reload(store, run_id),
                    lambda: _raw_decoded_reload(conn, run_id),
                ),
                (
                    "tail",
                    lambda: _ours_tail(store, run_id, cursor),
                    lambda: _raw_tail(conn, run_id),
                ),
                (
                    "tail threads",
                    lambda: _ours_tail(threads, run_id, cursor),
                    lambda: _raw_tail(conn, run_id),
                ),
                (
                    "load_run",
                    lambda: _ours_load_run(store, run_id),
                    lambda: _raw_load_run(conn, run_id),
                ),
                (
                    "load_run threads",
                    lambda: _ours_load_run(threads, run_id),
                    lambda: _raw_load_run(conn, run_id),
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


@tool
async def ping() -> str:
    """A tool with nothing to do."""
    return "pong"


def _wal_commits(path: str) -> int:
    """Commit frames in the database's WAL (each committed transaction ends with one)."""
    wal = Path(f"{path}-wal").read_bytes()
    if len(wal) < 32:
        return 0
    page_size = struct.unpack(">I", wal[8:12])[0]
    commits, offset = 0, 32
    while offset + 24 + page_size <= len(wal):
        header = wal[offset : offset + 24]
        if header[8:16] != wal[16:24]:
            break
        commits += struct.unpack(">I", header[4:8])[0] != 0
        offset += 24 + page_size
    return commits


async def _agent_run_transactions(workdir: str) -> tuple[int, int]:
    """(commits, records) of one one-tool agent run through Runtime + SQLiteStore."""
    path = os.path.join(workdir, "agent.db")
    async with await SQLiteStore.open(path) as store:
        await store.create_session("agent-session", created_at=T0)
        runtime = Runtime(store, stream=QueueSink())
        runtime.register_model("m", ScriptedModel([tool_calls(("p1", "ping", {})), reply("ok")]))
        runtime.register_agent(Agent("chat", ModelPlanner("m", system="Be brief."), tools=[ping]))
        before = _wal_commits(path)
        out = await runtime.agent_client("chat").run(
            "agent-session", [Message(role="user", parts=(TextPart(text="ping"),))]
        )
        commits = _wal_commits(path) - before
        page = await store.list_run_records(out.run_id, limit=1000)
    return commits, len(page.records)


def _row(
    name: str,
    unit: str,
    ours: list[float],
    raw: list[float],
    target: str,
    met: Callable[[float], bool],
) -> list[str]:
    """Medians of both sides, the median of the per-repetition ratios, the target."""
    ratio = statistics.median(o / r for o, r in zip(ours, raw, strict=True))
    fmt = "{:,.1f}" if unit == "ms" else "{:,.0f}"
    scale = 1000 if unit == "ms" else 1
    return [
        name,
        f"{fmt.format(statistics.median(ours) * scale)} {unit}",
        f"{fmt.format(statistics.median(raw) * scale)} {unit}",
        f"{ratio:.2f}x",
        target if target == "-" else f"{target} {'ok' if met(ratio) else 'MISSED'}",
    ]


def _at_least(target: float) -> Callable[[float], bool]:
    return lambda ratio: ratio >= target


def _at_most(target: float) -> Callable[[float], bool]:
    return lambda ratio: ratio <= target


def main() -> int:
    global REPETITIONS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=REPETITIONS)
    parser.add_argument(
        "--only",
        choices=["writes", "reads"],
        help="only the append figures, or only the reloads and the agent run",
    )
    args = parser.parse_args()
    REPETITIONS = args.repetitions
    versions = f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}"
    print(f"SQLiteStore vs raw sqlite3 ({versions}, {os.cpu_count()} CPUs)")
    print(
        f"{REPETITIONS} interleaved repetitions, medians (ratio: median of the "
        f"per-repetition ratios); payload {len(PAYLOAD)} bytes"
    )
    print(f"load average at start: {_load()}\n")
    rows: list[list[str]] = []
    cpu: list[str] = []
    commits = records = 0
    with tempfile.TemporaryDirectory(
        prefix="agentledger-bench-", dir=os.environ.get("BENCH_DIR")
    ) as workdir:
        if args.only != "reads":
            durabilities: tuple[Durability, ...] = ("full", "normal")
            for durability in durabilities:
                ours, raw = asyncio.run(_bench_appends(workdir, durability))
                target = 0.85 if durability == "full" else 0.6
                name = f"append_run_record ({durability})"
                rows.append(_row(name, "rec/s", ours, raw, f">= {target}x", _at_least(target)))
                cpu.append(_cpu_line(name, REPETITIONS))
            ours, raw = asyncio.run(_bench_concurrent(workdir))
            name = f"{CONCURRENT_RUNS} concurrent runs (full) vs 16/txn"
            rows.append(_row(name, "rec/s", ours, raw, ">= 0.85x", _at_least(0.85)))
            cpu.append(_cpu_line(name, REPETITIONS))
        if args.only != "writes":
            reloads = asyncio.run(_bench_reloads(workdir))
            commits, records = asyncio.run(_agent_run_transactions(workdir))
            name = f"reload {RELOAD_RECORDS:,} as Messages (time)"
            rows.append(_row(name, "ms", *reloads["full"], "<= 0.8x", _at_most(0.8)))
            name = f"reload last {TAIL} (from a cursor)"
            rows.append(_row(name, "calls/s", *reloads["tail"], ">= 0.8x", _at_least(0.8)))
            name = "  same, inline=False (threads)"
            rows.append(_row(name, "calls/s", *reloads["tail threads"], "-", _at_least(0.8)))
            name = "load_run (vs SELECT of the row)"
            rows.append(_row(name, "calls/s", *reloads["load_run"], "-", _at_least(0.8)))
            name = "  same, inline=False (threads)"
            rows.append(_row(name, "calls/s", *reloads["load_run threads"], "-", _at_least(0.8)))
    header = ["operation", "agentledger", "raw sqlite3", "ratio", "target"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for line in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    if cpu:
        print("\nprocess CPU per record (medians; ratio: raw / agentledger, higher is better)")
        for line in cpu:
            print(f"  {line}")
    if args.only != "writes":
        print(f"\none-tool agent run: {commits} store transactions for {records} records")
    print(f"\nload average at end: {_load()}")
    return 0


def _load() -> str:
    """The 1, 5 and 15 minute load averages: the machine is shared, so say how busy it was."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
