"""Benchmark: what tracing costs a one-tool run, off (no provider) and on (SDK, no export).

Run as ``.venv/bin/python bench/tracing_overhead.py [--baseline REF]``. It is
not a test: it prints medians and ratios. Three worker processes run the same
one-tool run (a scripted model asks for one tool, then answers) on the same
store, interleaved round by round:

- ``before``: the code at ``REF`` without any tracing (default: the commit
  before ``src/agentledger/observability`` appeared), from ``git archive``;
- ``off``: this tree, OpenTelemetry API installed, no tracer provider set;
- ``on``: this tree with an SDK provider whose processor drops every span
  (the cost of making spans, not of exporting them).

Times are each worker's CPU time (``time.process_time``), so the load of
other processes on a shared machine stays out of the figures; each store
is measured in its own rounds: ``MemoryStore`` (the runtime alone,
the strictest ratio) and ``SQLiteStore`` with durability ``normal``.
Target: the median of the per-round ``off / before`` ratios within 2%
(1.02); the ratio of the best rounds is printed too, but one lucky round
moves it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 40
RUNS_PER_ROUND = {"memory": 40, "sqlite": 20}
WARMUP_RUNS = 30


# ----------------------------------------------------------------------- worker


def _worker(stdin: TextIO, stdout: TextIO) -> None:
    """Answer ``STORE N`` lines with the seconds per run of N one-tool runs."""
    import agentledger

    if os.environ.get("BENCH_TRACING") == "on":
        from opentelemetry import trace
        from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

        provider = TracerProvider()
        provider.add_span_processor(SpanProcessor())  # the base class: drops every span
        trace.set_tracer_provider(provider)
    print(json.dumps({"ready": str(Path(agentledger.__file__).parent)}), file=stdout, flush=True)
    loop = asyncio.new_event_loop()
    runners: dict[str, Any] = {}
    for line in stdin:
        kind, count = line.split()
        if kind not in runners:
            runners[kind] = loop.run_until_complete(_runner(kind))
            loop.run_until_complete(_runs(runners[kind], WARMUP_RUNS))
        # CPU time of this process: on a shared machine, other processes' load stays out.
        # The collector runs between rounds, not inside them (its pauses are not ours).
        gc.collect()
        gc.disable()
        started = time.process_time()
        loop.run_until_complete(_runs(runners[kind], int(count)))
        elapsed = time.process_time() - started
        gc.enable()
        print(json.dumps({"seconds_per_run": elapsed / int(count)}), file=stdout, flush=True)


async def _runner(kind: str) -> Any:
    from datetime import UTC, datetime

    from agentledger.runtime import Agent, ModelPlanner, Runtime, tool, user_message
    from agentledger.storage import MemoryStore
    from agentledger.testing import ScriptedModel, reply, tool_calls

    if kind == "memory":
        store: Any = MemoryStore()
    else:
        from agentledger.storage.sqlite import SQLiteStore

        folder = tempfile.mkdtemp(prefix="bench-tracing-")
        store = await SQLiteStore.open(os.path.join(folder, "ledger.db"), durability="normal")
    session = f"s-{uuid.uuid4().hex}"
    await store.create_session(session, created_at=datetime.now(UTC).replace(microsecond=0))

    @tool
    async def weather(city: str) -> dict[str, object]:
        """The weather in a city."""
        return {"city": city, "temp_c": 18}

    class Model:
        """A fresh two-answer script for every run."""

        def __init__(self) -> None:
            self.script: ScriptedModel | None = None

        async def complete(self, request: Any) -> Any:
            if self.script is None or not self.script.remaining:
                self.script = ScriptedModel(
                    [tool_calls(("c1", "weather", {"city": "Paris"})), reply("18C.")]
                )
            return await self.script.complete(request)

        def stream(self, request: Any) -> Any:
            raise NotImplementedError

    runtime = Runtime(store)
    runtime.register_model("m", Model())
    runtime.register_agent(Agent("chat", ModelPlanner("m", system="Brief."), tools=[weather]))
    client = runtime.agent_client("chat")

    async def one() -> None:
        out = await client.run(session, [user_message("Paris?")])
        assert out.status.value == "completed", out

    return one


async def _runs(one: Any, count: int) -> None:
    for _ in range(count):
        await one()


# ----------------------------------------------------------------------- driver


def _baseline_ref() -> str:
    added = subprocess.run(
        [
            "git",
            "log",
            "--diff-filter=A",
            "--format=%H",
            "--",
            "src/agentledger/observability/tracing.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not added:
        raise SystemExit("no commit adds src/agentledger/observability/tracing.py; pass --baseline")
    return f"{added[-1]}^"


def _export(ref: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "archive", "--format=tar", ref, "src"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    tar = into / "src.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as t:
        t.extractall(into, filter="data")
    return into / "src"


class Worker:
    """One benchmark process, driven line by line."""

    def __init__(self, name: str, src: Path, tracing: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(src), "BENCH_TRACING": tracing}
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = json.loads(self._read())
        if Path(ready["ready"]) != src / "agentledger":
            raise SystemExit(f"{name} imported agentledger from {ready['ready']}, not {src}")

    def _read(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"worker {self.name} died")
        return line

    def measure(self, kind: str, runs: int) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{kind} {runs}\n")
        self.process.stdin.flush()
        seconds: float = json.loads(self._read())["seconds_per_run"]
        return seconds

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", help="git ref of the code before tracing")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(sys.stdin, sys.stdout)
        return
    ref = args.baseline or _baseline_ref()
    with tempfile.TemporaryDirectory(prefix="bench-tracing-") as folder:
        before_src = _export(ref, Path(folder))
        workers = [
            Worker("before", before_src, "off"),
            Worker("off", ROOT / "src", "off"),
            Worker("on", ROOT / "src", "on"),
        ]
        try:
            print(f"baseline: {ref}; {args.rounds} interleaved rounds; load {os.getloadavg()}")
            for kind, runs in RUNS_PER_ROUND.items():
                times: dict[str, list[float]] = {w.name: [] for w in workers}
                ratios: dict[str, list[float]] = {"off": [], "on": []}
                for r in range(args.rounds):
                    order = workers if r % 2 == 0 else workers[::-1]
                    got = {w.name: w.measure(kind, runs) for w in order}
                    for name, value in got.items():
                        times[name].append(value)
                    ratios["off"].append(got["off"] / got["before"])
                    ratios["on"].append(got["on"] / got["before"])
                medians = {name: statistics.median(v) * 1e3 for name, v in times.items()}
                best = {name: min(v) for name, v in times.items()}
                print(
                    f"{kind:6} one-tool run, median CPU ms: before {medians['before']:.3f}  "
                    f"off {medians['off']:.3f}  on {medians['on']:.3f}"
                )
                print(
                    f"{kind:6} off/before: median of per-round ratios "
                    f"{statistics.median(ratios['off']):.4f}, of the best rounds "
                    f"{best['off'] / best['before']:.4f}   on/before: "
                    f"{statistics.median(ratios['on']):.4f}, {best['on'] / best['before']:.4f}"
                )
        finally:
            for w in workers:
                w.close()


if __name__ == "__main__":
    main()
