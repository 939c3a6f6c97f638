"""Benchmark: writers of one session in separate processes against each in a session of its own.

Run as ``.venv/bin/python bench/postgres_sessions.py``. It is not a test. Each of
``--processes`` processes opens its own ``PostgresStore`` (as separate workers
or hosts do) and appends ``--appends`` records, one call each, to a run of its
own; in one trial all the runs are in one session, in the other each run is in
a session of its own. Printed: appends/s of all processes together, medians of
interleaved repetitions, and the ratio one session / own sessions.

A session's log positions are assigned in the transaction that commits the
records, under the session's row lock, so two processes writing one session
commit one at a time (their commits cannot share a WAL flush), while writers
of different sessions commit side by side. The ratio shows what that costs.
``--commit-delay`` (microseconds) makes every commit of the throwaway cluster
wait that long before its WAL flush, as a slower disk would (``commit_delay``
with ``commit_siblings = 0``): the cost grows with the flush time.

The server is a throwaway cluster with ``fsync=on`` (from
``tests/storage/postgres/server.py``), never a configured one: the delay is set
with ``ALTER SYSTEM``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import sys
import time
from multiprocessing.synchronize import Event

import psycopg

from agentledger.storage import RecordBuilder, RunStart
from agentledger.storage.postgres import PostgresStore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import postgres_store as bench


def _worker(dsn: str, run_id: str, session: str, appends: int, go: Event, out: mp.Queue) -> None:
    async def main() -> None:
        clock = bench.Clock()
        async with await PostgresStore.open(dsn, min_size=1, max_size=1) as store:
            run = RecordBuilder(
                RunStart(run_id=run_id, agent_id="agent", session_id=session, started_at=clock()),
                turn_id="turn-1",
            )
            await store.start_root_run(run.root_start())
            notes = [
                run.record("planner_note", bench.PAYLOAD, event_key=f"n{i}", at=clock())
                for i in range(appends + 1)
            ]
            await store.append_run_record(notes[0])  # warm: the handle knows its run
            go.wait()
            started = time.perf_counter()
            for note in notes[1:]:
                await store.append_run_record(note)
            out.put(time.perf_counter() - started)

    asyncio.run(main())


async def _create_sessions(dsn: str, ids: list[str]) -> None:
    async with await PostgresStore.open(dsn, min_size=1, max_size=1) as store:
        for sid in ids:
            await store.create_session(sid, created_at=bench.T0)


def _trial(dsn: str, tag: str, processes: int, appends: int, shared: bool) -> float:
    """Appends/s of ``processes`` writers together, from the first start to the last end."""
    sessions = [f"{tag}-s"] if shared else [f"{tag}-s{i}" for i in range(processes)]
    asyncio.run(_create_sessions(dsn, sessions))
    go, out = mp.Event(), mp.Queue()
    workers = [
        mp.Process(
            target=_worker,
            args=(dsn, f"{tag}-r{i}", sessions[0 if shared else i], appends, go, out),
        )
        for i in range(processes)
    ]
    for w in workers:
        w.start()
    time.sleep(1.0)  # every worker opened its store and warmed up (a bench, not a test)
    go.set()
    seconds = [out.get() for _ in workers]
    for w in workers:
        w.join()
    return processes * appends / max(seconds)


def _set_commit_delay(dsn: str, micros: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET commit_delay = {int(micros)}")
        conn.execute("ALTER SYSTEM SET commit_siblings = 0")
        conn.execute("SELECT pg_reload_conf()")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2, help="writers (default 2)")
    parser.add_argument("--appends", type=int, default=300, help="appends per writer")
    parser.add_argument("--repetitions", type=int, default=3, help="interleaved repetitions")
    parser.add_argument(
        "--commit-delay", type=int, default=0, help="microseconds each commit waits to flush"
    )
    args = parser.parse_args(argv)
    os.environ.pop(bench.PG_DSN_ENV, None)  # a throwaway cluster: ALTER SYSTEM below
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    one: list[float] = []
    own: list[float] = []
    with bench._database(fsync=True) as dsn:
        if args.commit_delay:
            _set_commit_delay(dsn, args.commit_delay)
        for rep in range(args.repetitions):
            for shared in (True, False) if rep % 2 == 0 else (False, True):
                rate = _trial(dsn, f"p{rep}{int(shared)}", args.processes, args.appends, shared)
                (one if shared else own).append(rate)
    ratio = statistics.median(a / b for a, b in zip(one, own, strict=True))
    print(
        f"{args.processes} processes x {args.appends} appends, fsync=on, "
        f"commit_delay={args.commit_delay} us: one session {statistics.median(one):,.0f}/s, "
        f"own sessions {statistics.median(own):,.0f}/s, ratio {ratio:.2f}x"
    )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
