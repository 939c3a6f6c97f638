"""Benchmark: how long importing agentledger, its CLI and rich takes, in fresh interpreters.

Run as ``.venv/bin/python bench/import_time.py`` (or ``make bench``). Not a test:
each case runs in a new process, interleaved with the others, ``REPEATS``
times; it prints the median wall time of each and the share of the CLI's
import that is rich's. Byte-code is compiled before the first round.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

REPEATS = 11
CASES = {
    "python (baseline)": [sys.executable, "-c", "pass"],
    "import agentledger": [sys.executable, "-c", "import agentledger"],
    "import agentledger.storage": [sys.executable, "-c", "import agentledger.storage"],
    "import agentledger.cli": [sys.executable, "-c", "import agentledger.cli"],
    "import rich (what the CLI uses)": [
        sys.executable, "-c", "import rich.console, rich.table, rich.text, rich.tree",
    ],
    "agentledger --help": [sys.executable, "-m", "agentledger", "--help"],
}  # fmt: skip


def _once(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    for argv in CASES.values():  # warm the byte-code and the page cache
        _once(argv)
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(REPEATS):
        for name, argv in CASES.items():
            times[name].append(_once(argv))
    median = {name: statistics.median(values) * 1000 for name, values in times.items()}
    base = median["python (baseline)"]
    print(f"load average {os.getloadavg()[0]:.2f}; median of {REPEATS}, ms (minus bare python)")
    for name, ms in median.items():
        print(f"  {name:34} {ms:7.1f}  ({ms - base:+7.1f})")
    rich = median["import rich (what the CLI uses)"] - base
    cli = median["import agentledger.cli"] - base
    print(f"  rich / agentledger.cli import: {rich / cli:.2f}")


if __name__ == "__main__":
    main()
