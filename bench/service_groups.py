"""Benchmark aid: do 16 workers' concurrent appends meet in one SQLite group commit, in
process and through ``agentledger serve`` (16 StoreClients, one each)?

Run as ``.venv/bin/python bench/service_groups.py [--rounds 100]``. Not a test: it counts
the operations of each transaction the store's writer commits (its group sizes), in this
process for 16 tasks on one store, and in the service process (``serve`` started by this
script with the same count, reported on SIGUSR1), and prints both histograms with the
appends/s of each side. In process, the 16 appends of a round meet in one group; through
the service, a round's calls reach the store as they arrive from the clients.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentledger.storage.sqlite import group

_SIZES: collections.Counter[int] = collections.Counter()


def _count_groups() -> None:
    """Count the operations of every group the writer runs (a bench aid, not the product)."""
    run_group = group.GroupWriter._run_group

    def counted(self: Any, conn: Any, items: Any, *, here: bool = False) -> Any:
        answers = run_group(self, conn, items, here=here)
        _SIZES[len(answers)] += 1
        return answers

    group.GroupWriter._run_group = counted  # type: ignore[method-assign]


def _histogram() -> str:
    sizes = dict(_SIZES)
    _SIZES.clear()
    operations = sum(size * n for size, n in sizes.items())
    groups = sum(sizes.values())
    shown = ", ".join(f"{size}: {n}" for size, n in sorted(sizes.items()))
    return f"{groups} groups, {operations / max(groups, 1):.1f} operations each ({shown})"


def _serve(argv: list[str]) -> None:
    """``agentledger serve`` with its groups counted; SIGUSR1 writes and resets the count."""
    _count_groups()
    out = os.environ["GROUPS_OUT"]

    def report(*_: object) -> None:
        Path(out).write_text(_histogram())

    signal.signal(signal.SIGUSR1, report)
    from agentledger.cli import main

    raise SystemExit(main(["serve", *argv]))


def _served(pid: int, out: Path) -> str:
    """The service's group count since the last one (it writes it on SIGUSR1)."""
    out.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    while not out.exists() or not (text := out.read_text()):
        time.sleep(0.01)
    return text


async def _bench(db: str, url: str, token: str, pid: int, out: Path, rounds: int) -> None:
    from bench.service import PAYLOAD, T0, _at

    from agentledger.service import StoreClient
    from agentledger.storage import RecordBuilder, RunStart
    from agentledger.storage.sqlite import SQLiteStore

    store = await SQLiteStore.open(db, durability="full")
    clients = [StoreClient(url, token=token) for _ in range(16)]
    try:
        for handle in (store, clients[0]):
            await handle.create_session("bench", created_at=T0)
        for name, handles in (("in process", [store] * 16), ("through serve", clients)):
            runs = []
            for i, handle in enumerate(handles):
                run = RecordBuilder(RunStart(run_id=f"r{i}", agent_id="bench",
                                             session_id="bench", started_at=T0))  # fmt: skip
                await handle.start_root_run(run.root_start())
                runs.append(run)

            async def worker(handle: Any, run: RecordBuilder) -> None:
                for i in range(rounds):
                    record = run.record("note", PAYLOAD, event_key=f"n{i}", at=_at(i))
                    await handle.append_run_record(record)

            _SIZES.clear()
            os.kill(pid, signal.SIGUSR1)  # the service's count starts here too
            started = time.perf_counter()
            await asyncio.gather(*(worker(h, r) for h, r in zip(handles, runs, strict=True)))
            rate = 16 * rounds / (time.perf_counter() - started)
            if handles[0] is store:
                print(f"{name:14} {rate:8.0f} appends/s  {_histogram()}")
                continue
            print(f"{name:14} {rate:8.0f} appends/s  {await asyncio.to_thread(_served, pid, out)}")
    finally:
        await store.close()
        for client in clients:
            await client.close()


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        _serve(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100, help="appends per worker")
    args = parser.parse_args()
    from agentledger.service.auth import add_token

    _count_groups()
    with tempfile.TemporaryDirectory() as tmp:
        tokens = Path(tmp) / "tokens.json"
        token = add_token(tokens, "host")
        out = Path(tmp) / "groups.txt"
        served = str(Path(tmp) / "served.db")
        command = [sys.executable, __file__, "serve", "--db", served, "--listen",
                   "127.0.0.1:0", "--tokens", str(tokens)]  # fmt: skip
        service = subprocess.Popen(command, stdout=subprocess.PIPE, text=True,
                                   env={**os.environ, "GROUPS_OUT": str(out)})  # fmt: skip
        try:
            assert service.stdout is not None
            line = service.stdout.readline()
            url = line.split("listening on ", 1)[1].split()[0]
            asyncio.run(_bench(str(Path(tmp) / "inprocess.db"), url, token, service.pid, out,
                               args.rounds))  # fmt: skip
        finally:
            service.terminate()
            service.wait(timeout=30)
    print(f"load average: {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
