"""Benchmark: agentledger's Temporal engine against the OpenAI Agents SDK on Temporal.

Run as ``.venv/bin/python bench/temporal_peers.py`` (not a test). The peer is
``temporalio-openai-agents`` (``OpenAIAgentsPlugin``: the model call is an
activity, the tool an ``activity_as_tool``). It pins ``openai-agents<0.23``
while the project's ``bench`` group wants ``>=0.24``, so it lives in a venv of
its own, ``.venv-temporal-peer``, which this script creates from the
``bench-temporal-peer`` dependency group when it is missing.

The same one-tool turn on both (question -> tool call -> answer), with a
scripted model that asks for the tool until it sees its result, one worker
in the trial's process, on one Temporal dev server this script starts. Each
trial runs in a fresh process, both systems interleaved in every repetition;
ratios are agentledger / peer within a repetition, medians reported.

Per run: runs/s sequential and with ``--concurrency`` runs at once, p50
latency (sequential), workflow tasks and history events of one run's history
(each trial's last sequential run; medians, and agentledger / peer),
activities (task-queue activities + markers: local activities and patches),
the trial process's CPU (worker and client) and the dev server's CPU, per run.

Durability is not equal, in agentledger's disfavour: it stores every record
of the run in a SQLite file (WAL, ``synchronous=FULL``, fsync per commit);
the peer stores nothing but Temporal's history. The peer re-calls the model
when a model activity is retried after a lost completion; agentledger reads
the stored plan instead (``tests/engine/temporal/test_crash.py``).

agentledger's host runs its worker on the same client, so its starts are
eager (the first workflow task comes back with the start request); the
peer's ``execute_workflow`` does not ask for that. ``AGENTLEDGER_BENCH_EAGER=0``
runs agentledger without it, to see the difference it makes.
``AGENTLEDGER_BENCH_SRC=/path/to/other/src`` runs another checkout's agentledger
(say, the main branch's) against the same peer, to compare two versions;
``--baseline /path/to/other/src`` runs that checkout as a third system,
interleaved with the other two in every repetition, and reports this
checkout / baseline too (ratios within one run, not across runs).
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
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PEER_VENV = ROOT / ".venv-temporal-peer"
QUESTION = "What is the weather in Paris?"


# ------------------------------------------------------------------ shared


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _shape(client: Any, workflow_id: str) -> dict[str, int]:
    """Activities, local activities, workflow tasks and events of one run's history."""
    from temporalio.api.enums.v1 import EventType

    history = await client.get_workflow_handle(workflow_id).fetch_history()
    kinds = [e.event_type for e in history.events]
    return {
        "activities": kinds.count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED),
        "local_activities": kinds.count(EventType.EVENT_TYPE_MARKER_RECORDED),
        "workflow_tasks": kinds.count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED),
        "events": len(kinds),
    }


async def _measure(run_one: Any, mode: str, runs: int, concurrency: int) -> dict[str, Any]:
    """Time ``runs`` sequential runs, or ``concurrency`` at once; the last run's id."""
    await run_one()  # warm: imports, connections, the sandbox's first module load
    latencies: list[float] = []
    cpu, start = _cpu(), time.perf_counter()
    if mode == "seq":
        last = ""
        for _ in range(runs):
            t = time.perf_counter()
            last = await run_one()
            latencies.append(time.perf_counter() - t)
        n = runs
    else:
        ids = await asyncio.gather(*(run_one() for _ in range(concurrency)))
        last, n = ids[-1], concurrency
    elapsed = time.perf_counter() - start
    return {
        "runs": n,
        "runs_per_s": n / elapsed,
        "p50_ms": statistics.median(latencies) * 1000 if latencies else None,
        "process_cpu_ms_per_run": (_cpu() - cpu) * 1000 / n,
        "last": last,
    }


# ------------------------------------------------------------- agentledger


async def _agentledger_trial(
    address: str, mode: str, runs: int, concurrency: int
) -> dict[str, Any]:
    sys.path.insert(0, os.environ.get("AGENTLEDGER_BENCH_SRC") or str(ROOT / "src"))
    from agentledger.engine.temporal import TemporalEngine, connect, create_worker
    from agentledger.providers.model import ModelRequest, ModelResponse
    from agentledger.runtime import Agent, ModelPlanner, Runtime, tool, user_message
    from agentledger.storage.sqlite import SQLiteStore
    from agentledger.testing import ScriptedModel, reply, tool_calls
    from agentledger.transcript import ToolResultPart

    class Reactive(ScriptedModel):
        """Calls the tool until its result is in the transcript, then answers."""

        def __init__(self) -> None:
            super().__init__([])

        async def complete(self, request: ModelRequest) -> ModelResponse:
            last = request.messages[-1]
            if any(isinstance(p, ToolResultPart) for p in last.parts):
                return reply("Sunny, 21C: no umbrella needed.")
            return tool_calls(("call-1", "weather", {"city": "Paris"}))

    @tool
    async def weather(city: str) -> str:
        """The weather in a city."""
        return f"{city}: sunny, 21C"

    with tempfile.TemporaryDirectory() as tmp:
        durability = os.environ.get("AGENTLEDGER_BENCH_DURABILITY", "full")
        store = await SQLiteStore.open(Path(tmp) / "ledger.db", durability=durability)  # type: ignore[arg-type]
        client = await connect(address)
        queue = f"al-{uuid.uuid4().hex[:8]}"
        eager = os.environ.get("AGENTLEDGER_BENCH_EAGER", "1") != "0"
        engine = TemporalEngine(client, task_queue=queue, eager_start=eager)
        runtime = Runtime(store, engine=engine)
        runtime.register_model("m", Reactive())
        runtime.register_agent(Agent("weather", ModelPlanner("m"), tools=[weather]))
        agent = runtime.agent_client("weather")

        async def run_one() -> str:
            session = f"s-{uuid.uuid4().hex}"
            await store.create_session(session)
            out = await agent.run(session, [user_message(QUESTION)])
            assert out.status.value == "completed", out.failure
            return out.run_id

        async with create_worker(runtime, client, queue):
            result = await _measure(run_one, mode, runs, concurrency)
        result.update(await _shape(client, result.pop("last")))
        await store.close()
    return result


# -------------------------------------------------------------------- peer


async def _peer_trial(address: str, mode: str, runs: int, concurrency: int) -> dict[str, Any]:
    from datetime import timedelta

    from temporalio.client import Client
    from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
    from temporalio.worker import Worker

    sys.path.insert(0, str(Path(__file__).parent))
    from temporal_peer_app import Provider, WeatherAgent, weather

    plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=30)),
        model_provider=Provider(),
    )
    client = await Client.connect(address, plugins=[plugin])
    queue = f"peer-{uuid.uuid4().hex[:8]}"

    async def run_one() -> str:
        workflow_id = f"peer-{uuid.uuid4().hex}"
        await client.execute_workflow(WeatherAgent.run, QUESTION, id=workflow_id, task_queue=queue)
        return workflow_id

    async with Worker(client, task_queue=queue, workflows=[WeatherAgent], activities=[weather]):
        result = await _measure(run_one, mode, runs, concurrency)
    result.update(await _shape(client, result.pop("last")))
    return result


# ------------------------------------------------------------------ driver


def _ensure_peer_venv() -> Path:
    python = PEER_VENV / "bin" / "python"
    if not python.exists():
        uv = ROOT / ".venv" / "bin" / "uv"
        print(f"installing the peer into {PEER_VENV.name} (group bench-temporal-peer) ...")
        subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, PEER_VENV], check=True)
        subprocess.run(
            [uv, "pip", "install", "--quiet", "--python", python, "--group", "bench-temporal-peer"],
            cwd=ROOT,
            check=True,
        )
    return python


def _server_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for child in [pid, *_children(pid)]:
        with open(f"/proc/{child}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _trial(
    python: Path, role: str, address: str, mode: str, args: argparse.Namespace, server: int
) -> dict[str, Any]:
    env = dict(os.environ)
    if role == "baseline":  # agentledger, from the baseline checkout
        role, env["AGENTLEDGER_BENCH_SRC"] = "agentledger", str(args.baseline)
    cmd = [
        str(python), __file__, "--role", role, "--temporal", address, "--mode", mode,
        "--runs", str(args.runs), "--concurrency", str(args.concurrency),
    ]  # fmt: skip
    before = _server_cpu(server)
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{role} {mode} trial failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["server_cpu_ms_per_run"] = (_server_cpu(server) - before) * 1000 / result["runs"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=["driver", "agentledger", "peer"], default="driver")
    parser.add_argument("--temporal", default="")
    parser.add_argument("--mode", choices=["seq", "conc"], default="seq")
    parser.add_argument("--runs", type=int, default=20, help="sequential runs per trial")
    parser.add_argument("--concurrency", type=int, default=30, help="runs at once")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument(
        "--baseline", type=Path, default=None, help="another checkout's src, run as a third system"
    )
    args = parser.parse_args()
    if args.role != "driver":
        trial = _agentledger_trial if args.role == "agentledger" else _peer_trial
        print(json.dumps(asyncio.run(trial(args.temporal, args.mode, args.runs, args.concurrency))))
        return
    sys.path.insert(0, str(ROOT))
    from tests.engine.temporal.server import TemporalDevServer

    peer_python = _ensure_peer_venv()
    pythons = {"agentledger": Path(sys.executable), "peer": peer_python}
    pythons["baseline"] = Path(sys.executable)
    server = TemporalDevServer()
    address = server.start()
    pid = server._process.pid  # type: ignore[union-attr]
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    try:
        for rep in range(args.repetitions):
            order = ["agentledger", "peer"] if rep % 2 == 0 else ["peer", "agentledger"]
            if args.baseline is not None:
                order.insert(1, "baseline")
            for mode in ("seq", "conc"):
                for role in order:
                    got = _trial(pythons[role], role, address, mode, args, pid)
                    results.setdefault((role, mode), []).append(got)
                    print(
                        f"rep {rep + 1} {role:11} {mode}: {got['runs_per_s']:.2f} runs/s",
                        flush=True,
                    )
    finally:
        server.stop()
    _report(results, args)


def _report(results: dict[tuple[str, str], list[dict[str, Any]]], args: argparse.Namespace) -> None:
    def med(role: str, mode: str, key: str) -> float:
        return statistics.median(r[key] for r in results[(role, mode)])

    def ratio(mode: str, key: str) -> float:
        pairs = zip(results[("agentledger", mode)], results[("peer", mode)], strict=True)
        return statistics.median(a[key] / p[key] for a, p in pairs)

    load = os.getloadavg()
    print(
        f"\nload average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {args.repetitions} "
        f"repetitions, {args.runs} sequential and {args.concurrency} concurrent runs per trial"
    )
    print("| per run | agentledger | OpenAI Agents on Temporal | agentledger / peer |")
    print("|---|---|---|---|")
    for mode, label in (
        ("seq", "runs/s, sequential"),
        ("conc", f"runs/s, {args.concurrency} concurrent"),
    ):
        a, p = med("agentledger", mode, "runs_per_s"), med("peer", mode, "runs_per_s")
        print(f"| {label} | {a:.2f} | {p:.2f} | {ratio(mode, 'runs_per_s'):.2f}x |")
    a, p = med("agentledger", "seq", "p50_ms"), med("peer", "seq", "p50_ms")
    print(f"| p50 latency, sequential | {a:.0f} ms | {p:.0f} ms | {ratio('seq', 'p50_ms'):.2f}x |")
    # The shape of one run's history (each trial's last run; medians over the trials).
    for key, label in (("workflow_tasks", "workflow tasks"), ("events", "history events")):
        a, p = med("agentledger", "seq", key), med("peer", "seq", key)
        print(f"| {label} | {a:g} | {p:g} | {ratio('seq', key):.2f}x |")
    a_act, p_act = (
        "{:g} + {:g}".format(med(role, "seq", "activities"), med(role, "seq", "local_activities"))
        for role in ("agentledger", "peer")
    )
    print(f"| activities (task queue + markers) | {a_act} | {p_act} | |")
    a_cpu, p_cpu = (
        med("agentledger", "seq", "process_cpu_ms_per_run"),
        med("peer", "seq", "process_cpu_ms_per_run"),
    )
    a_srv, p_srv = (
        med("agentledger", "seq", "server_cpu_ms_per_run"),
        med("peer", "seq", "server_cpu_ms_per_run"),
    )
    print(
        f"| worker+client CPU / Temporal server CPU, sequential | {a_cpu:.0f} ms / "
        f"{a_srv:.0f} ms | {p_cpu:.0f} ms / {p_srv:.0f} ms "
        f"| {ratio('seq', 'process_cpu_ms_per_run'):.2f}x / "
        f"{ratio('seq', 'server_cpu_ms_per_run'):.2f}x |"
    )
    a_cpu, p_cpu = (
        med("agentledger", "conc", "process_cpu_ms_per_run"),
        med("peer", "conc", "process_cpu_ms_per_run"),
    )
    a_srv, p_srv = (
        med("agentledger", "conc", "server_cpu_ms_per_run"),
        med("peer", "conc", "server_cpu_ms_per_run"),
    )
    print(
        f"| worker+client CPU / Temporal server CPU, {args.concurrency} concurrent "
        f"| {a_cpu:.0f} ms / {a_srv:.0f} ms | {p_cpu:.0f} ms / {p_srv:.0f} ms "
        f"| {ratio('conc', 'process_cpu_ms_per_run'):.2f}x / "
        f"{ratio('conc', 'server_cpu_ms_per_run'):.2f}x |"
    )
    if ("baseline", "seq") in results:
        _report_baseline(results, args)
    print(
        "| model calls per turn across a retry after a lost completion "
        "| 1 (proved by tests/engine/temporal/test_crash.py) "
        "| the model activity runs again (by design; not measured here) | |"
    )


def _report_baseline(
    results: dict[tuple[str, str], list[dict[str, Any]]], args: argparse.Namespace
) -> None:
    """This checkout against the baseline checkout, in the same repetitions."""

    def ratio(mode: str, key: str, against: str) -> float:
        pairs = zip(results[("baseline", mode)], results[(against, mode)], strict=True)
        return statistics.median(b[key] / p[key] for b, p in pairs)

    def versus(mode: str, key: str) -> float:
        pairs = zip(results[("agentledger", mode)], results[("baseline", mode)], strict=True)
        return statistics.median(a[key] / b[key] for a, b in pairs)

    for mode, label in (("seq", "sequential"), ("conc", f"{args.concurrency} concurrent")):
        print(
            f"| baseline ({args.baseline}) / peer, runs/s {label} "
            f"| {ratio(mode, 'runs_per_s', 'peer'):.2f}x | | this / baseline "
            f"{versus(mode, 'runs_per_s'):.2f}x |"
        )
        cpu = statistics.median(r["process_cpu_ms_per_run"] for r in results[("baseline", mode)])
        print(
            f"| baseline worker+client CPU per run, {label} | {cpu:.0f} ms | | this / baseline "
            f"{versus(mode, 'process_cpu_ms_per_run'):.2f}x |"
        )
    tasks = statistics.median(r["workflow_tasks"] for r in results[("baseline", "seq")])
    events = statistics.median(r["events"] for r in results[("baseline", "seq")])
    print(f"| baseline workflow tasks / history events | {tasks:g} / {events:g} | | |")


if __name__ == "__main__":
    main()
