"""Benchmark: what taking steering messages costs a run that has none.

Run as ``.venv/bin/python bench/steer.py`` (``--baseline REF`` names the code
before steering was taken at planner turns; default ``d60dbbe``). It is not a
test. Set ``AGENTLEDGER_BENCH_PG_DSN`` to measure PostgreSQL too.

Each trial is a fresh Python process running ``--runs`` one-tool agent runs
(question -> tool call -> answer: two planner turns, a scripted model) with
no message steering, on one backend. Variants, interleaved within each
repetition: ``before`` (the baseline's source tree, ``git archive REF``) and
``after`` (this tree, whose planner turns write with ``append_turn_records``).
Per variant: CPU and wall milliseconds per run, store calls per run (every
awaited ``Store`` method, counted by a pass-through wrapper) and records per
run. Goal: the same store calls and records per run, CPU within noise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trials import ROOT, Counted, baseline_tree, fmt, measure_runs, spawn

VARIANTS = ("before", "after")


async def _open(backend: str, workdir: Path) -> Any:
    if backend == "sqlite":
        from agentledger.storage.sqlite import SQLiteStore

        return await SQLiteStore.open(str(workdir / "steer.db"))
    from agentledger.storage.postgres import PostgresStore

    return await PostgresStore.open(os.environ["AGENTLEDGER_BENCH_PG_DSN"])


async def _runs(backend: str, workdir: Path, n: int) -> dict[str, float]:
    from agentledger.runtime import Agent, ModelPlanner, Runtime, tool
    from agentledger.testing import ScriptedModel, reply, tool_calls

    @tool(name="lookup")
    async def lookup(order: str) -> dict[str, object]:
        """Look an order up."""
        return {"order": order, "found": True}

    raw = await _open(backend, workdir)
    store = Counted(raw)
    runtime = Runtime(store)
    script = []
    for _ in range(n):
        script += [tool_calls(("call_1", "lookup", {"order": "1182"})), reply("Found.")]
    runtime.register_model("model", ScriptedModel(script))
    runtime.register_agent(Agent("clerk", ModelPlanner("model"), tools=[lookup]))
    client = runtime.agent_client("clerk")
    tag = uuid.uuid4().hex[:8]
    for i in range(n):  # sessions made before the clock starts: the runs are measured
        created = datetime.now(UTC).replace(microsecond=0)
        await raw.create_session(f"steer-{tag}-{i}", created_at=created)
    sessions = [f"steer-{tag}-{i}" for i in range(n)]
    figures = await measure_runs(client, raw, store, sessions, "Where is order 1182?")
    await runtime.close()
    await raw.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--baseline", default="d60dbbe")
    parser.add_argument("--trial", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trial:
        backend, workdir, n = args.trial
        print(json.dumps(asyncio.run(_runs(backend, Path(workdir), int(n)))))
        return

    backends = ["sqlite"] + (["postgres"] if os.environ.get("AGENTLEDGER_BENCH_PG_DSN") else [])
    with tempfile.TemporaryDirectory(prefix="agentledger-steer-") as tmp:
        root = Path(tmp)
        sources = {"before": baseline_tree(args.baseline, root), "after": ROOT / "src"}
        print(f"load: {os.getloadavg()[0]:.2f} (1 min); cores: {os.cpu_count()}")
        print(f"{args.runs} one-tool runs a trial, no steering, baseline {args.baseline}\n")
        for backend in backends:
            figures: dict[tuple[str, str], list[float]] = {}
            ratios: list[float] = []
            for rep in range(args.repetitions):
                order = VARIANTS if rep % 2 == 0 else VARIANTS[::-1]
                this = {}
                for v in order:
                    got = spawn(
                        __file__, backend, root / f"{backend}-{v}-{rep}", args.runs, sources[v]
                    )
                    this[v] = got
                    for name, value in got.items():
                        figures.setdefault((v, name), []).append(value)
                ratios.append(this["after"]["cpu_ms_per_run"] / this["before"]["cpu_ms_per_run"])
            print(f"{backend}: medians (min-max) over {args.repetitions} repetitions\n")
            print("| figure | before | after |")
            print("|---|---|---|")
            for name in ("cpu_ms_per_run", "wall_ms_per_run", "store_calls_per_run"):
                print(
                    f"| {name} | {fmt(figures['before', name])} | {fmt(figures['after', name])} |"
                )
            name = "records_per_run"
            print(f"| {name} | {fmt(figures['before', name])} | {fmt(figures['after', name])} |")
            print(f"\nCPU after ÷ before (same repetition): {fmt(ratios, 3)}\n")


if __name__ == "__main__":
    main()
