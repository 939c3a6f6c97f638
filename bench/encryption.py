"""Benchmark: what encryption at rest [A2] costs, on against off, same backend, one run.

Run as ``.venv/bin/python bench/encryption.py [--rounds N] [--postgres DSN]``. It
is not a test: it prints per-round ratios and their median. Each round measures,
for encryption off and on (the order alternates between rounds), on a fresh
database of the same backend and durability (SQLite ``full``; PostgreSQL if a
DSN is given):

- ``append``: wall seconds per single-record ``append_run_record`` (each one
  commit), over ``APPENDS`` appends to one run;
- ``reload``: wall seconds to read a 10,000-record run of transcript messages
  back, page by page (``list_run_records``, 1,000 a page), opening (or not)
  every payload; the best of ``RELOADS`` reads, as a machine shared with other
  work adds noise;
- ``replay``: wall seconds to rebuild that run's transcript as ``Message``s
  (``build_messages_from_run_log``: the store's ``verified_transcript_payloads``,
  then the quick decode), what an agent's reload costs; best of ``RELOADS``;
- ``reload cpu`` and ``replay cpu``: the same reads' CPU time (the process's,
  every thread), steadier than wall time on a machine shared with other work.

It prints absolute figures too (µs per append, µs per reloaded record), since
a ratio moves when the plaintext side gets faster. ``--breakdown`` adds where a
SQLite page's time goes (fetch; decode, verify and open; replay's split; the
bare AES-GCM calls), timed in the reader's thread, best of many interleaved
tries: the steadiest figure on a busy machine (``--rounds 0 --breakdown``
prints it alone).

Goal: the median on/off ratio <= 1.15 for appends and the reload.

``--backend postgres`` measures PostgreSQL alone: a throwaway server started
with ``fsync=on`` (or the server of ``--postgres DSN``), a fresh database per
measurement, dropped afterwards; the same figures, interleaved the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from agentledger.storage import RunStart  # noqa: E402
from agentledger.storage.builders import RecordBuilder  # noqa: E402
from agentledger.storage.encryption import Encryption, Keyring  # noqa: E402
from agentledger.storage.postgres import PostgresStore  # noqa: E402
from agentledger.storage.replay import build_messages_from_run_log  # noqa: E402
from agentledger.storage.sqlite import SQLiteStore  # noqa: E402
from agentledger.transcript import Message, TextPart, encode_messages  # noqa: E402

APPENDS = 200
RELOAD = 10_000
RELOADS = 3
BATCH = 500
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
PAYLOAD = b'{"role": "assistant", "text": "%s"}' % (b"lorem ipsum dolor sit amet " * 12)
TRANSCRIPT = "transcript_messages_appended"
MESSAGE = encode_messages(
    [Message(role="assistant", parts=(TextPart(text="lorem ipsum dolor sit amet " * 12),))]
)
"""One transcript message of about the size of ``PAYLOAD``."""
FIGURES = ("append", "reload", "replay", "reload cpu", "replay cpu")
"""Each as seconds; ``cpu``: the process's CPU time (all its threads), which other
work on a shared machine moves far less than wall time."""


async def _open(backend: str, where: Any, encrypted: bool, folder: Path) -> Any:
    encryption = None
    if encrypted:
        encryption = Encryption(Keyring.generate(), folder / f"{uuid.uuid4().hex}.vault")
    if backend == "sqlite":
        db = folder / f"{uuid.uuid4().hex}.db"
        return await SQLiteStore.open(db, durability="full", encryption=encryption)
    from tests.storage.postgres.server import create_database

    return await PostgresStore.open(create_database(where), encryption=encryption)


def _run(session_id: str) -> RecordBuilder:
    return RecordBuilder(
        RunStart(
            run_id=uuid.uuid4().hex,
            agent_id="bench",
            session_id=session_id,
            parent_run_id="",
            predecessor_run_id="",
            started_at=EPOCH,
            labels={},
        )
    )


async def _reload(store: Any, run_id: str) -> tuple[float, float]:
    """Wall and CPU seconds to read the whole run back, page by page."""
    started, cpu = time.perf_counter(), time.process_time()
    cursor, count = "", 0
    while True:
        page = await store.list_run_records(run_id, cursor=cursor, limit=1000)
        count += len(page.records)
        cursor = page.next_cursor
        if not cursor:
            break
    elapsed = time.perf_counter() - started, time.process_time() - cpu
    assert count == RELOAD + 1, count
    return elapsed


async def _replay(store: Any, run_id: str) -> tuple[float, float]:
    """Wall and CPU seconds to rebuild the run's transcript as Messages, as a reloading
    agent does."""
    assert store.transcripts_verified  # the path agents take on this store
    started, cpu = time.perf_counter(), time.process_time()
    messages = await build_messages_from_run_log(store, run_id)
    elapsed = time.perf_counter() - started, time.process_time() - cpu
    assert len(messages) == RELOAD, len(messages)
    return elapsed


async def _workload(store: Any) -> dict[str, float]:
    """Seconds per single-record append; to page a 10,000-record run back; to replay it."""
    await store.create_session("s", created_at=EPOCH)
    run = _run("s")
    await store.start_root_run(run.root_start())
    at = [EPOCH + timedelta(milliseconds=i + 1) for i in range(RELOAD)]
    notes = [run.record("note", PAYLOAD, event_key=f"a{i}", at=at[i]) for i in range(APPENDS)]
    started = time.perf_counter()
    for note in notes:
        await store.append_run_record(note)
    append = (time.perf_counter() - started) / APPENDS

    big = _run("s")
    await store.start_root_run(big.root_start())
    records = [big.record(TRANSCRIPT, MESSAGE, event_key=f"r{i}", at=at[i]) for i in range(RELOAD)]
    for i in range(0, RELOAD, BATCH):
        await store.append_run_records(records[i : i + BATCH])
    run_id = big.run.run_id
    reloads = [await _reload(store, run_id) for _ in range(RELOADS)]
    replays = [await _replay(store, run_id) for _ in range(RELOADS)]
    return {
        "append": append,
        "reload": min(wall for wall, _ in reloads),
        "replay": min(wall for wall, _ in replays),
        "reload cpu": min(cpu for _, cpu in reloads),
        "replay cpu": min(cpu for _, cpu in replays),
    }


async def _measure(backend: str, where: Any, encrypted: bool, folder: Path) -> dict[str, float]:
    store = await _open(backend, where, encrypted, folder)
    try:
        return await _workload(store)
    finally:
        await store.close()


def _report_round(backend: str, n: int, got: dict[bool, dict[str, float]]) -> None:
    """One round's absolute figures, off and on."""
    per_record = {m: {mode: got[mode][m] / (RELOAD + 1) * 1e6 for mode in got} for m in FIGURES}
    shown = "; ".join(
        f"{m} off {per_record[m][False]:.2f} on {per_record[m][True]:.2f} µs a record "
        f"({per_record[m][True] - per_record[m][False]:+.2f})"
        for m in ("reload", "replay", "reload cpu", "replay cpu")
    )
    print(
        f"{backend} round {n + 1}: append off {got[False]['append'] * 1e3:.2f} ms "
        f"on {got[True]['append'] * 1e3:.2f} ms; {shown}",
        flush=True,
    )


def _report_medians(backend: str, ratios: dict[str, list[float]]) -> None:
    for metric, values in ratios.items():
        shown = " ".join(f"{v:.3f}" for v in values)
        median = statistics.median(values)
        print(f"{backend} {metric} on/off per round: {shown}; median {median:.3f}")


async def breakdown(folder: Path, repeats: int = 60) -> None:
    """Where a SQLite reload's time goes, in the reader's thread (no event loop hop).

    For a 1,000-record run of transcript messages in each database: the page
    query (``fetch``), its rows made a checked page of records, payloads opened
    if sealed (``page``), the whole log's transcript payloads for replay
    (``replay``, what ``verified_transcript_payloads`` does after its fetch),
    and on the encrypted side the bare AES-GCM calls of the page (``aead``: the
    floor of opening). Each is the best of ``repeats`` tries, interleaved
    between the two databases, so load on a shared machine moves it least.
    """
    import sqlite3

    from agentledger.storage import pages
    from agentledger.storage.sqlite.reader import SQLiteReader

    steps: dict[tuple[bool, str], Any] = {}
    stores = []
    for encrypted in (False, True):
        store = await _open("sqlite", None, encrypted, folder)
        stores.append(store)
        await store.create_session("s", created_at=EPOCH)
        run = _run("s")
        await store.start_root_run(run.root_start())
        at = EPOCH + timedelta(milliseconds=1)
        await store.append_run_records(
            [run.record(TRANSCRIPT, MESSAGE, event_key=f"r{i}", at=at) for i in range(1000)]
        )
        conn = sqlite3.connect(store.path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        run_id = run.run.run_id
        sealer = store.encryption
        reader = SQLiteReader(conn, sealer=sealer)
        head, rows = reader._run_rows(run_id, 0, 1000)
        whole_head, whole = reader._run_rows(run_id, 0, sys.maxsize)
        steps[(encrypted, "fetch")] = lambda r=reader, i=run_id: r._run_rows(i, 0, 1000)
        steps[(encrypted, "page")] = lambda i=run_id, h=head, p=rows, e=sealer: pages.run_page(
            i, h, p, start=0, size=1000, per_second=1000, sealer=e
        )
        steps[(encrypted, "replay")] = lambda i=run_id, h=whole_head, p=whole, e=sealer: (
            pages.split_transcript(i, h, p, per_second=1000, sealer=e)
        )
        if encrypted:
            key = sealer._key("s", run_id, create=False)
            sealed = [
                (row[5][1:13], row[5][13:], f"record\x00s\x00{run_id}\x00{row[2]}\x00{row[3]}")
                for row in rows
            ]
            sealed = [(nonce, body, aad.encode()) for nonce, body, aad in sealed]

            def aead(k: Any = key, s: list[tuple[bytes, bytes, bytes]] = sealed) -> None:
                for nonce, body, aad in s:
                    k.decrypt(nonce, body, aad)

            steps[(True, "aead")] = aead
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(repeats):
        for step, call in steps.items():
            started = time.perf_counter()
            call()
            best[step] = min(best[step], time.perf_counter() - started)
    for (encrypted, name), seconds in best.items():
        label = "on " if encrypted else "off"
        print(f"sqlite page {label} {name:6s} {seconds / 1000 * 1e6:.2f} µs a record")
    for name in ("fetch", "page", "replay"):
        print(f"sqlite page on/off {name:6s} {best[(True, name)] / best[(False, name)]:.3f}")
    for store in stores:
        await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--postgres", default="", help="a DSN whose user may CREATE DATABASE")
    parser.add_argument(
        "--breakdown", action="store_true", help="also time a SQLite page's steps in its thread"
    )
    args = parser.parse_args()
    backends = [("sqlite", None)] + ([("postgres", args.postgres)] if args.postgres else [])
    if args.rounds < 1:  # ``--rounds 0 --breakdown``: the breakdown alone
        backends = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for backend, where in backends:
            ratios: dict[str, list[float]] = {metric: [] for metric in FIGURES}
            await _measure(backend, where, True, folder)  # warm-up: imports, first keys
            for n in range(args.rounds):
                order = (False, True) if n % 2 == 0 else (True, False)
                got = {mode: await _measure(backend, where, mode, folder) for mode in order}
                for metric in ratios:
                    ratios[metric].append(got[True][metric] / got[False][metric])
                _report_round(backend, n, got)
            _report_medians(backend, ratios)
        if args.breakdown:
            await breakdown(folder)


# PostgreSQL ---------------------------------------------------------------------


async def _postgres_measure(base: str, encrypted: bool, folder: Path) -> dict[str, float]:
    """The workload on a fresh database of the server ``base``, then dropped."""
    sys.path.insert(0, str(ROOT))
    from tests.storage.postgres.server import create_database, drop_database

    dsn = create_database(base, prefix="agentledger_bench")
    try:
        encryption = None
        if encrypted:
            encryption = Encryption(Keyring.generate(), folder / f"{uuid.uuid4().hex}.vault")
        store = await PostgresStore.open(dsn, min_size=1, max_size=1, encryption=encryption)
        try:
            return await _workload(store)
        finally:
            await store.close()
    finally:
        drop_database(dsn)


async def _postgres_rounds(base: str, rounds: int, folder: Path) -> None:
    """Encryption off against on, ``rounds`` interleaved rounds, on one server."""
    ratios: dict[str, list[float]] = {metric: [] for metric in FIGURES}
    await _postgres_measure(base, True, folder)  # warm-up: imports, connections, first keys
    for n in range(rounds):
        order = (False, True) if n % 2 == 0 else (True, False)
        got = {mode: await _postgres_measure(base, mode, folder) for mode in order}
        for metric in ratios:
            ratios[metric].append(got[True][metric] / got[False][metric])
        _report_round("postgres", n, got)
    _report_medians("postgres", ratios)


def postgres_main(argv: list[str]) -> None:
    """``--backend postgres``: on the server of ``--postgres DSN``, else a throwaway one."""
    parser = argparse.ArgumentParser(description="encryption on/off on PostgreSQL (fsync on)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--postgres", default="", help="a DSN whose user may CREATE DATABASE")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.storage.postgres.server import PostgresServer

    server = None
    base = args.postgres
    if not base:
        server = PostgresServer(fsync=True)
        base = server.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(_postgres_rounds(base, args.rounds, Path(tmp)))
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    chooser = argparse.ArgumentParser(add_help=False)
    chooser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    chosen, rest = chooser.parse_known_args()
    if chosen.backend == "postgres":
        postgres_main(rest)
    else:
        sys.argv[1:] = rest
        asyncio.run(main())
