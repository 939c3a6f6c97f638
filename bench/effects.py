"""Benchmark: what a tool's effect class costs a run (``retry`` today, ``once``, ``keyed``).

Run as ``.venv/bin/python bench/effects.py`` (``--baseline REF`` names the code
"of today" to compare with; default ``e112ba9``, the last commit before effect
classes). It is not a test.

Each trial is a fresh Python process running ``--runs`` one-tool agent runs
(question -> tool call -> answer, a scripted model) in the embedded SQLite
store at ``synchronous=FULL`` (every variant at the same durability). The
variants, interleaved within each repetition (their order rotates):

- ``today``: a plain ``@tool`` on the baseline source tree (``git archive REF``);
- ``retry``: the same tool on this tree (``effect="retry"``, the default);
- ``keyed``: ``effect="keyed"``, the tool reads ``ToolContext.idempotency_key``;
- ``once``: ``effect="once"``.

Per variant: CPU seconds per run (the process's user+sys time over the runs),
wall time per run, store calls per run (every awaited ``Store`` method,
counted by a pass-through wrapper) and records per run (read back after).
Ratios are taken within a repetition. Goals (issue 38): ``retry`` ÷ ``today``
CPU <= 1.02x with the same records and store calls; ``once`` adds at most
one record per call and no store call.

CPU seconds are noisy on a loaded machine. For a figure that is not, count
instructions: run one trial (``--trial VARIANT DIR N``, with ``PYTHONPATH``
naming the tree) under ``valgrind --tool=callgrind`` at two sizes, N=20 and
N=120, and divide the difference by 100 (imports and setup cancel out).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from trials import ROOT, Counted, baseline_tree, fmt, measure_runs, spawn

from agentledger.runtime import ToolContext

VARIANTS = ("today", "retry", "keyed", "once")
QUESTION = "Charge order 1182 and tell me when it is done."


async def charge_keyed(order: str, ctx: ToolContext) -> dict[str, object]:
    """Charge an order, deduplicated on the call's key."""
    return {"order": order, "charged": True, "key": ctx.idempotency_key}


async def _runs(variant: str, workdir: Path, n: int) -> dict[str, float]:
    from agentledger.runtime import Agent, ModelPlanner, Runtime, tool
    from agentledger.storage.sqlite import SQLiteStore
    from agentledger.testing import ScriptedModel, reply, tool_calls

    async def charge(order: str) -> dict[str, object]:
        """Charge an order."""
        return {"order": order, "charged": True}

    if variant == "today":
        made = tool(name="charge")(charge)
    elif variant == "keyed":
        made = tool(name="charge", effect="keyed")(charge_keyed)  # type: ignore[call-arg]
    else:
        made = tool(name="charge", effect=variant)(charge)  # type: ignore[call-arg]

    raw = await SQLiteStore.open(str(workdir / "effects.db"))
    store = Counted(raw)
    runtime = Runtime(store)  # type: ignore[arg-type]
    script = []
    for _ in range(n):
        script += [tool_calls(("call_1", "charge", {"order": "1182"})), reply("Charged.")]
    runtime.register_model("model", ScriptedModel(script))
    runtime.register_agent(Agent("clerk", ModelPlanner("model"), tools=[made]))
    client = runtime.agent_client("clerk")
    for i in range(n):  # sessions made before the clock starts: the runs are measured
        await raw.create_session(f"s{i}", created_at=datetime.now(UTC).replace(microsecond=0))
    sessions = [f"s{i}" for i in range(n)]
    figures = await measure_runs(client, raw, store, sessions, QUESTION)
    await runtime.close()
    await raw.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=7)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--baseline", default="e112ba9")
    parser.add_argument("--trial", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trial:
        variant, workdir, n = args.trial
        print(json.dumps(asyncio.run(_runs(variant, Path(workdir), int(n)))))
        return

    with tempfile.TemporaryDirectory(prefix="agentledger-effects-") as tmp:
        root = Path(tmp)
        sources = {v: ROOT / "src" for v in VARIANTS}
        sources["today"] = baseline_tree(args.baseline, root)
        print(f"load: {os.getloadavg()[0]:.2f} (1 min); cores: {os.cpu_count()}")
        print(f"{args.runs} one-tool runs a trial, synchronous=FULL, baseline {args.baseline}\n")
        figures: dict[tuple[str, str], list[float]] = {}
        ratios: dict[str, list[float]] = {}
        for rep in range(args.repetitions):
            order = VARIANTS[rep % 4 :] + VARIANTS[: rep % 4]
            this = {}
            for variant in order:
                got = spawn(
                    __file__, variant, root / f"{variant}-{rep}", args.runs, sources[variant]
                )
                this[variant] = got
                for name, value in got.items():
                    figures.setdefault((variant, name), []).append(value)
            for variant in ("retry", "keyed", "once"):
                ratio = this[variant]["cpu_ms_per_run"] / this["today"]["cpu_ms_per_run"]
                ratios.setdefault(variant, []).append(ratio)
            print(f"repetition {rep + 1}/{args.repetitions} done", file=sys.stderr)

        names = ("cpu_ms_per_run", "wall_ms_per_run", "store_calls_per_run", "records_per_run")
        print(f"medians (min-max) over {args.repetitions} interleaved repetitions\n")
        print(f"| figure | {' | '.join(VARIANTS)} |")
        print("|---|" + "---|" * len(VARIANTS))
        for name in names:
            cells = [fmt(figures[v, name]) for v in VARIANTS]
            print(f"| {name} | {' | '.join(cells)} |")
        print("\nCPU per run ÷ today's (same repetition)\n")
        print("| variant | ratio |")
        print("|---|---|")
        for variant, values in ratios.items():
            print(f"| {variant} | {fmt(values, 3)} |")


if __name__ == "__main__":
    main()
