"""Benchmark: every single operation against its limit, in one command.

Run as ``.venv/bin/python bench/limits.py`` (``--quick`` for a short pass of the
same figures: fewer repetitions and smaller sizes, for a smoke check, not for
numbers; ``--baseline OTHER/src`` for the SQLite rows only, of this checkout and of
another one in the same run, a fresh process per side and round, alternating). It
is not a test. Each figure is measured against its reference in
the same run, the two sides interleaved (their order alternating per
repetition), at equal durability and with equal work, both warm; the ratio is
the median of the per-repetition ratios. The load average is printed at the
start and at the end: the machine may be shared.

- SQLite append, one writer, ``synchronous=FULL`` and ``NORMAL``:
  ``append_run_record`` of a ~500-byte record per call against raw ``sqlite3``
  running ``BEGIN IMMEDIATE; INSERT; COMMIT`` per record on the same schema and
  pragmas (``bench/sqlite_store.py``), and the process CPU per append of both
  (every thread; no waiting);
- WAL pages per commit of a lone append (read from the WAL file's frames) against
  raw ``sqlite3``'s one-INSERT transaction on the same schema;
- 16 concurrent runs at ``FULL``: 16 tasks of one process appending to their own
  run at once, against raw ``sqlite3`` writing the same records 16 per
  transaction (what group commit does at best);
- a one-tool agent run (question, tool call, answer) with a scripted model, each
  run in its own session, every trial in a fresh process: ``Runtime`` +
  ``SQLiteStore`` against openai-agents ``Runner.run`` + ``SQLiteSession``
  (``bench/peers.py``; both WAL, ``synchronous`` as each opens it: FULL);
- PostgreSQL append (``fsync=on``): ``append_run_record`` against the same
  INSERT alone in autocommit, one round trip (``bench/postgres_store.py``). The
  server is ``AGENTLEDGER_TEST_PG_DSN`` if it runs with ``fsync=on``, else a
  throwaway cluster with ``fsync=on`` (``--no-postgres`` skips it);
- memory: the peak RSS of a fresh process appending 2,000 records and reloading
  them as ``Message``s, against a fresh process doing the same with raw
  ``sqlite3`` and ``json.loads`` (the interpreter's own share is in both).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

HERE = Path(__file__).resolve().parent
MEMORY_RECORDS = 2_000
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def _median_ratio(ours: list[float], ref: list[float]) -> float:
    return statistics.median(o / r for o, r in zip(ours, ref, strict=True))


class Table:
    """Rows of figure, agentledger, reference, ratio, goal (met or missed)."""

    def __init__(self) -> None:
        self.rows: list[list[str]] = []

    def add(
        self,
        figure: str,
        ours: str,
        reference: str,
        ratio: float,
        goal: str,
        met: Callable[[float], bool],
    ) -> None:
        verdict = "" if goal == "-" else " met" if met(ratio) else " MISSED"
        self.rows.append([figure, ours, reference, f"{ratio:.2f}x", f"{goal}{verdict}"])

    def print(self) -> None:
        header = ["figure", "agentledger", "reference", "ratio", "goal"]
        print(f"| {' | '.join(header)} |")
        print(f"|{'---|' * len(header)}")
        for row in self.rows:
            print(f"| {' | '.join(row)} |")


def _at_least(goal: float) -> Callable[[float], bool]:
    return lambda ratio: ratio >= goal


def _at_most(goal: float) -> Callable[[float], bool]:
    return lambda ratio: ratio <= goal


# SQLite appends ----------------------------------------------------------------


def sqlite_appends(table: Table, workdir: Path, repetitions: int, quick: bool) -> None:
    import sqlite_store as bench  # bench/sqlite_store.py: its harness, unchanged

    bench.REPETITIONS = repetitions
    if quick:
        bench.APPENDS = {"full": 40, "normal": 100}
        bench.CONCURRENT_APPENDS = 4
    durabilities: tuple[Literal["full", "normal"], ...] = ("full", "normal")
    for durability in durabilities:
        ours, raw = asyncio.run(bench._bench_appends(str(workdir), durability))
        cpu_ours = bench._CPU["ours"][-repetitions:]
        cpu_raw = bench._CPU["raw"][-repetitions:]
        bench._CPU["ours"].clear()
        bench._CPU["raw"].clear()
        table.add(
            f"one writer, `synchronous={durability.upper()}`, appends/s",
            f"{statistics.median(ours):,.0f}",
            f"raw `sqlite3` one transaction per record: {statistics.median(raw):,.0f}",
            _median_ratio(ours, raw),
            ">= 0.85x",
            _at_least(0.85),
        )
        table.add(
            f"CPU per append at {durability.upper()}",
            f"{statistics.median(cpu_ours) * 1e6:,.0f} µs",
            f"raw: {statistics.median(cpu_raw) * 1e6:,.0f} µs",
            _median_ratio(cpu_ours, cpu_raw),
            "<= 1.5x",
            _at_most(1.5),
        )
    ours, raw = asyncio.run(bench._bench_concurrent(str(workdir)))
    cpu_ours = bench._CPU["ours"][-repetitions:]
    cpu_raw = bench._CPU["raw"][-repetitions:]
    bench._CPU["ours"].clear()
    bench._CPU["raw"].clear()
    table.add(
        f"{bench.CONCURRENT_RUNS} concurrent runs, FULL, records/s",
        f"{statistics.median(ours):,.0f}",
        f"raw 16 records per transaction: {statistics.median(raw):,.0f}",
        _median_ratio(ours, raw),
        ">= 0.85x",
        _at_least(0.85),
    )
    table.add(
        "  CPU per record of the same",
        f"{statistics.median(cpu_ours) * 1e6:,.0f} µs",
        f"raw: {statistics.median(cpu_raw) * 1e6:,.0f} µs",
        _median_ratio(cpu_ours, cpu_raw),
        "-",
        lambda _: True,
    )


def _wal_commits(path: str) -> list[list[int]]:
    """The page numbers each commit wrote, from the WAL file's frames (oldest first)."""
    data = Path(f"{path}-wal").read_bytes()
    page_size, salts = int.from_bytes(data[8:12], "big"), data[16:24]
    commits: list[list[int]] = []
    pages: list[int] = []
    offset = 32
    while offset + 24 + page_size <= len(data) and data[offset + 8 : offset + 16] == salts:
        pages.append(int.from_bytes(data[offset : offset + 4], "big"))
        if data[offset + 4 : offset + 8] != bytes(4):  # a commit's last frame
            commits.append(pages)
            pages = []
        offset += 24 + page_size
    return commits


async def _ours_pages(path: str, appends: int, labels: dict[str, str]) -> float:
    import sqlite_store as bench

    from agentledger.storage.builders import RecordBuilder
    from agentledger.storage.sqlite import SQLiteStore
    from agentledger.storage.types import RunStart

    clock = bench.Clock()
    async with await SQLiteStore.open(path, durability="full") as store:
        await store.create_session("pages-session", created_at=clock(), labels=labels)
        start = RunStart(
            run_id="pages-run", agent_id="agent", session_id="pages-session", started_at=clock()
        )
        run = RecordBuilder(start, turn_id="turn-1")
        await store.start_root_run(run.root_start())
        await bench._ours_appends(store, run, 10, clock)  # fewer than a checkpoint's commits
        before = len(_wal_commits(path))
        await bench._ours_appends(store, run, appends, clock)
        commits = _wal_commits(path)[before:]
    return sum(map(len, commits)) / len(commits)


def _raw_pages(path: str, appends: int) -> float:
    import sqlite_store as bench

    conn = bench._raw_connection(path, "full")
    try:
        state = {"seq": 0}
        bench._raw_appends(conn, 10, state)
        before = len(_wal_commits(path))
        bench._raw_appends(conn, appends, state)
        commits = _wal_commits(path)[before:]
    finally:
        conn.close()
    return sum(map(len, commits)) / len(commits)


def wal_pages(table: Table, workdir: Path) -> None:
    """The pages a lone append's commit writes to the WAL (each is synced at FULL), read
    from the WAL file: the store's against raw ``sqlite3``'s INSERT on the same schema."""
    appends = 50
    ours = asyncio.run(_ours_pages(str(workdir / "pages-ours.db"), appends, {}))
    labelled = asyncio.run(
        _ours_pages(str(workdir / "pages-labels.db"), appends, {"tenant": "t", "tier": "gold"})
    )
    raw = _raw_pages(str(workdir / "pages-raw.db"), appends)
    table.add(
        "WAL pages per lone append's commit",
        f"{ours:.2f} ({labelled:.2f} in a session with two labels)",
        f"raw one INSERT per transaction: {raw:.2f}",
        ours / raw,
        "-",
        lambda _: True,
    )


# One-tool agent run ------------------------------------------------------------


def agent_runs(table: Table, workdir: Path, repetitions: int, runs: int) -> None:
    import peers  # bench/peers.py: its trials, each in a fresh process

    ours: list[float] = []
    theirs: list[float] = []
    cpu_ours: list[float] = []
    cpu_theirs: list[float] = []
    for rep in range(repetitions):
        order = ("agentledger", "openai-agents")[:: 1 if rep % 2 == 0 else -1]
        for system in order:
            result = peers._spawn(system, "agent", workdir / f"agent-{system}-{rep}", runs)
            (ours if system == "agentledger" else theirs).append(runs / result["seconds"])
            cpu = cpu_ours if system == "agentledger" else cpu_theirs
            cpu.append(result["cpu_seconds"] / runs)
    table.add(
        "one-tool agent run, runs/s (SQLite, FULL)",
        f"{statistics.median(ours):,.1f}",
        f"openai-agents `Runner` + `SQLiteSession`: {statistics.median(theirs):,.1f}",
        _median_ratio(ours, theirs),
        ">= 3x",
        _at_least(3.0),
    )
    table.add(
        "  CPU per run of the same (all threads)",
        f"{statistics.median(cpu_ours) * 1e3:,.2f} ms",
        f"openai-agents: {statistics.median(cpu_theirs) * 1e3:,.2f} ms",
        _median_ratio(cpu_ours, cpu_theirs),
        "<= 0.33x",
        _at_most(1 / 3),
    )


# PostgreSQL ----------------------------------------------------------------------


@contextlib.contextmanager
def _durable_database() -> Iterator[str]:
    """A fresh database on a server with ``fsync=on``: the configured one if it is, else a
    throwaway cluster."""
    import postgres_store as bench

    configured = os.environ.get(bench.PG_DSN_ENV, "")
    if configured:
        _, fsync = asyncio.run(bench._server_settings(configured))
        if fsync != "on":
            os.environ.pop(bench.PG_DSN_ENV)
    try:
        with bench._database(fsync=True) as dsn:
            yield dsn
    finally:
        if configured:
            os.environ[bench.PG_DSN_ENV] = configured


def postgres_appends(table: Table, repetitions: int, quick: bool) -> None:
    import postgres_store as bench

    bench.REPETITIONS = repetitions
    if quick:
        bench.APPENDS = 50
    with _durable_database() as dsn:
        version, fsync = asyncio.run(bench._server_settings(dsn))
        ours, _, floor, cpu_ours, _, cpu_floor = asyncio.run(bench._bench_appends(dsn))
    table.add(
        f"PostgreSQL {version} append (fsync={fsync}), appends/s",
        f"{statistics.median(ours):,.0f}",
        f"one autocommit `INSERT`: {statistics.median(floor):,.0f}",
        _median_ratio(ours, floor),
        ">= 0.85x",
        _at_least(0.85),
    )
    if cpu_ours and len(cpu_ours) == len(cpu_floor):  # a local server: its CPU is readable
        table.add(
            "  CPU per append, client + server backend",
            f"{statistics.median(cpu_ours) * 1e6:,.0f} µs",
            f"the `INSERT`: {statistics.median(cpu_floor) * 1e6:,.0f} µs",
            _median_ratio(cpu_ours, cpu_floor),
            "-",
            lambda _: True,
        )


# Memory ----------------------------------------------------------------------------


def _payload(i: int) -> bytes:
    """One ~250-byte transcript message, as ``encode_messages`` writes it (both sides
    store these bytes; the raw side imports no agentledger)."""
    role = "user" if i % 2 == 0 else "assistant"
    text = f"message {i}: " + "the ledger keeps every message in order. " * 5
    message = {"role": role, "parts": [{"kind": "text", "text": text}]}
    return json.dumps([message], separators=(",", ":")).encode()


def _peak_rss_mib() -> float:
    """This process's peak resident set (``VmHWM``: of its own image since exec; unlike
    ``ru_maxrss``, which keeps the parent's peak across a fork and exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux


async def _memory_ours(path: str) -> int:
    from agentledger.storage import RecordBuilder, RunStart
    from agentledger.storage.sqlite import SQLiteStore
    from agentledger.transcript import build_messages_from_run_log

    async with await SQLiteStore.open(path) as store:
        await store.create_session("s", created_at=T0)
        run = RecordBuilder(
            RunStart(run_id="r", agent_id="a", session_id="s", started_at=T0), turn_id="t"
        )
        await store.start_root_run(run.root_start())
        for i in range(MEMORY_RECORDS):
            at = T0 + timedelta(milliseconds=i + 1)
            record = run.record(
                "transcript_messages_appended", _payload(i), event_key=f"m{i}", at=at
            )
            await store.append_run_record(record)
        messages = await build_messages_from_run_log(store, "r")
    return len(messages)


def _memory_raw(path: str) -> int:
    payloads = [_payload(i) for i in range(MEMORY_RECORDS)]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE records (seq INTEGER PRIMARY KEY, payload BLOB NOT NULL)")
    for payload in payloads:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO records (payload) VALUES (?)", (payload,))
        conn.execute("COMMIT")
    rows = conn.execute("SELECT payload FROM records ORDER BY seq").fetchall()
    messages = [message for (payload,) in rows for message in json.loads(payload)]
    conn.close()
    return len(messages)


def _memory_trial(side: str, workdir: str) -> None:
    path = os.path.join(workdir, f"memory-{side}.db")
    count = asyncio.run(_memory_ours(path)) if side == "ours" else _memory_raw(path)
    assert count == MEMORY_RECORDS, count
    print(json.dumps({"peak_rss_mib": _peak_rss_mib()}))


def _spawn_memory(side: str, workdir: Path) -> float:
    workdir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, __file__, "--memory-trial", side, str(workdir)]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"memory trial {side} failed:\n{out.stderr}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mib"])


def memory(table: Table, workdir: Path, repetitions: int) -> None:
    ours: list[float] = []
    raw: list[float] = []
    for rep in range(repetitions):
        for side in ("ours", "raw")[:: 1 if rep % 2 == 0 else -1]:
            peak = _spawn_memory(side, workdir / f"memory-{side}-{rep}")
            (ours if side == "ours" else raw).append(peak)
    mib = statistics.median(ours)
    table.add(
        f"peak RSS, {MEMORY_RECORDS:,} appends + a reload (MiB; goal < 40)",
        f"{mib:,.1f}",
        f"raw `sqlite3` + `json.loads`: {statistics.median(raw):,.1f}",
        _median_ratio(ours, raw),
        "< 40 MiB",
        lambda _: mib < 40,
    )


def _sqlite_trial(workdir: str, repetitions: int, quick: bool) -> None:
    """The SQLite rows alone, printed as JSON (one side of ``--baseline``)."""
    sys.path.insert(0, str(HERE))
    table = Table()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        sqlite_appends(table, Path(tmp), repetitions, quick)
        wal_pages(table, Path(tmp))
    print(json.dumps(table.rows))


def sqlite_against_baseline(baseline: str, rounds: int, repetitions: int, quick: bool) -> None:
    """The SQLite rows of this checkout and of another one's ``src`` (``baseline``), each
    round in a fresh process per side, the sides' order alternating per round; every
    ratio is still against raw ``sqlite3`` in the same process."""
    here_src = str(HERE.parent / "src")
    tables: dict[str, list[list[list[str]]]] = {"this checkout": [], baseline: []}
    with tempfile.TemporaryDirectory(prefix="agentledger-limits-") as tmp:
        for round_ in range(rounds):
            sides = [("this checkout", here_src), (baseline, baseline)]
            for name, src in sides[:: 1 if round_ % 2 == 0 else -1]:
                env = dict(os.environ, PYTHONPATH=src)
                argv = [sys.executable, __file__, "--sqlite-trial", tmp, str(repetitions)]
                if quick:
                    argv.append("--quick")
                out = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
                if out.returncode != 0:
                    raise SystemExit(f"SQLite trial of {name} failed:\n{out.stderr}")
                tables[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    for name, runs in tables.items():
        print(f"\n{name}: each cell ours vs raw = ratio, one per round")
        for i, row in enumerate(runs[0]):
            cells = " ; ".join(f"{r[i][1]} vs {r[i][2].split(': ')[-1]} = {r[i][3]}" for r in runs)
            print(f"| {row[0]} | {cells} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke pass")
    parser.add_argument("--repetitions", type=int, help="interleaved repetitions (default 5)")
    parser.add_argument("--runs", type=int, help="agent runs per trial (default 20)")
    parser.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL row")
    parser.add_argument(
        "--baseline",
        metavar="SRC",
        help="only the SQLite rows, against another checkout's src directory in the same "
        "interleaved run (a fresh process per side and round)",
    )
    parser.add_argument("--rounds", type=int, default=4, help="rounds of --baseline")
    parser.add_argument("--memory-trial", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--sqlite-trial", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_trial:
        _memory_trial(*args.memory_trial)
        return 0
    if args.sqlite_trial:
        _sqlite_trial(args.sqlite_trial[0], int(args.sqlite_trial[1]), args.quick)
        return 0
    repetitions = args.repetitions or (2 if args.quick else 5)
    if args.baseline:
        print(f"SQLite rows against {args.baseline}: load average at start: {_load()}")
        sqlite_against_baseline(args.baseline, args.rounds, repetitions, args.quick)
        print(f"\nload average at end: {_load()}")
        return 0
    runs = args.runs or (3 if args.quick else 20)
    sys.path.insert(0, str(HERE))
    print(f"agentledger at its limits: {repetitions} interleaved repetitions, medians")
    print(
        f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )
    print(f"load average at start: {_load()}\n")
    started = time.perf_counter()
    table = Table()
    with tempfile.TemporaryDirectory(prefix="agentledger-limits-") as tmp:
        root = Path(tmp)
        sqlite_appends(table, root, repetitions, args.quick)
        wal_pages(table, root)
        agent_runs(table, root, repetitions, runs)
        if not args.no_postgres:
            postgres_appends(table, repetitions, args.quick)
        memory(table, root, repetitions)
    table.print()
    print(f"\nload average at end: {_load()}; {time.perf_counter() - started:,.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
