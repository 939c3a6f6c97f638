"""Benchmark: StoreClient through ``agentledger serve`` on loopback vs the same backend in process.

Run as ``.venv/bin/python bench/service.py [--backend sqlite|postgres]``. It is
not a test: it prints medians over interleaved repetitions and the ratios
service / in-process. Both sides use the same backend class with the same
durability (SQLite ``full``, as ``serve`` opens it; PostgreSQL as the test
cluster runs it), each on its own fresh database.

- append, 1 worker: ``append_run_record`` one ~300-byte record at a time on
  one running run; appends/s, the median latency of one call (the service's
  overhead is the difference of the medians; goal <= 0.3 ms), and CPU per
  append: the bench process's (in process: the store's own; through the
  service: the client's) and the service process's (goal: <= 50 us beyond
  the store's own); through the service both on StoreClient's WebSocket (the
  default) and over HTTP (``socket=False``, as against an older service): the A/B;
- append, 16 workers: 16 concurrent workers, each appending to its own run
  (in process: 16 tasks on one store; through the service: 16 StoreClients, as
  16 processes would have), on the socket and over HTTP; appends/s (goal: service
  >= 0.8x in process) and CPU per append; then the 16 workers of one process
  sharing one StoreClient: on its socket, and over HTTP (its calls made at the same
  moment going as one request);
- agent runs: 16 workers of one ``Runtime``, each doing one-tool agent runs (a scripted
  model) in sessions of their own: in process, and on one shared StoreClient, on its
  socket and over HTTP;
- a call refused at the gate: a reader's appends, each refused (403) before the store is
  touched: the server's CPU per call is the service's own (goal <= 50 us beyond the store);
- reload: a 10,000-record run paged to the end with ``limit=1000`` (goal <= 1.3x);
- with ``--backend postgres``, 16 workers through two ``serve`` replicas of one
  database, 8 StoreClients on each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.service.process import ServiceProcess

from agentledger.errors import AccessDeniedError
from agentledger.service import StoreClient
from agentledger.service.auth import add_token
from agentledger.service.server import open_backend
from agentledger.storage import RecordBuilder, RunStart
from agentledger.target import Target

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PAYLOAD = b'{"text": "' + b"x" * 280 + b'"}'


def _at(i: int) -> datetime:
    return T0 + timedelta(milliseconds=i)


def _cpu_of(pid: int) -> float:
    """CPU seconds process ``pid`` has used, all its threads: the scheduler's nanoseconds
    on CPU (``/proc/PID/task/*/schedstat``), where ``/proc/PID/stat``'s clock ticks (10 ms)
    are too coarse for a few hundred calls."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that just ended
            continue
    return total / 1e9


class Cpu:
    """CPU per operation of this process and of the service processes, over a block."""

    def __init__(self, pids: tuple[int, ...] = ()) -> None:
        self.pids = pids

    @contextmanager
    def per(self, count: int, into: list[tuple[float, float]]) -> Iterator[None]:
        """Append (this process's, the services') CPU seconds per operation to ``into``."""
        mine, theirs = time.process_time(), sum(_cpu_of(p) for p in self.pids)
        yield
        into.append(((time.process_time() - mine) / count,
                     (sum(_cpu_of(p) for p in self.pids) - theirs) / count))  # fmt: skip


class Side:
    """One way to reach a backend: in process, or through the service."""

    def __init__(self, name: str, open_handle: Callable[[], Awaitable[Any]]) -> None:
        self.name = name
        self.open_handle = open_handle
        self.runs = 0

    async def run(self, store: Any, session: str) -> RecordBuilder:
        self.runs += 1
        run = RecordBuilder(RunStart(run_id=f"{self.name}-{self.runs}", agent_id="bench",
                                     session_id=session, started_at=T0))  # fmt: skip
        await store.start_root_run(run.root_start())
        return run


async def appends_one(
    side: Side, store: Any, count: int, cpu: Cpu, cpus: list[tuple[float, float]]
) -> tuple[float, float]:
    """(appends/s, median seconds per append) of one worker."""
    run = await side.run(store, "bench")
    records = [run.record("note", PAYLOAD, event_key=f"n{i}", at=_at(i)) for i in range(count)]
    times = []
    with cpu.per(count, cpus):
        for record in records:
            started = time.perf_counter()
            await store.append_run_record(record)
            times.append(time.perf_counter() - started)
    return count / sum(times), statistics.median(times)


async def appends_many(
    side: Side, stores: list[Any], count: int, cpu: Cpu, cpus: list[tuple[float, float]]
) -> float:
    """Appends/s of len(stores) concurrent workers, ``count`` appends each."""
    runs = [await side.run(stores[0], "bench") for _ in stores]

    async def worker(store: Any, run: RecordBuilder) -> None:
        records = [run.record("note", PAYLOAD, event_key=f"n{i}", at=_at(i)) for i in range(count)]
        await asyncio.sleep(0)  # every worker has built its records before any appends
        for record in records:
            await store.append_run_record(record)

    with cpu.per(len(stores) * count, cpus):
        started = time.perf_counter()
        await asyncio.gather(*(worker(s, r) for s, r in zip(stores, runs, strict=True)))
        elapsed = time.perf_counter() - started
    return len(stores) * count / elapsed


async def refused(
    side: Side, store: Any, count: int, cpu: Cpu, cpus: list[tuple[float, float]]
) -> None:
    """``count`` appends of a reader's client, each refused at the service's gate (403)
    before the store is touched: the service's own CPU per call."""
    run = RecordBuilder(RunStart(run_id="refused", agent_id="bench", session_id="bench",
                                 started_at=T0))  # fmt: skip
    records = [run.record("note", PAYLOAD, event_key=f"n{i}", at=_at(i)) for i in range(count)]
    with cpu.per(count, cpus):
        for record in records:
            try:
                await store.append_run_record(record)
            except AccessDeniedError:
                continue
            raise AssertionError("a reader's append was not refused")


async def agent_runs(store: Any, tag: str, workers: int, runs: int) -> float:
    """Runs/s of ``workers`` concurrent workers of one Runtime, each doing ``runs`` one-tool
    agent runs (question, tool call, answer; a scripted model) in sessions of their own."""
    from agentledger.runtime import Agent, ModelPlanner, Runtime, tool, user_message
    from agentledger.testing import ScriptedModel, reply, tool_calls

    @tool
    async def get_weather(city: str) -> dict[str, object]:
        """Current weather in a city."""
        return {"city": city, "temp_c": 18, "conditions": "light rain"}

    runtime = Runtime(store)
    for w in range(workers):  # a model per worker: each script is read in its own order
        script = [tool_calls(("call_1", "get_weather", {"city": "Paris"})), reply("Rainy.")]
        runtime.register_model(f"model-{w}", ScriptedModel(script * runs))
        runtime.register_agent(Agent(f"weather-{w}", ModelPlanner(f"model-{w}"),
                                     tools=[get_weather]))  # fmt: skip

    async def worker(w: int) -> None:
        client = runtime.agent_client(f"weather-{w}")
        for i in range(runs):
            session = f"{tag}-{w}-{i}"
            await store.create_session(session, created_at=T0)
            out = await client.run(session, [user_message("Is it raining in Paris?")])
            assert out.status == "completed", out

    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(workers)))
    elapsed = time.perf_counter() - started
    await runtime.close()
    return workers * runs / elapsed


async def reload(store: Any, run_id: str) -> float:
    """Seconds to page a run's whole log with limit=1000."""
    started = time.perf_counter()
    cursor, total = "", 0
    while True:
        page = await store.list_run_records(run_id, cursor=cursor, limit=1000)
        total += len(page.records)
        if not (cursor := page.next_cursor):
            break
    assert total == 10_001, total
    return time.perf_counter() - started


async def fill(side: Side, store: Any) -> str:
    run = await side.run(store, "bench")
    for i in range(10_000):
        await store.append_run_record(run.record("note", PAYLOAD, event_key=f"f{i}", at=_at(i)))
    return run.run.run_id


@contextmanager
def databases(backend: str, tmp: Path) -> Iterator[tuple[str, str]]:
    """Two fresh databases of ``backend``: one in process, one served."""
    if backend == "sqlite":
        yield str(tmp / "inprocess.db"), str(tmp / "served.db")
        return
    from tests.storage.postgres.server import PostgresServer, create_database, drop_database

    server = None
    base = os.environ.get("AGENTLEDGER_TEST_PG_DSN", "")
    if not base:
        server = PostgresServer()
        base = server.start()
    dsns = [create_database(base, prefix="agentledger_bench") for _ in range(2)]
    try:
        yield dsns[0], dsns[1]
    finally:
        for dsn in dsns:
            drop_database(dsn)
        if server is not None:
            server.stop()


_SHARED = {
    "shared": "  16 workers, one client",
    "ungrouped": "  one client, over HTTP",
}
"""The 16-worker rows of one shared StoreClient: on its socket, and (the A/B) over HTTP."""


async def bench(
    inproc_db: str,
    services: list[ServiceProcess],
    token: str,
    reader: str,
    args: argparse.Namespace,
) -> None:
    store = await open_backend(Target.parse(inproc_db, default=False))
    served_url = services[0].url
    clients = [StoreClient(served_url, token=token) for _ in range(16)]
    http_clients = [StoreClient(served_url, token=token, socket=False) for _ in range(16)]
    shared = StoreClient(served_url, token=token)  # 16 workers of one process, one client
    ungrouped = StoreClient(served_url, token=token, socket=False)  # the A/B: over HTTP
    readers = {"served": StoreClient(served_url, token=reader),
               "http": StoreClient(served_url, token=reader, socket=False)}  # fmt: skip
    # With a replica: 8 workers on each of two services over one database.
    spread = [StoreClient(services[i % len(services)].url, token=token) for i in range(16)]
    mine = Cpu()
    theirs = Cpu((services[0].pid,))
    both = Cpu(tuple(s.pid for s in services))
    try:
        inproc = Side("inproc", lambda: asyncio.sleep(0))
        served = Side("served", lambda: asyncio.sleep(0))
        replicas = Side("replicas", lambda: asyncio.sleep(0))
        for handle in (store, clients[0]):
            await handle.create_session("bench", created_at=T0)
        one: dict[str, list[tuple[float, float]]] = {"inproc": [], "served": [], "http": []}
        many: dict[str, list[float]] = {
            k: [] for k in ("inproc", "served", "http", "replicas", *_SHARED)
        }
        cpu1: dict[str, list[tuple[float, float]]] = {"inproc": [], "served": [], "http": []}
        gated: dict[str, list[tuple[float, float]]] = {"served": [], "http": []}
        cpu16: dict[str, list[tuple[float, float]]] = {k: [] for k in many}
        loads: dict[str, list[float]] = {"inproc": [], "served": []}
        agents: dict[str, list[float]] = {"inproc": [], **{k: [] for k in _SHARED}}
        filled = {"inproc": await fill(inproc, store), "served": await fill(served, clients[0])}
        for _ in range(args.repeat):  # interleaved: in process, then through the service
            one["inproc"].append(await appends_one(inproc, store, args.appends, mine,
                                                   cpu1["inproc"]))  # fmt: skip
            one["served"].append(await appends_one(served, clients[0], args.appends, theirs,
                                                   cpu1["served"]))  # fmt: skip
            one["http"].append(await appends_one(served, http_clients[0], args.appends, theirs,
                                                 cpu1["http"]))  # fmt: skip
            for name, reading in readers.items():
                await refused(served, reading, args.appends, theirs, gated[name])
            many["inproc"].append(await appends_many(inproc, [store] * 16, args.appends // 4,
                                                     mine, cpu16["inproc"]))  # fmt: skip
            many["served"].append(await appends_many(served, clients, args.appends // 4,
                                                     theirs, cpu16["served"]))  # fmt: skip
            many["http"].append(await appends_many(served, http_clients, args.appends // 4,
                                                   theirs, cpu16["http"]))  # fmt: skip
            for name, client in zip(_SHARED, (shared, ungrouped), strict=True):
                many[name].append(await appends_many(served, [client] * 16, args.appends // 4,
                                                     theirs, cpu16[name]))  # fmt: skip
            if len(services) > 1:
                many["replicas"].append(await appends_many(replicas, spread, args.appends // 4,
                                                           both, cpu16["replicas"]))  # fmt: skip
            handles = (("inproc", store), *zip(_SHARED, (shared, ungrouped), strict=True))
            for name, handle in handles:
                agents[name].append(await agent_runs(handle, f"{name}-{len(agents[name])}",
                                                     16, args.agent_runs))  # fmt: skip
            loads["inproc"].append(await reload(store, filled["inproc"]))
            loads["served"].append(await reload(clients[0], filled["served"]))
    finally:
        await store.close()
        for client in [*clients, *http_clients, *spread, shared, ungrouped, *readers.values()]:
            await client.close()

    def med(values: list[float]) -> float:
        return statistics.median(values)

    def us(cpus: list[tuple[float, float]], which: int) -> float:
        return med([c[which] for c in cpus]) * 1e6

    rate1 = {k: med([r for r, _ in v]) for k, v in one.items()}
    lat1 = {k: med([m for _, m in v]) * 1000 for k, v in one.items()}
    rate16 = {k: med(v) for k, v in many.items() if v}
    load = {k: med(v) * 1000 for k, v in loads.items()}
    rows = [
        ("append, 1 worker (appends/s)", rate1, "{:12.0f}"),
        ("  median latency (ms)", lat1, "{:12.3f}"),
        ("append, 16 workers (appends/s)", rate16, "{:12.0f}"),
        ("reload 10,000 records (ms)", load, "{:12.1f}"),
    ]
    print(f"\n{'':30} {'in process':>12} {'service':>12} {'service/in':>11} {'over HTTP':>12} "
          f"{'HTTP/in':>8}")  # fmt: skip
    for name, values, cell in rows:
        ratio = values["served"] / values["inproc"]
        http = (f" {cell.format(values['http'])} {values['http'] / values['inproc']:8.2f}"
                if "http" in values else "")  # fmt: skip
        print(f"{name:30} {cell.format(values['inproc'])} {cell.format(values['served'])} "
              f"{ratio:11.2f}{http}")  # fmt: skip
    for name, label in _SHARED.items():
        print(f"{label:30} {'':12} {rate16[name]:12.0f} {rate16[name] / rate16['inproc']:11.2f}")
    runs = {k: med(v) for k, v in agents.items()}
    print(f"{'agent runs, 16 workers (runs/s)':30} {runs['inproc']:12.1f}")
    for name, label in _SHARED.items():
        print(f"{label:30} {'':12} {runs[name]:12.1f} {runs[name] / runs['inproc']:11.2f}")
    if "replicas" in rate16:
        print(f"{'  through 2 replicas':30} {'':12} {rate16['replicas']:12.0f} "
              f"{rate16['replicas'] / rate16['inproc']:11.2f}")  # fmt: skip
    print(f"one worker's median append overhead: {lat1['served'] - lat1['inproc']:+.3f} ms "
          f"(over HTTP {lat1['http'] - lat1['inproc']:+.3f} ms)")  # fmt: skip
    print("\nCPU per append (us): in process = the store's own; service = client + server")
    for name, cpus in (("1 worker", cpu1), ("16 workers", cpu16)):
        own = us(cpus["inproc"], 0)
        for side in ("served", "http"):
            client, server = us(cpus[side], 0), us(cpus[side], 1)
            how = "socket" if side == "served" else "HTTP"
            print(f"  {name:10} in process {own:6.0f}   {how:6} client {client:6.0f}   server "
                  f"{server:6.0f} ({server - own:+.0f} beyond the store's own)")  # fmt: skip
        for shared_name, label in _SHARED.items() if cpus is cpu16 else ():
            print(f"  {label.strip():40} client {us(cpus[shared_name], 0):6.0f}   server "
                  f"{us(cpus[shared_name], 1):6.0f}")  # fmt: skip
        if cpus.get("replicas"):
            print(f"  {'':10} 2 replicas: client {us(cpus['replicas'], 0):6.0f}   servers "
                  f"{us(cpus['replicas'], 1):6.0f}")  # fmt: skip
    own = (us(gated["served"], 1), us(gated["http"], 1))
    print(f"  a call refused at the gate (no store work), 1 worker: server {own[0]:.0f} on the "
          f"socket, {own[1]:.0f} over HTTP (the service's own per call)")  # fmt: skip
    print(f"\nload average: {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--appends", type=int, default=400, help="appends per 1-worker round")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--agent-runs", type=int, default=5, help="agent runs per worker")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, databases(args.backend, Path(tmp)) as dbs:
        tokens = Path(tmp) / "tokens.json"
        token = add_token(tokens, "host")
        reader = add_token(tokens, "reader")
        with ServiceProcess(dbs[1], tokens) as service:
            print(f"{args.backend}: agentledger serve at {service.url} (pid {service.pid})")
            if args.backend != "postgres":
                asyncio.run(bench(dbs[0], [service], token, reader, args))
                return
            with ServiceProcess(dbs[1], tokens) as replica:
                print(f"{args.backend}: a replica at {replica.url} (pid {replica.pid})")
                asyncio.run(bench(dbs[0], [service, replica], token, reader, args))


if __name__ == "__main__":
    main()
