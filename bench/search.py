"""Benchmark: search [G1] over N sessions x 20 turns of generated text, SQLite, PostgreSQL, service.

Run as ``.venv/bin/python bench/search.py [--sessions 10000] [--quick]``. It is not a test.
Each session is one run of ``--turns`` turns, each turn one transcript record of a user
question and an assistant answer, sentences generated from a fixed vocabulary with a
fixed ``--seed``. A *common* term ("order") is in about one message in four; a *rare*
term (a made-up word) in about one message in 100,000 (at least one). The same sessions
are written to one SQLite file (``normal``), one PostgreSQL database and read back:

- search latency, p50/p99 over ``--reads`` rounds (a first page of 20 hits), for the rare
  and the common term: SQLite and PostgreSQL in process, and through ``agentledger serve``
  over the SQLite file;
- append cost with the index / without it, at ``full`` durability on SQLite and with
  ``fsync=on`` on PostgreSQL (and, for reference, ``fsync=off``): one transcript record
  appended with its index written, and the same with the backend's index writes skipped,
  interleaved, in a fresh database (SQLite: two files, the second's writer never writing
  the index, with the WAL pages per commit; PostgreSQL: a bench-only switch), wall and CPU
  time per append (on PostgreSQL the server process's CPU too: the machine may be busy,
  CPU time is the steadier); goal <= 1.15x;
- the index's size / the transcript payloads' size, on each backend.

PostgreSQL's search rows use ``AGENTLEDGER_TEST_PG_DSN`` if set (a fresh database is
created and dropped), else a throwaway cluster from ``tests/storage/postgres/server.py``;
its append rows each use a throwaway cluster of their own, ``fsync`` on and off (equal
durability with SQLite ``full``: commits reach the disk).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sqlite3
import statistics
import struct
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
from agentledger.storage import RecordBuilder, RunStart, payloads  # noqa: E402
from agentledger.storage.postgres import PostgresStore  # noqa: E402
from agentledger.storage.postgres import search as pg_search  # noqa: E402
from agentledger.storage.sqlite import SQLiteStore  # noqa: E402
from agentledger.storage.sqlite import search as sqlite_search  # noqa: E402
from agentledger.transcript import Message, TextPart, encode_messages  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC)
COMMON = "order"
RARE = "zanzibarite"
PG_DSN_ENV = "AGENTLEDGER_TEST_PG_DSN"


class Text:
    """Sentences from a fixed vocabulary, reproducible from a seed."""

    def __init__(self, seed: int, rare_every: int) -> None:
        self.random = random.Random(seed)
        syllables = ["ka", "lo", "mi", "ra", "te", "su", "ve", "no", "pi", "da", "ge", "hu"]
        self.words = sorted(
            {
                "".join(self.random.choices(syllables, k=self.random.randint(1, 4)))
                for _ in range(3000)
            }
        )
        self.rare_every = rare_every
        self.count = 0

    def sentence(self) -> str:
        self.count += 1
        words = self.random.choices(self.words, k=self.random.randint(8, 24))
        if self.random.random() < 0.25:
            words[self.random.randrange(len(words))] = COMMON
        if self.count % self.rare_every == self.rare_every // 2:
            words[self.random.randrange(len(words))] = RARE
        return " ".join(words).capitalize() + "."


def turn_payload(text: Text) -> bytes:
    return encode_messages([
        Message(role="user", parts=(TextPart(text=text.sentence()),)),
        Message(role="assistant", parts=(TextPart(text=f"{text.sentence()} {text.sentence()}"),)),
    ])  # fmt: skip


async def fill(store: Any, sessions: int, turns: int, seed: int, concurrency: int = 16) -> int:
    """``sessions`` sessions of one run of ``turns`` transcript records; their payload bytes."""
    text = Text(seed, rare_every=max(2, sessions * turns * 3 // 4))
    size = 0

    async def one(i: int, bodies: list[bytes]) -> None:
        sid = f"s{i:06d}"
        at = T0 + timedelta(seconds=i)
        await store.create_session(sid, created_at=at, labels={"tenant": f"t{i % 10}"})
        run = RecordBuilder(RunStart(run_id=f"{sid}-r", agent_id="a", session_id=sid,
                                     started_at=at))  # fmt: skip
        await store.start_root_run(run.root_start())
        records = [
            run.record(payloads.TRANSCRIPT_APPENDED, body, event_key=f"t{t}",
                       at=at + timedelta(milliseconds=t + 1))
            for t, body in enumerate(bodies)
        ]  # fmt: skip
        await store.append_run_records(records)  # filling: a session's turns in one call

    for base in range(0, sessions, concurrency):
        batch = range(base, min(sessions, base + concurrency))
        bodies = {i: [turn_payload(text) for _ in range(turns)] for i in batch}
        size += sum(len(b) for bs in bodies.values() for b in bs)
        await asyncio.gather(*(one(i, bodies[i]) for i in batch))
    return size


async def latencies(search: Callable[[str], Awaitable[Any]], reads: int) -> dict[str, str]:
    """p50/p99 (ms) of a first page of 20 hits for the rare and the common term."""
    out = {}
    for term in (RARE, COMMON):
        page = await search(term)  # warm, and check
        assert page.hits, f"{term!r} found nothing"
        times = []
        for _ in range(reads):
            start = time.perf_counter()
            await search(term)
            times.append((time.perf_counter() - start) * 1000)
        times.sort()
        p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
        out[term] = f"p50 {statistics.median(times):7.2f} ms  p99 {p99:7.2f} ms"
    return out


@contextmanager
def unindexed(indexed: bool) -> Iterator[None]:
    """Appends as if PostgreSQL's index did not exist (its index writes skipped), unless
    ``indexed``: the A/B of the index's cost, everything else the same."""
    if indexed:
        yield
        return
    saved = pg_search.record_words
    pg_search.record_words = lambda *args, **kw: None  # no words: no position either
    try:
        yield
    finally:
        pg_search.record_words = saved


async def append_ratio(
    open_store: Callable[[], Awaitable[Any]],
    rounds: int,
    seed: int,
    server_cpu: Callable[[], Awaitable[Callable[[], float]]] | None = None,
) -> str:
    """Appends of one transcript record with the index written / skipped, interleaved:
    wall time, and CPU time (this process's, plus the server's from ``server_cpu()``, a
    reader of its CPU seconds once the store is open), each the median per append."""
    store = await open_store()
    text = Text(seed, rare_every=10**9)
    timed: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    try:
        server = (lambda: 0.0) if server_cpu is None else await server_cpu()
        runs = {}
        for indexed in (True, False):
            await store.create_session(f"a-{indexed}", created_at=T0)
            run = RecordBuilder(RunStart(run_id=f"a-{indexed}-r", agent_id="a",
                                         session_id=f"a-{indexed}", started_at=T0))  # fmt: skip
            await store.start_root_run(run.root_start())
            runs[indexed] = run
        for i in range(rounds):
            body = turn_payload(text)
            for indexed in (True, False) if i % 2 else (False, True):
                record = runs[indexed].record(payloads.TRANSCRIPT_APPENDED, body,
                                              event_key=f"k{i}",
                                              at=T0 + timedelta(milliseconds=i))  # fmt: skip
                with unindexed(indexed):
                    used = time.process_time() + server()
                    start = time.perf_counter()
                    await store.append_run_record(record)
                    timed[indexed].append(time.perf_counter() - start)
                    cpu[indexed].append(time.process_time() + server() - used)
    finally:
        await store.close()
    with_index, without = statistics.median(timed[True]), statistics.median(timed[False])
    cpu_with, cpu_without = statistics.median(cpu[True]), statistics.median(cpu[False])
    return (
        f"wall {with_index * 1000:6.3f} / {without * 1000:6.3f} ms = "
        f"{with_index / without:.3f}x; CPU {cpu_with * 1000:6.3f} / {cpu_without * 1000:6.3f} ms "
        f"= {cpu_with / cpu_without:.3f}x (medians of {rounds} each)"
    )


async def pg_backend_cpu(dsn: str) -> Callable[[], float]:
    """The CPU seconds of the one server process serving the store open on ``dsn`` (a
    pool of one, on this machine: ``/proc/<pid>/schedstat``, in nanoseconds)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        pids = [pid for (pid,) in await cur.fetchall()]
    assert len(pids) == 1, f"expected the store's one connection, found {pids}"
    stat = Path(f"/proc/{pids[0]}/schedstat")

    def read() -> float:
        return int(stat.read_text().split()[0]) / 1e9

    return read


class WalCommits:
    """The pages (frames) each commit writes to a database's WAL, read as it grows; a
    checkpoint starts the log over (new salts), so read it at least that often."""

    def __init__(self, path: Path) -> None:
        self.path = Path(f"{path}-wal")
        self.salts = b""
        self.offset = 32
        self.frames = 0
        self.commits: list[int] = []

    def read(self) -> None:
        with self.path.open("rb") as wal:
            header = wal.read(32)
            if len(header) < 32:
                return
            if header[16:24] != self.salts:  # a new generation of the log
                self.salts, self.offset, self.frames = header[16:24], 32, 0
            page_size = struct.unpack(">I", header[8:12])[0]
            wal.seek(self.offset)
            while len(frame := wal.read(24)) == 24 and frame[8:16] == self.salts:
                if len(wal.read(page_size)) < page_size:
                    break
                self.offset += 24 + page_size
                self.frames += 1
                if struct.unpack(">I", frame[4:8])[0] != 0:  # a commit frame ends one
                    self.commits.append(self.frames)
                    self.frames = 0


async def sqlite_append_ratio(tmp: Path, rounds: int, seed: int) -> list[str]:
    """SQLite at ``full``: appends of one transcript record to a store that writes the
    index and to one whose writer never writes it (its flush before each COMMIT skipped:
    the records' words all wait), two files, interleaved; wall and CPU time (the process's,
    every thread) per append, and the WAL pages each commit wrote."""
    paths = {True: tmp / "indexed.db", False: tmp / "unindexed.db"}
    stores = {True: await SQLiteStore.open(paths[True], durability="full")}
    saved = sqlite_search.flush_due
    sqlite_search.flush_due = lambda conn: None  # bound when the store opens
    try:
        stores[False] = await SQLiteStore.open(paths[False], durability="full")
    finally:
        sqlite_search.flush_due = saved
    text = Text(seed, rare_every=10**9)
    wall: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    try:
        runs = {}
        for indexed, store in stores.items():
            await store.create_session("a", created_at=T0)
            run = RecordBuilder(RunStart(run_id="a-r", agent_id="a", session_id="a",
                                         started_at=T0))  # fmt: skip
            await store.start_root_run(run.root_start())
            runs[indexed] = run
        wals = {k: WalCommits(path) for k, path in paths.items()}
        for wal in wals.values():
            wal.read()
        for i in range(rounds):
            body = turn_payload(text)
            for indexed in (True, False) if i % 2 else (False, True):
                record = runs[indexed].record(payloads.TRANSCRIPT_APPENDED, body,
                                              event_key=f"k{i}",
                                              at=T0 + timedelta(milliseconds=i))  # fmt: skip
                start, start_cpu = time.perf_counter(), time.process_time()
                await stores[indexed].append_run_record(record)
                cpu[indexed].append(time.process_time() - start_cpu)
                wall[indexed].append(time.perf_counter() - start)
                wals[indexed].read()
        pages = {k: wal.commits[-rounds:] for k, wal in wals.items()}
    finally:
        for store in stores.values():
            await store.close()
    lines = []
    for what, timed in (("wall", wall), ("CPU", cpu)):
        with_index, without = statistics.mean(timed[True]), statistics.mean(timed[False])
        lines.append(
            f"{what:4} {with_index * 1e6:7.1f} us / {without * 1e6:7.1f} us = "
            f"{with_index / without:.3f}x (means of {rounds} each)"
        )
    per = {k: sum(v) / len(v) for k, v in pages.items()}
    lines.append(
        f"WAL  {per[True]:5.2f} pages / {per[False]:5.2f} pages per commit = "
        f"{per[True] / per[False]:.3f}x ({len(pages[True])} / {len(pages[False])} commits)"
    )
    return lines


def sqlite_index_bytes(path: str) -> int:
    conn = sqlite3.connect(path)
    try:
        (size,) = conn.execute(
            "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'search%'"
        ).fetchone()
        return int(size)
    finally:
        conn.close()


async def pg_index_bytes(dsn: str) -> int:
    """The records' words and positions, and their two indexes."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT (SELECT coalesce(sum(pg_column_size(words)) + 8 * count(*), 0) "
            "FROM agentledger_records WHERE words IS NOT NULL) "
            "+ pg_relation_size('agentledger_records_words') "
            "+ pg_relation_size('agentledger_records_search_pos')"
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


@contextmanager
def postgres() -> Iterator[Callable[[], str]]:
    from tests.storage.postgres.server import PostgresServer, create_database, drop_database

    server = None
    base = os.environ.get(PG_DSN_ENV, "")
    if not base:
        server = PostgresServer()
        base = server.start()
    made: list[str] = []

    def fresh() -> str:
        made.append(create_database(base, prefix="agentledger_bench"))
        return made[-1]

    try:
        yield fresh
    finally:
        for dsn in made:
            drop_database(dsn)
        if server is not None:
            server.stop()


@contextmanager
def durable_postgres(fsync: bool) -> Iterator[str]:
    """A fresh database on a throwaway cluster of its own with ``fsync`` on or off (and
    ``synchronous_commit``, ``full_page_writes`` alike), deleted afterwards."""
    from tests.storage.postgres.server import PostgresServer, create_database

    server = PostgresServer(fsync=fsync)
    try:
        yield create_database(server.start(), prefix="agentledger_bench")
    finally:
        server.stop()


async def bench(args: argparse.Namespace, tmp: Path, fresh_dsn: Callable[[], str]) -> None:
    db, dsn = str(tmp / "search.db"), fresh_dsn()
    print(f"{args.sessions} sessions x {args.turns} turns (seed {args.seed})")
    sqlite_store = await SQLiteStore.open(db, durability="normal")
    pg_store = await PostgresStore.open(dsn)
    try:
        start = time.perf_counter()
        payload = await fill(sqlite_store, args.sessions, args.turns, args.seed)
        print(f"  filled SQLite in {time.perf_counter() - start:.1f} s")
        start = time.perf_counter()
        await fill(pg_store, args.sessions, args.turns, args.seed)
        print(f"  filled PostgreSQL in {time.perf_counter() - start:.1f} s")
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute("ANALYZE")  # what autovacuum does after a bulk fill
        rows: dict[str, dict[str, str]] = {}
        rows["SQLite"] = await latencies(lambda t: sqlite_store.search(t, limit=20), args.reads)
        rows["PostgreSQL"] = await latencies(lambda t: pg_store.search(t, limit=20), args.reads)
    finally:
        await sqlite_store.close()
        await pg_store.close()
    tokens = tmp / "tokens.json"
    token = add_token(tokens, "reader")
    with ServiceProcess(db, tokens) as service:
        async with StoreClient(service.url, token=token) as client:
            rows["service (SQLite)"] = await latencies(
                lambda t: client.search(t, limit=20), args.reads
            )
    print(f"\nsearch, first page of 20 (rare {RARE!r}, common {COMMON!r}):")
    for side, found in rows.items():
        for term, line in found.items():
            print(f"  {side:18} {term:12} {line}")
    print(f"\nindex size / transcript payload size ({payload / 1e6:.1f} MB of payloads):")
    print(f"  SQLite      {sqlite_index_bytes(db) / payload:.2f}")
    print(f"  PostgreSQL  {await pg_index_bytes(dsn) / payload:.2f}")
    print("\nappend with the index / without (one transcript record, 2 messages):")
    for line in await sqlite_append_ratio(tmp, args.appends, args.seed):
        print(f"  SQLite full   {line}")
    for fsync in (True, False):  # equal durability: fsync on is the row; off, for reference
        with durable_postgres(fsync) as pg_dsn:
            pg_ratio = await append_ratio(
                lambda: PostgresStore.open(pg_dsn, min_size=1, max_size=1),
                args.appends,
                args.seed,
                server_cpu=lambda: pg_backend_cpu(pg_dsn),
            )
        print(f"  PostgreSQL fsync={'on ' if fsync else 'off'}  {pg_ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--appends", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="200 sessions, fewer reads")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.reads, args.appends = 200, 50, 100
    with tempfile.TemporaryDirectory() as tmp, postgres() as fresh_dsn:
        asyncio.run(bench(args, Path(tmp), fresh_dsn))


if __name__ == "__main__":
    main()
