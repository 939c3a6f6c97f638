"""Benchmark: where the CPU of a one-tool agent run goes, the runtime's and the store's.

Run as ``.venv/bin/python bench/agent_split.py``. It is not a test. The run is the
one of ``bench/peers.py`` (question, one tool call, answer, a scripted model, each
run in its own session), repeated ``--runs`` times after ``--warm`` runs in one fresh
process per trial, on:

- ``memory``: ``MemoryStore``: what the runtime costs with a store that does no I/O;
- ``sqlite-normal`` and ``sqlite-full``: ``SQLiteStore`` at each durability.

For each it prints the process CPU (every thread) and the wall time per run, and the
process CPU spent inside each store operation per run (from the call to its answer:
with one run at a time, that is the operation and the event-loop turns it waits
for). What is left, CPU per run less the store's, is the runtime's own share. The
trials are interleaved over ``--repetitions``; each figure is a median. The load
average is printed at the start and at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

STORES = ("memory", "sqlite-normal", "sqlite-full")
QUESTION = "What is the weather in Paris, and should I take an umbrella?"


async def _trial(kind: str, workdir: Path, warm: int, runs: int) -> dict[str, Any]:
    from agentledger.runtime import Agent, ModelPlanner, Runtime, tool, user_message
    from agentledger.storage import MemoryStore
    from agentledger.storage.sqlite import SQLiteStore
    from agentledger.testing import ScriptedModel, reply, tool_calls

    @tool
    async def get_weather(city: str) -> dict[str, object]:
        """Current weather in a city."""
        return {"city": city, "temp_c": 18, "conditions": "light rain"}

    store: Any
    if kind == "memory":
        store = MemoryStore()
    else:
        durability = kind.removeprefix("sqlite-")
        store = await SQLiteStore.open(str(workdir / "split.db"), durability=durability)  # type: ignore[arg-type]
    cpu: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    timing = False
    inner = store.perform

    async def perform(op: Any, request: Any) -> Any:  # the same call, timed
        if not timing:
            return await inner(op, request)
        start = time.process_time()
        try:
            return await inner(op, request)
        finally:
            cpu[op.name] += time.process_time() - start
            calls[op.name] += 1

    store.perform = perform
    runtime = Runtime(store)
    script = []
    for _ in range(warm + runs):
        script += [tool_calls(("call_1", "get_weather", {"city": "Paris"})), reply("Rainy: yes.")]
    runtime.register_model("model", ScriptedModel(script))
    runtime.register_agent(Agent("weather", ModelPlanner("model"), tools=[get_weather]))
    client = runtime.agent_client("weather")

    async def one(i: int) -> None:
        session = f"s{i}"
        await store.create_session(session, created_at=datetime.now(UTC).replace(microsecond=0))
        out = await client.run(session, [user_message(QUESTION)])
        assert out.status == "completed", out

    for i in range(warm):
        await one(i)
    timing = True
    start_cpu, start = time.process_time(), time.perf_counter()
    for i in range(warm, warm + runs):
        await one(i)
    wall, used = time.perf_counter() - start, time.process_time() - start_cpu
    await runtime.close()
    if kind != "memory":
        await store.close()
    return {
        "cpu": used / runs,
        "wall": wall / runs,
        "ops": {name: (calls[name] / runs, cpu[name] / runs) for name in calls},
    }


def _spawn(kind: str, warm: int, runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agentledger-split-") as tmp:
        argv = [sys.executable, __file__, "--trial", kind, tmp, str(warm), str(runs)]
        out = subprocess.run(argv, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"trial {kind} failed:\n{out.stderr}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--warm", type=int, default=10)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--trial", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trial:
        kind, workdir, warm, runs = args.trial
        print(json.dumps(asyncio.run(_trial(kind, Path(workdir), int(warm), int(runs)))))
        return
    print(f"load: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; cores: {os.cpu_count()}")
    results: dict[str, list[dict[str, Any]]] = {kind: [] for kind in STORES}
    for rep in range(args.repetitions):
        order = STORES[rep % len(STORES) :] + STORES[: rep % len(STORES)]
        for kind in order:
            results[kind].append(_spawn(kind, args.warm, args.runs))
    trials = f"{args.repetitions} interleaved trials of {args.runs} runs"
    print(f"medians over {trials} (after {args.warm} to warm up)")
    print("\n| store | CPU/run (ms) | wall/run (ms) | store ops/run | their CPU/run (ms) | rest |")
    print("|---|---|---|---|---|---|")
    for kind, trials in results.items():
        cpu = statistics.median(t["cpu"] for t in trials)
        wall = statistics.median(t["wall"] for t in trials)
        ops = statistics.median(sum(n for n, _ in t["ops"].values()) for t in trials)
        in_ops = statistics.median(sum(c for _, c in t["ops"].values()) for t in trials)
        row = f"| {kind} | {cpu * 1e3:.3f} | {wall * 1e3:.3f} | {ops:.1f} | {in_ops * 1e3:.3f} "
        print(row + f"| {(cpu - in_ops) * 1e3:.3f} |")
    for kind, trials in results.items():
        names = sorted({name for t in trials for name in t["ops"]})
        cells = []
        for name in names:
            each = statistics.median(t["ops"].get(name, (0, 0))[1] for t in trials)
            cells.append(f"{name} {each * 1e6:.0f} us")
        print(f"\n{kind}: " + ", ".join(cells))
    print(f"\nload: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
