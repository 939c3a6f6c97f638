"""Connection loss: ``pg_terminate_backend`` on the store's connections mid-operation.

A connection lost after an operation sent its writes is a TransientError (it
may or may not have committed), and the caller's retry of the same command is
an exact retry: it succeeds with the same ids. A connection lost before any
write was sent is replaced and the operation retried inside the store.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg import conninfo

from agentledger.errors import TransientError
from agentledger.storage.conformance import World
from agentledger.storage.conformance._world import all_pages
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.types import Record, RunStatus
from tests.conditions import HANG_GUARD

T = TypeVar("T")

_BACKENDS = (
    "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()"
)
_BLOCKED = _BACKENDS + " AND wait_event_type = 'Lock'"


@pytest.fixture
async def admin(postgres_dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def app_name() -> str:
    """The application_name that marks the victim store's connections."""
    return f"victim-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def victim(postgres_dsn: str, app_name: str) -> AsyncIterator[PostgresStore]:
    dsn = conninfo.make_conninfo(postgres_dsn, application_name=app_name)
    async with await PostgresStore.open(dsn, min_size=1, max_size=1) as store:
        yield store


async def _blocked_backend(
    admin: psycopg.AsyncConnection[Any], app_name: str, not_pid: int = 0
) -> int:
    """The pid of the victim's backend once it waits on a lock (and is not ``not_pid``)."""
    deadline = asyncio.get_running_loop().time() + HANG_GUARD
    while asyncio.get_running_loop().time() < deadline:
        cur = await admin.execute(_BLOCKED, (app_name,))
        pids = [row[0] for row in await cur.fetchall() if row[0] != not_pid]
        if pids:
            return int(pids[0])
        await asyncio.sleep(0.01)
    raise AssertionError("the victim never blocked")


async def test_killed_after_writes_were_sent_is_transient_and_retry_is_exact(
    postgres_dsn: str, admin: psycopg.AsyncConnection[Any], app_name: str, victim: PostgresStore
) -> None:
    world = World(victim)
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    note = world.note(run, "n1")
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as blocker:
        await blocker.execute("LOCK TABLE agentledger_records IN EXCLUSIVE MODE")
        call = asyncio.ensure_future(victim.append_run_record(note))
        pid = await _blocked_backend(admin, app_name)  # its INSERT waits: writes are out
        await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(TransientError) as e:
            await call
        assert e.value.operation == "append_run_record"
        await blocker.rollback()
    first = await victim.append_run_record(note)
    again = await victim.append_run_record(note)
    assert (first.id, first.inserted) == ("2", True)
    assert (again.id, again.inserted) == ("2", False)
    log: list[Record] = await all_pages(victim.list_run_records, run.run.run_id)
    assert [(r.id, r.event_key) for r in log] == [("1", "run_started"), ("2", "n1")]
    assert [r.id for r in await all_pages(victim.list_session_run_records, sid)] == ["1", "2"]


async def test_killed_before_writing_is_retried_inside_the_store(
    postgres_dsn: str, admin: psycopg.AsyncConnection[Any], app_name: str, victim: PostgresStore
) -> None:
    world = World(victim)
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as blocker:
        await blocker.execute("SELECT 1 FROM agentledger_sessions WHERE id = %s FOR UPDATE", (sid,))
        call = asyncio.ensure_future(
            victim.record_run_terminal(run.terminal(RunStatus.COMPLETED, at=world.now()))
        )
        pid = await _blocked_backend(admin, app_name)  # waits for the session lock
        await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        await _blocked_backend(admin, app_name, not_pid=pid)  # retried on a new connection
        await blocker.commit()
    result = await call
    assert (result.id, result.inserted) == ("2", True)
    assert (await victim.load_run(run.run.run_id)).status is RunStatus.COMPLETED


async def _until_done(call: Callable[[Any], Awaitable[T]], cmd: Any, errors: list[str]) -> T:
    """Retry ``call(cmd)`` on TransientError, as an activity would."""
    for _ in range(200):
        try:
            return await call(cmd)
        except TransientError as e:
            errors.append(e.operation)
            await asyncio.sleep(0.005)
    raise AssertionError("never succeeded")


async def test_workload_survives_killed_connections(
    postgres_dsn: str, admin: psycopg.AsyncConnection[Any], app_name: str, victim: PostgresStore
) -> None:
    """Workers retry what fails while their connections keep being killed.

    Every command ends with the ids a run without kills would have given, and
    the logs hold each record exactly once, gap-free.
    """
    world = World(victim)
    sid = await world.session("s")
    errors: list[str] = []
    workers, runs_each, notes = 4, 4, 8
    stop = asyncio.Event()
    kills = 0

    first_kill = asyncio.Event()

    async def kill() -> None:
        nonlocal kills
        cur = await admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s",
            (app_name,),
        )
        row = await cur.fetchone()
        kills += int(row[0]) if row else 0

    async def killer() -> None:
        # The first kill lands before the workers start (the pool keeps its one connection
        # open), so a workload faster than the first pause is still cut; then one kill every
        # 50-150 ms while the workers run. Bounded both ways.
        for _ in range(500):
            await kill()
            if kills:
                break
            await asyncio.sleep(0.01)
        first_kill.set()
        for _ in range(20):
            await asyncio.sleep(random.uniform(0.05, 0.15))
            if stop.is_set():
                return
            await kill()

    async def worker(w: int) -> None:
        await first_kill.wait()
        for n in range(runs_each):
            run = world.run(f"w{w}-r{n}", session=sid)
            start = await _until_done(victim.start_root_run, run.root_start(), errors)
            assert start.started.id == "1"
            for i in range(notes):
                note = world.note(run, f"n{i}")
                got = await _until_done(victim.append_run_record, note, errors)
                assert got.id == str(i + 2)
            end = run.terminal(RunStatus.COMPLETED, at=world.now())
            done = await _until_done(victim.record_run_terminal, end, errors)
            assert done.id == str(notes + 2)

    # A pool of one connection, shared by the workers: every kill hits someone.
    killing = asyncio.ensure_future(killer())
    try:
        await asyncio.gather(*(worker(w) for w in range(workers)))
    finally:
        stop.set()
        await killing
    assert kills > 0
    for rid in world.run_ids:
        log: list[Record] = await all_pages(victim.list_run_records, rid)
        keys = ["run_started", *(f"n{i}" for i in range(notes)), "run_completed"]
        assert [(r.id, r.event_key) for r in log] == [(str(i + 1), k) for i, k in enumerate(keys)]
    session_log: list[Record] = await all_pages(victim.list_session_run_records, sid)
    assert len(session_log) == workers * runs_each * (notes + 2)
    assert len({(r.run_id, r.id) for r in session_log}) == len(session_log)


async def test_a_connection_killed_while_idle_is_replaced_before_an_append(
    admin: psycopg.AsyncConnection[Any], app_name: str, victim: PostgresStore
) -> None:
    """[B3] the one-statement append never sends on a connection the server already closed."""
    world = World(victim)
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    await victim.append_run_record(world.note(run, "before"))
    await admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
        (app_name,),
    )
    deadline = asyncio.get_running_loop().time() + HANG_GUARD
    while asyncio.get_running_loop().time() < deadline:  # until the server has closed it
        cur = await admin.execute(_BACKENDS, (app_name,))
        if not await cur.fetchall():
            break
        await asyncio.sleep(0.01)

    result = await victim.append_run_record(world.note(run, "after"))

    assert (result.id, result.inserted) == ("3", True)
    log = await all_pages(victim.list_run_records, run.run.run_id)
    assert [r.event_key for r in log] == ["run_started", "before", "after"]
