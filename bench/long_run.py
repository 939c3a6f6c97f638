"""Benchmark: does a planner turn cost the same at turn 1,500 as at turn 10?

Run as ``.venv/bin/python bench/long_run.py [--turns 10 120 500 1500]``. It is
not a test: it prints times. For each N it runs one run of N planner turns
on a fresh SQLite file (durability ``normal``), in process, with a stream
sink: an instant scripted model asks for one tool call per turn (an instant
tool) and answers on turn N. A turn's time is from one model call to the
next (the planner turn's reads and writes, the tool activity, the loop).

It prints each run's total, then, for the longest run, the median turn time
around turn 10 (turns 6-15) and over its last ten turns, in wall time and in
process CPU time (threads included; steadier on a shared machine), their
ratio, and the mean CPU time of a turn in each quarter of the run. Goal:
the last turns within 1.5x of turn 10, so that a run costs what it adds,
not the square of its length.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agentledger.providers.model import ModelRequest, ModelResponse, ModelStreamEvent
from agentledger.runtime import Agent, ModelPlanner, QueueSink, Runtime, tool
from agentledger.storage import RunStatus
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply, tool_calls

DEFAULT_TURNS = (10, 120, 500, 1500)


@tool
async def step(n: int) -> int:
    """An instant tool: returns its input."""
    return n


class _TimedModel(ScriptedModel):
    """A ScriptedModel that notes when each call arrives (wall and CPU time)."""

    def __init__(self, responses: list[ModelResponse]) -> None:
        super().__init__(responses)
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def _mark(self) -> None:
        self.wall.append(time.perf_counter())
        self.cpu.append(time.process_time())

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self._mark()
        return await super().complete(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        self._mark()
        async for event in super().stream(request):
            yield event


async def _one_run(turns: int, folder: Path) -> tuple[float, list[float], list[float]]:
    """Seconds for one run of ``turns`` planner turns; each turn's wall and CPU seconds."""
    script = [tool_calls((f"c{t}", "step", {"n": t})) for t in range(1, turns)]
    model = _TimedModel([*script, reply("done")])
    store = await SQLiteStore.open(folder / f"long-{turns}.db", durability="normal")
    try:
        runtime = Runtime(store, stream=QueueSink())
        runtime.register_model("m", model)
        runtime.register_agent(
            Agent("long", ModelPlanner("m", system="Go on."), tools=[step], max_turns=turns + 1)
        )
        await store.create_session("s1")
        started = time.perf_counter()
        out = await runtime.agent_client("long").run("s1", "Count.")
        total = time.perf_counter() - started
        assert out.status is RunStatus.COMPLETED, out.failure
        assert len(model.wall) == turns
        await runtime.close()
    finally:
        await store.close()
    wall = [b - a for a, b in zip(model.wall, model.wall[1:], strict=False)]
    cpu = [b - a for a, b in zip(model.cpu, model.cpu[1:], strict=False)]
    return total, wall, cpu


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def _report(turns: int, wall: list[float], cpu: list[float]) -> None:
    # wall[k] is turn k+1 (from its model call to the next one)
    early = slice(5, 15)
    late = slice(max(len(wall) - 10, 15), len(wall))
    for name, times in (("wall", wall), ("cpu", cpu)):
        at_10 = statistics.median(times[early])
        at_end = statistics.median(times[late])
        print(
            f"  {name}: turn 10 {_ms(at_10)}, turn {turns} {_ms(at_end)}, "
            f"ratio {at_end / at_10:.2f}x"
        )
    quarter = len(cpu) // 4
    means = [statistics.fmean(cpu[q * quarter : (q + 1) * quarter]) for q in range(4)]
    print("  cpu mean per turn by quarter of the run: " + ", ".join(_ms(m) for m in means))


async def _main(all_turns: list[int]) -> None:
    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()}")
    results: dict[int, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        for turns in all_turns:
            total, wall, cpu = await _one_run(turns, Path(folder))
            results[turns] = (wall, cpu)
            print(f"{turns:5d} turns: {total:7.2f} s  ({_ms(total / turns)} per turn)")
    longest = max(t for t in all_turns if t > 25) if any(t > 25 for t in all_turns) else 0
    if longest:
        print(f"per-turn time, run of {longest} turns (median of turns 6-15 vs the last ten):")
        _report(longest, *results[longest])
    print(f"load average after: {os.getloadavg()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=list(DEFAULT_TURNS))
    args = parser.parse_args()
    asyncio.run(_main(args.turns))


if __name__ == "__main__":
    main()
