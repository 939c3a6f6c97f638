"""Benchmark: follow delay with many live followers on one ``agentledger serve``.

Run as ``.venv/bin/python bench/service_followers.py [--followers 1000] [--writes 300]``.
It is not a test. One session holds ``--followers`` running runs; one follower
per run streams its records (server-sent events, one StoreClient holding every
stream). A writer appends to the runs in turn, one record every 10 ms, and each
follower notes how long after its append returned the record reached it. Prints
the median, p99 and worst delay (goal: p99 <= 50 ms with 1,000 followers).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.service.process import ServiceProcess

from agentledger.service import StoreClient
from agentledger.service.auth import add_token
from agentledger.storage import RecordBuilder, RunStart

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def bench(url: str, token: str, followers: int, writes: int, pid: int) -> None:
    host = StoreClient(url, token=token, max_connections=16)
    streams = StoreClient(url, token=token, max_connections=followers + 8)
    try:
        await host.create_session("followed", created_at=T0)
        runs = [RecordBuilder(RunStart(run_id=f"r{i}", agent_id="bench", session_id="followed",
                                       started_at=T0)) for i in range(followers)]  # fmt: skip
        for i in range(0, followers, 50):
            await asyncio.gather(*(host.start_root_run(r.root_start()) for r in runs[i : i + 50]))
        sent: dict[tuple[str, str], float] = {}
        delays: list[float] = []
        connected = 0

        async def follower(run: RecordBuilder) -> None:
            nonlocal connected
            seen_start = False
            async for followed in streams.follow_run_records(run.run.run_id):
                if not seen_start:  # run_started: the stream is open
                    seen_start, connected = True, connected + 1
                    continue
                key = (followed.record.run_id, followed.record.event_key)
                delays.append(time.perf_counter() - sent[key])

        tasks = [asyncio.create_task(follower(run)) for run in runs]
        while connected < followers:  # noqa: ASYNC110 (a count, no event)
            await asyncio.sleep(0.1)
        started, server_cpu, own_cpu = time.perf_counter(), cpu_seconds(pid), time.process_time()
        for k in range(writes):
            record = runs[k % followers].record("note", b'{"k": %d}' % k, event_key=f"k{k}",
                                                at=T0)  # fmt: skip
            sent[(record.run_id, record.event_key)] = time.perf_counter()
            await host.append_run_record(record)
            await asyncio.sleep(0.01)
        await asyncio.sleep(2)
        wall = time.perf_counter() - started
        server_cpu = (cpu_seconds(pid) - server_cpu) / wall
        own_cpu = (time.process_time() - own_cpu) / wall
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await host.close()
        await streams.close()
    delays.sort()
    p99 = delays[max(0, int(len(delays) * 0.99) - 1)]
    print(f"{followers} followers, {len(delays)}/{writes} records seen: delay median "
          f"{statistics.median(delays) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
          f"worst {delays[-1] * 1000:.1f} ms")  # fmt: skip
    print(f"CPU while following: service {server_cpu:.0%} of a core, followers and writer "
          f"{own_cpu:.0%}")  # fmt: skip
    print(f"load average: {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--followers", type=int, default=1000)
    parser.add_argument("--writes", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tokens = Path(tmp) / "tokens.json"
        token = add_token(tokens, "host")
        with ServiceProcess(str(Path(tmp) / "followed.db"), tokens) as service:
            asyncio.run(bench(service.url, token, args.followers, args.writes, service.pid))


if __name__ == "__main__":
    main()
