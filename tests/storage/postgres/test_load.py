"""Load: 16 concurrent workers, each running runs (start, 20 appends, terminal).

By default each worker runs a few runs, to keep the test set fast; set
``AGENTLEDGER_PG_LOAD_RUNS=200`` for the full figure of the issue. Afterwards
nothing is lost or duplicated, every run's ids are gap-free, and the session
logs hold exactly the records written. The throughput is printed (``-s``),
a benchmark figure rather than an assertion.
"""

from __future__ import annotations

import asyncio
import os
import time

from agentledger.storage.conformance import World
from agentledger.storage.conformance._world import all_pages
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.types import Record, RunStatus

WORKERS = 16
SESSIONS = 4  # four workers share each session, so they contend for its lock
APPENDS = 20
RUNS = int(os.environ.get("AGENTLEDGER_PG_LOAD_RUNS", "3"))


async def test_sixteen_workers_lose_and_duplicate_nothing(postgres_dsn: str) -> None:
    stores = await asyncio.gather(
        *(PostgresStore.open(postgres_dsn, min_size=1, max_size=1) for _ in range(WORKERS))
    )
    try:
        world = World(stores[0])
        sids = [await world.session(f"s{i}") for i in range(SESSIONS)]

        async def worker(w: int) -> None:
            store, sid = stores[w], sids[w % SESSIONS]
            for n in range(RUNS):
                run = world.run(f"w{w}-r{n}", session=sid)
                assert (await store.start_root_run(run.root_start())).started.id == "1"
                for i in range(APPENDS):
                    note = world.note(run, f"n{i}")
                    assert (await store.append_run_record(note)).id == str(i + 2)
                end = run.terminal(RunStatus.COMPLETED, at=world.now())
                assert (await store.record_run_terminal(end)).id == str(APPENDS + 2)

        began = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(WORKERS)))
        seconds = time.perf_counter() - began
        ops = WORKERS * RUNS * (APPENDS + 2)
        rate = ops / seconds
        print(f"\n{WORKERS} workers x {RUNS} runs: {ops} writes in {seconds:.1f}s = {rate:.0f}/s")

        store = stores[0]
        per_run = APPENDS + 2
        for rid in world.run_ids:
            log: list[Record] = await all_pages(store.list_run_records, rid)
            assert [r.id for r in log] == [str(i) for i in range(1, per_run + 1)]
            assert len({r.event_key for r in log}) == per_run
        for sid in sids:
            session_log: list[Record] = await all_pages(store.list_session_run_records, sid)
            runs_here = WORKERS // SESSIONS * RUNS
            assert len(session_log) == runs_here * per_run
            assert len({(r.run_id, r.id) for r in session_log}) == len(session_log)
    finally:
        await asyncio.gather(*(s.close() for s in stores))
