"""Benchmark: listing sessions and loading a long session, agentledger against Google ADK.

Run as ``.venv/bin/python bench/session_peers.py`` (not a test). The peer is Google
ADK's session services on SQLite (``DatabaseSessionService`` over SQLAlchemy and
aiosqlite, and ``SqliteSessionService``). ADK pins dependencies the test suite
does not want (older OpenTelemetry among them), so it lives in a venv of its own,
``.venv-adk-peer``, which this script creates from the ``bench-adk-peer``
dependency group when it is missing.

Every system holds the same data: ``--sessions`` sessions, and in the newest one
a conversation of ``--events`` records (ADK: events with one text part of 280
characters; agentledger: one run whose records carry the same text). agentledger is
measured on SQLite in process, through ``agentledger serve`` on that file, and on
PostgreSQL (a throwaway server with ``fsync=on``). Each trial is a fresh process
that calls each read once to warm up and then times it, every system once per
repetition, in one interleaved run; medians across repetitions.

- first page: agentledger's first page of 50 sessions, newest first. ADK cannot
  page: ``list_sessions`` returns every session of the user, so its figure is the
  whole listing (what its users get for "show my sessions").
- all sessions: every session listed (agentledger in pages of 1,000): equal work.
- one session: the ``--events`` records of the newest session loaded whole
  (agentledger in pages of 1,000; ADK's ``get_session``).

Durability does not change these reads: the files are filled at ``synchronous=OFF``
(ADK) and ``normal`` (agentledger) to save time, then read with each system's own
defaults (agentledger: WAL, ``synchronous=FULL``; ADK: SQLite's defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PEER_VENV = ROOT / ".venv-adk-peer"
TEXT = "x" * 280
T0 = datetime(2026, 1, 1, tzinfo=UTC)
APP, USER = "bench", "user"
OURS = ("agentledger-sqlite", "agentledger-service", "agentledger-postgres")
PEERS = ("adk-database", "adk-sqlite")
READS = {"first page": 20, "all sessions": 3, "one session": 5}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _timed(reads: dict[str, Callable[[], Awaitable[int]]]) -> dict[str, Any]:
    """Each read once to warm up, then timed ``READS[name]`` times: median ms, CPU ms, items."""
    out: dict[str, Any] = {}
    for name, read in reads.items():
        items = await read()
        took, cpu = [], []
        for _ in range(READS[name]):
            c, t = _cpu(), time.perf_counter()
            assert await read() == items
            took.append(time.perf_counter() - t)
            cpu.append(_cpu() - c)
        out[name] = {
            "ms": statistics.median(took) * 1000,
            "cpu_ms": statistics.median(cpu) * 1000,
            "items": items,
        }
    return out


# ---------------------------------------------------------------- agentledger


async def _fill_ours(store: Any, sessions: int, events: int) -> None:
    from agentledger.storage import RecordBuilder, RunStart

    for base in range(0, sessions, 500):
        await asyncio.gather(*(
            store.create_session(f"s{i:07d}", created_at=T0 + timedelta(seconds=i),
                                 labels={"user": USER})
            for i in range(base, min(sessions, base + 500))
        ))  # fmt: skip
    run = RecordBuilder(
        RunStart(run_id="long", agent_id="bench", session_id=f"s{sessions - 1:07d}", started_at=T0)
    )
    await store.start_root_run(run.root_start())
    payload = json.dumps({"text": TEXT}).encode()
    records = [run.record("note", payload, event_key=f"n{i}", at=T0) for i in range(events - 1)]
    for i in range(0, len(records), 500):
        await store.append_run_records(records[i : i + 500])


def _our_reads(store: Any, newest: str) -> dict[str, Callable[[], Awaitable[int]]]:
    async def first_page() -> int:
        return len((await store.list_sessions(limit=50)).sessions)

    async def all_sessions() -> int:
        cursor, total = "", 0
        while True:
            page = await store.list_sessions(cursor=cursor, limit=1000)
            total += len(page.sessions)
            if not (cursor := page.next_cursor):
                return total

    async def one_session() -> int:
        cursor, total = "", 0
        while True:
            page = await store.list_session_run_records(newest, cursor=cursor, limit=1000)
            total += len(page.records)
            if not (cursor := page.next_cursor):
                return total

    return {"first page": first_page, "all sessions": all_sessions, "one session": one_session}


async def _trial_ours(system: str, where: str, newest: str, token: str) -> dict[str, Any]:
    if system == "agentledger-sqlite":
        from agentledger.storage.sqlite import SQLiteStore

        store: Any = await SQLiteStore.open(where)
    elif system == "agentledger-postgres":
        from agentledger.storage.postgres import PostgresStore

        store = await PostgresStore.open(where)
    else:
        from agentledger.service import StoreClient

        store = StoreClient(where, token=token)
    try:
        return await _timed(_our_reads(store, newest))
    finally:
        await store.close()


# ------------------------------------------------------------------------ ADK


def _adk_service(system: str, db: str, *, filling: bool = False) -> Any:
    if system == "adk-sqlite":
        from google.adk.sessions.sqlite_session_service import SqliteSessionService

        return SqliteSessionService(db)
    from google.adk.sessions.database_session_service import DatabaseSessionService
    from sqlalchemy import event
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(f"sqlite+aiosqlite:///{db}")
    if filling:
        event.listen(
            engine.sync_engine, "connect", lambda c, _: c.execute("PRAGMA synchronous=OFF")
        )
    return DatabaseSessionService(db_engine=engine)


async def _fill_adk(system: str, db: str, sessions: int, events: int) -> None:
    from google.adk.events.event import Event
    from google.genai import types

    service = _adk_service(system, db, filling=True)
    try:
        for i in range(sessions):
            session = await service.create_session(
                app_name=APP, user_id=USER, session_id=f"s{i:07d}"
            )
        for i in range(events):
            content = types.Content(role="user", parts=[types.Part(text=TEXT)])
            await service.append_event(
                session, Event(author="user", invocation_id=f"i{i}", content=content)
            )
    finally:
        await service.close()
    if system == "adk-sqlite":  # it sets no pragma of its own: fill, then fsync once
        import sqlite3

        with sqlite3.connect(db) as conn:
            conn.execute("PRAGMA synchronous=FULL")


async def _trial_adk(system: str, db: str, newest: str) -> dict[str, Any]:
    service = _adk_service(system, db)

    async def listing() -> int:
        return len((await service.list_sessions(app_name=APP, user_id=USER)).sessions)

    async def one_session() -> int:
        got = await service.get_session(app_name=APP, user_id=USER, session_id=newest)
        return len(got.events)

    try:
        return await _timed(
            {"first page": listing, "all sessions": listing, "one session": one_session}
        )
    finally:
        await service.close()


# --------------------------------------------------------------------- driver


def _peer_python() -> str:
    python = PEER_VENV / "bin" / "python"
    if not python.exists():
        uv = ROOT / ".venv" / "bin" / "uv"
        subprocess.run([str(uv), "venv", "-q", "--python", sys.executable, str(PEER_VENV)],
                       check=True)  # fmt: skip
        subprocess.run([str(uv), "pip", "install", "-q", "--python", str(python), "--group",
                        "bench-adk-peer", "-e", str(ROOT)], check=True, cwd=ROOT)  # fmt: skip
    return str(python)


def _child(python: str, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [python, __file__, *args], check=True, capture_output=True, text=True, cwd=ROOT
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _ratio(ours: float, peer: float) -> str:
    return f"{peer / ours:,.1f}x" if ours else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=3_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--child", nargs=5, metavar=("ACTION", "SYSTEM", "WHERE", "NEWEST", "X"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args(argv)
    if args.child:
        action, system, where, newest, extra = args.child
        if action == "fill":
            asyncio.run(_fill_adk(system, where, args.sessions, args.events))
            result: dict[str, Any] = {}
        elif system in PEERS:
            result = asyncio.run(_trial_adk(system, where, newest))
        else:
            result = asyncio.run(_trial_ours(system, where, newest, extra))
        print(json.dumps(result))
        return 0
    return _drive(args)


def _drive(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(ROOT))
    from tests.service.process import ServiceProcess
    from tests.storage.postgres.server import PostgresServer, create_database

    from agentledger.service.auth import add_token
    from agentledger.storage.postgres import PostgresStore
    from agentledger.storage.sqlite import SQLiteStore

    newest = f"s{args.sessions - 1:07d}"
    peer = _peer_python()
    pg = PostgresServer(fsync=True)
    with tempfile.TemporaryDirectory() as tmp:
        ours_db = str(Path(tmp) / "agentledger.db")
        dsn = create_database(pg.start(), prefix="agentledger_bench")
        try:
            started = time.perf_counter()

            async def fill() -> None:
                for store in (await SQLiteStore.open(ours_db, durability="normal"),
                              await PostgresStore.open(dsn)):  # fmt: skip
                    try:
                        await _fill_ours(store, args.sessions, args.events)
                    finally:
                        await store.close()

            asyncio.run(fill())
            where = {"agentledger-sqlite": ours_db, "agentledger-postgres": dsn}
            for system in PEERS:
                where[system] = str(Path(tmp) / f"{system}.db")
                _child(peer, "--sessions", str(args.sessions), "--events", str(args.events),
                       "--child", "fill", system, where[system], newest, "-")  # fmt: skip
            print(f"filled in {time.perf_counter() - started:.0f} s "
                  f"(load average {os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip
            tokens = Path(tmp) / "tokens.json"
            token = add_token(tokens, "host")
            results: dict[str, list[dict[str, Any]]] = {s: [] for s in (*OURS, *PEERS)}
            with ServiceProcess(ours_db, tokens) as service:
                where["agentledger-service"] = service.url
                for _ in range(args.repetitions):
                    for system in results:
                        python = peer if system in PEERS else sys.executable
                        trial = ("--child", "trial", system, where[system], newest, token)
                        results[system].append(_child(python, *trial))
        finally:
            pg.stop()
    _report(results, args)
    return 0


def _report(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> None:
    def median(system: str, read: str, key: str = "ms") -> float:
        return statistics.median(trial[read][key] for trial in results[system])

    load = os.getloadavg()[0]
    print(f"\n{args.sessions:,} sessions, a session of {args.events:,} records; "
          f"{args.repetitions} repetitions, medians (load average {load:.1f})\n")  # fmt: skip
    print(f"| read | {' | '.join(results)} |")
    print(f"|---|{'---|' * len(results)}")
    for read in READS:
        cells = [f"{median(s, read):,.2f} ms" for s in results]
        print(f"| {read} | {' | '.join(cells)} |")
    for read in READS:
        cells = [f"{median(s, read, 'cpu_ms'):,.2f}" for s in results]
        print(f"| {read}, client CPU ms | {' | '.join(cells)} |")
    print("\nADK's time ÷ agentledger's (higher: agentledger faster):")
    for read in READS:
        for ours in OURS:
            row = ", ".join(
                f"{peer} {_ratio(median(ours, read), median(peer, read))}" for peer in PEERS
            )
            print(f"  {read:13} {ours:21} {row}")


if __name__ == "__main__":
    sys.exit(main())
