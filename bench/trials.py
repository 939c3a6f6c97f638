"""What the benchmarks that compare this tree with an earlier commit share.

Each trial runs in a fresh Python process whose ``PYTHONPATH`` names the
source tree under test: this checkout's ``src``, or a commit's unpacked from
git. A trial prints one JSON object; :func:`spawn` returns it.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class Counted:
    """The store, with every awaited method call counted by name (a pass-through)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if not callable(value) or name.startswith("_"):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            result = value(*args, **kwargs)
            if asyncio.iscoroutine(result):
                self.calls[name] += 1
            return result

        return counted


def baseline_tree(ref: str, root: Path) -> Path:
    """Commit ``ref``'s ``src`` directory, unpacked from git under ``root`` (no work tree
    is touched)."""
    target = root / "baseline"
    target.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "src"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "src"


def spawn(script: str, name: str, workdir: Path, n: int, src: Path) -> dict[str, float]:
    """Run ``script --trial NAME WORKDIR N`` on the source tree ``src``; its JSON answer."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(src)}
    argv = [sys.executable, script, "--trial", name, str(workdir), str(n)]
    out = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if out.returncode != 0:
        raise SystemExit(f"trial {name} failed:\n{out.stderr}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def fmt(values: list[float], digits: int = 2) -> str:
    """A figure's median and range: ``median (min-max)``."""
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:,.{digits}f} ({low:,.{digits}f}-{high:,.{digits}f})"


async def measure_runs(
    client: Any, raw: Any, counted: Counted, sessions: list[str], text: str
) -> dict[str, float]:
    """One run of ``client``'s agent in each of ``sessions`` (made beforehand), timed; per
    run: CPU and wall milliseconds, store calls (through ``counted``) and records written."""
    from agentledger.runtime import user_message

    n = len(sessions)
    counted.calls.clear()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    run_ids = []
    for session in sessions:
        out = await client.run(session, [user_message(text)])
        assert out.status == "completed", out
        run_ids.append(out.run_id)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    calls = sum(counted.calls.values())
    records = 0
    for run_id in run_ids:
        records += len((await raw.list_run_records(run_id, limit=1000)).records)
    return {
        "cpu_ms_per_run": cpu / n * 1000,
        "wall_ms_per_run": wall / n * 1000,
        "store_calls_per_run": calls / n,
        "records_per_run": records / n,
    }
