"""[B3] round trips per operation, counted from libpq's own protocol trace.

libpq writes every protocol message it sends (``F``) and receives (``B``) to
the trace file, in order. Each time the client's messages are followed by
the server's, the client sent something and waited for the answer: counting
those turns counts round trips on the real connection.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from psycopg import pq

from agentledger.errors import RunNotFoundError
from agentledger.storage.conformance import World
from agentledger.storage.conformance._world import all_pages
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
                if current and chunks[current] and "\tParse\t" in chunks[current][-1]:
                    chunks[current].pop()  # the marker's own statement
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


def _statements(trace: str) -> list[str]:
    """The SQL text of every statement the client parsed, in order."""
    return [line.split('"', 3)[3] for line in trace.splitlines() if "\tParse\t" in line]


async def test_an_append_to_a_run_this_handle_wrote_is_one_statement(traced: Traced) -> None:
    """[B3] one record or a batch onto a run the handle started: one round trip, one commit."""
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
        assert round_trips(phases[name]) == 1, phases[name]
        assert len(_statements(phases[name])) == 1, phases[name]
    log = await all_pages(store.list_session_run_records, sid)
    assert [(r.id, r.event_key) for r in log][1:] == [
        ("2", "one"),
        *((str(i + 3), f"b{i}") for i in range(5)),
    ]


async def test_an_append_to_a_run_another_handle_wrote_costs_two_round_trips(
    traced: Traced, postgres_dsn: str
) -> None:
    """[B3] a read of the run and its session, then the one statement; then the handle knows it."""
    async with await PostgresStore.open(postgres_dsn, min_size=1, max_size=1) as other:
        world = World(other)
        sid = await world.session("s")
        run = await world.root("r", session=sid)
    store = traced.store

    await traced.mark("first")
    results = await store.append_run_records([world.note(run, "a"), world.note(run, "b")])
    await traced.mark("second")
    again = await store.append_run_record(world.note(run, "c"))
    await traced.mark("end")
    phases = await traced.phases()

    assert [r.id for r in results] == ["2", "3"]
    assert again.id == "4"
    assert round_trips(phases["first"]) == 2, phases["first"]
    assert len(_statements(phases["first"])) == 2, phases["first"]
    assert round_trips(phases["second"]) == 1, phases["second"]


async def test_an_append_updates_only_what_changed(traced: Traced) -> None:
    """[B3] the run row's UPDATE names the changed column only, in one statement or under locks."""
    store = traced.store
    world = World(store)
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    await store.append_run_record(world.note(run, "one"))

    three = world.note(run, "three")

    await traced.mark("one statement")
    await store.append_run_records([world.note(run, "two"), three])
    await traced.mark("under locks")  # a retry and a new record: decided under locks
    await store.append_run_records([three, world.note(run, "four")])
    await traced.mark("end")
    phases = await traced.phases()

    for name in ("one statement", "under locks"):
        statements = _statements(phases[name])
        updates = [
            re.sub(r"\$\d+", "$", part.split(" WHERE ", 1)[0])
            for sql in statements
            for part in sql.split("UPDATE agentledger_runs ")[1:]
        ]
        writes = updates[-1:]  # under locks, after the one statement that wrote nothing
        # [G3] and the records' bytes, which the run's row counts (its records: last_seq)
        assert writes == ["SET last_seq = $, usage_bytes = usage_bytes + $"], statements
        inserts = [sql for sql in statements if "INSERT INTO agentledger_records" in sql]
        assert len(inserts) == (1 if name == "one statement" else 2), statements
    assert '"BEGIN"' in phases["under locks"]
    ids = [r.id for r in await all_pages(store.list_run_records, run.run.run_id)]
    assert ids == ["1", "2", "3", "4", "5"]


async def test_an_exact_retry_writes_nothing(traced: Traced) -> None:
    """[B3] a retried append is decided under locks: the one statement wrote nothing."""
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
    statements = _statements(trace)
    assert "INSERT INTO" in statements[0]  # the one statement, which found the key used
    assert not any("INSERT INTO" in sql or "UPDATE agentledger" in sql for sql in statements[1:])
    assert round_trips(trace) == 3, trace
    assert [r.id for r in await all_pages(store.list_run_records, run.run.run_id)] == ["1", "2"]


async def test_a_planner_turns_write_without_steering_is_one_statement(traced: Traced) -> None:
    """A planner turn's write (``append_turn_records``) costs what an append costs while no
    steering message waits for the run; one that waits sends it under locks, which take it."""
    from agentledger.storage.conformance._messages import submission
    from agentledger.storage.types import BusyPolicy, MessageFate

    store = traced.store
    world = World(store)
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    await store.append_run_record(world.note(run, "one"))

    await traced.mark("no steering")
    plain = await store.append_turn_records([world.note(run, "turn 2")])
    await traced.mark("submit")
    steer = await store.submit_message(submission(world, sid, "m1", BusyPolicy.STEER))
    await traced.mark("steering")
    took = await store.append_turn_records([world.note(run, "turn 3")])
    await traced.mark("end")
    phases = await traced.phases()

    assert plain.steered == []
    assert [r.inserted for r in plain.results] == [True]
    assert round_trips(phases["no steering"]) == 1, phases["no steering"]
    assert len(_statements(phases["no steering"])) == 1, phases["no steering"]
    assert [(m.run_id, m.fate) for m in took.steered] == [(steer.run_id, MessageFate.STEERED)]
    assert '"BEGIN"' in phases["steering"]  # the one statement wrote nothing: under locks
