"""Benchmark: 16 workers, each with its own StoreClient, through ``agentledger serve``
vs 16 tasks on one store in process (issue 39's goal: >= 0.8x).

Run as ``.venv/bin/python bench/service_workers.py [--backend sqlite|postgres]
[--processes N]``. Not a test: a short, interleaved A/B of the one row of
``bench/service.py`` it measures, printing per round the appends/s of each side, the
CPU per append of this process (in process: the store's own; served: the clients')
and of the service processes, and the median ratio. ``--processes N`` (PostgreSQL)
serves the database from N ``serve`` processes, the 16 clients spread over them.
Both sides use the same backend class at the same durability (SQLite ``full``, as
``serve`` opens it), each on its own fresh database.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.service import PAYLOAD, T0, Cpu, _at, databases
from tests.service.process import ServiceProcess

from agentledger.service import StoreClient
from agentledger.service.auth import add_token
from agentledger.service.server import open_backend
from agentledger.storage import RecordBuilder, RunStart
from agentledger.target import Target


async def _round(
    stores: list[object], tag: str, count: int, cpu: Cpu
) -> tuple[float, float, float]:
    """(appends/s, this process's CPU per append, the services' CPU per append) of
    len(stores) concurrent workers appending ``count`` records each to runs of their own."""
    runs = []
    for i, store in enumerate(stores):
        run = RecordBuilder(RunStart(run_id=f"{tag}-{i}", agent_id="bench", session_id="bench",
                                     started_at=T0))  # fmt: skip
        await store.start_root_run(run.root_start())  # type: ignore[attr-defined]
        runs.append(run)

    async def worker(store: object, run: RecordBuilder) -> None:
        records = [run.record("note", PAYLOAD, event_key=f"n{i}", at=_at(i)) for i in range(count)]
        await asyncio.sleep(0)
        for record in records:
            await store.append_run_record(record)  # type: ignore[attr-defined]

    cpus: list[tuple[float, float]] = []
    with cpu.per(len(stores) * count, cpus):
        started = time.perf_counter()
        await asyncio.gather(*(worker(s, r) for s, r in zip(stores, runs, strict=True)))
        elapsed = time.perf_counter() - started
    return len(stores) * count / elapsed, cpus[0][0], cpus[0][1]


async def bench(
    db: str, services: list[ServiceProcess], token: str, args: argparse.Namespace
) -> None:
    store = await open_backend(Target.parse(db, default=False))
    clients = [StoreClient(services[i % len(services)].url, token=token) for i in range(16)]
    served_cpu = Cpu(tuple(s.pid for s in services))
    try:
        await store.create_session("bench", created_at=T0)
        await clients[0].create_session("bench", created_at=T0)
        await _round([store] * 16, "warm-in", 20, Cpu())  # warm against warm
        await _round(clients, "warm-served", 20, served_cpu)
        ratios = []
        print(f"{'round':>5} {'in proc/s':>10} {'cpu us':>7} {'served/s':>10} {'client us':>10} "
              f"{'server us':>10} {'ratio':>6}")  # fmt: skip
        for r in range(args.repeat):
            inproc = await _round([store] * 16, f"in-{r}", args.appends, Cpu())
            served = await _round(clients, f"served-{r}", args.appends, served_cpu)
            ratios.append(served[0] / inproc[0])
            print(f"{r:5} {inproc[0]:10.0f} {inproc[1] * 1e6:7.0f} {served[0]:10.0f} "
                  f"{served[1] * 1e6:10.0f} {served[2] * 1e6:10.0f} {ratios[-1]:6.2f}")  # fmt: skip
        print(
            f"median ratio served / in process: {statistics.median(ratios):.2f} "
            f"({len(services)} serve process{'es' if len(services) > 1 else ''}, "
            f"{args.backend}); load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
        )
    finally:
        await store.close()
        for client in clients:
            await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--appends", type=int, default=50, help="appends per worker per round")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--processes", type=int, default=1, help="serve processes (PostgreSQL)")
    parser.add_argument(
        "--loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="this process's event loop (both sides: the store and the clients)",
    )
    args = parser.parse_args()
    if args.processes > 1 and args.backend != "postgres":
        parser.error("several serve processes share only a PostgreSQL database")
    with tempfile.TemporaryDirectory() as tmp, databases(args.backend, Path(tmp)) as dbs:
        tokens = Path(tmp) / "tokens.json"
        token = add_token(tokens, "host")
        with contextlib.ExitStack() as stack:
            services = [stack.enter_context(ServiceProcess(dbs[1], tokens))
                        for _ in range(args.processes)]  # fmt: skip
            run = asyncio.run
            if args.loop == "uvloop":
                import uvloop

                run = uvloop.run
            run(bench(dbs[0], services, token, args))


if __name__ == "__main__":
    main()
