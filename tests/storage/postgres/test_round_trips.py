"""[B3] round trips per operation, counted from libpq's own protocol trace.

libpq writes every protocol message it sends (``F``) and receives (``B``) to
the trace file, in order. Each time the client's messages are followed by
the server's, the client sent something and waited for the answer: counting
those turns counts round trips on the real connection.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from psycopg import pq

from agentledger.errors import RunNotFoundError
from agentledger.storage.conformance import World
from agentledger.storage.postgres import PostgresStore


def round_trips(trace: str) -> int:
    """How many times the client sent messages and then heard back: F lines, then B lines."""
    trips = 0
    last = ""
    for line in trace.splitlines():
        direction = line.split("\t", 1)[0]
        if direction == "B" and last == "F":
            trips += 1
        if direction in ("F", "B"):
            last = direction
    return trips


class Traced:
    """A store on one pooled connection whose protocol traffic goes to a file.

    libpq buffers its trace, so phases are told apart by markers: a read of a
    run named ``mark-<name>`` on the same connection, found later in the trace.
    """

    def __init__(self, store: PostgresStore, path: Path) -> None:
        self.store = store
        self.path = path
        self.marks: list[str] = []

    async def mark(self, name: str) -> None:
        self.marks.append(name)
        with contextlib.suppress(RunNotFoundError):
            await self.store.load_run(f"mark-{name}")

    async def phases(self) -> dict[str, str]:
        """The trace between each marker and the next, by marker name."""
        async with self.store._pool.connection() as conn:
            conn.pgconn.untrace()  # flushes libpq's buffer
        chunks: dict[str, list[str]] = {}
        current = ""
        for line in self.path.read_text().splitlines():
            found = [m for m in self.marks if f"'mark-{m}'" in line]
            if found:
                current = found[0]
                chunks[current] = []
            elif current:
                chunks[current].append(line)
        # Drop the marker's own reply: everything up to its ReadyForQuery.
        phases: dict[str, str] = {}
        for name, lines in chunks.items():
            ends = [i for i, line in enumerate(lines) if "ReadyForQuery" in line]
            phases[name] = "\n".join(lines[ends[0] + 1 :] if ends else lines)
        return phases


@pytest.fixture
async def traced(postgres_dsn: str, tmp_path: Path) -> AsyncIterator[Traced]:
    store = await PostgresStore.open(postgres_dsn, min_size=1, max_size=1)
    path = tmp_path / "libpq.trace"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    async with store._pool.connection() as conn:
        conn.pgconn.trace(fd)
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
    try:
        yield Traced(store, path)
    finally:
        os.close(fd)
        await store.close()


async def test_an_append_to_a_running_run_costs_two_round_trips(traced: Traced) -> None:
    """[B3] one record or a batch: BEGIN and the locking reads, then writes and COMMIT."""
    store = traced.store
    world = World(store)
    sid = await world.session("s")
    run = await world.root("r", session=sid)

    await traced.mark("single")
    result = await store.append_run_record(world.note(run, "one"))
    await traced.mark("batch")
    results = await store.append_run_records([world.note(run, f"b{i}") for i in range(5)])
    await traced.mark("end")
    phases = await traced.phases()

    assert (result.id, result.inserted) == ("2", True)
    assert [r.id for r in results] == ["3", "4", "5", "6", "7"]
    for name in ("single", "batch"):
        assert round_trips(phases[name]) == 2, phases[name]
        assert '"COMMIT"' in phases[name]


async def test_an_append_updates_only_what_changed(traced: Traced) -> None:
    """[B3] the run row's UPDATE names the changed column only; the records are one INSERT."""
    store = traced.store
    world = World(store)
    sid = await world.session("s")
    run = await world.root("r", session=sid)

    await traced.mark("append")
    await store.append_run_records([world.note(run, "one"), world.note(run, "two")])
    await traced.mark("end")
    trace = (await traced.phases())["append"]

    updates = [line for line in trace.splitlines() if "UPDATE agentledger_runs" in line]
    assert len(updates) == 1, trace
    assert "SET last_seq = $1 WHERE" in updates[0], updates[0]
    assert trace.count('Parse\t "" "INSERT INTO agentledger_records') == 1, trace


async def test_an_exact_retry_writes_nothing(traced: Traced) -> None:
    """[B3] a retried append reads, writes nothing, and still costs two round trips."""
    store = traced.store
    world = World(store)
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    note = world.note(run, "one")
    await store.append_run_record(note)

    await traced.mark("retry")
    again = await store.append_run_record(note)
    await traced.mark("end")
    trace = (await traced.phases())["retry"]

    assert (again.id, again.inserted) == ("2", False)
    assert "INSERT INTO" not in trace
    assert "UPDATE agentledger" not in trace
    assert round_trips(trace) == 2, trace
