"""Benchmark: a flood of clients against one ``agentledger serve`` (SQLite or PostgreSQL).

Run as ``.venv/bin/python bench/service_overload.py [--db postgresql://...] [--writers 600]
[--followers 1000]``. It is not a test (the short form is tests/service/test_overload.py).
The service runs with its default limits; the flood (tests/service/overload_driver.py)
sends, to loopback only and bounded in requests and time: ``--writers`` writers at once,
each its own connection (past the service's 512 calls, 256 per token), ``--followers``
followers timing a record every 10 ms, 200 slow clients trickling headers or bodies, a
reader scanning a 2,000-record run beside 16 writers, and a stream its client never reads.
Prints requests, shed, writes acknowledged and lost, follow delay p99, the service's RSS
peak and how soon calls are as fast as before once the flood ends.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.service.overload_driver import Plan, run_flood
from tests.service.process import ServiceProcess
from tests.storage.postgres.server import create_database, drop_database

from agentledger.service.auth import add_token


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db", default="",
        help="a PostgreSQL server's DSN: the flood runs in a fresh database there, dropped "
        "afterwards (default: a SQLite file)",
    )  # fmt: skip
    parser.add_argument("--writers", type=int, default=600)
    parser.add_argument("--writes", type=int, default=20)
    parser.add_argument("--followers", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args()
    plan = Plan(
        writers=args.writers, writes=args.writes, followers=args.followers,
        timed_writes=500, slow_clients=200, scan_records=2000, scan_writers=16,
        unread_streams=1, unread_wait=25, seconds=args.seconds,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        tokens = Path(tmp) / "tokens.json"
        token = add_token(tokens, "host")
        db = create_database(args.db) if args.db else str(Path(tmp) / "flood.db")
        options = ("--max-streams", str(max(12_000, args.followers + 100)),
                   "--client-timeout", "10")  # fmt: skip
        try:
            with ServiceProcess(db, tokens, options=options) as service:
                result = asyncio.run(run_flood(service.url, token, service.pid, plan))
                cpu = _cpu_seconds(service.pid)
        finally:
            if args.db:
                drop_database(db)
    print(f"backend: {'postgresql' if args.db else 'sqlite'}; {plan}")
    print(result.summary())
    print(f"service CPU: {cpu:.1f} s over the whole run (setup, flood, recovery)")
    if result.writer_errors:
        print(f"writer errors ({len(result.writer_errors)}): {result.writer_errors[:3]}")
    print(f"load average: {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores")


def _cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
