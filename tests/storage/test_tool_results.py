"""Saved tool results on the durable backends: their lifetime, sealing, caps and audit.

The conformance suite proves the contract through the API; these look at the
stored rows, which the API never shows: a run's saved results are deleted by
the transaction that suspends or ends it, a purge leaves none, sealed bytes
hold no plaintext, and ``check`` reports a result that outlived its run.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import pytest_asyncio

from agentledger.errors import CorruptRecordError, SessionKeyErasedError, ValidationError
from agentledger.storage.conformance import World
from agentledger.storage.encryption import Encryption, Keyring
from agentledger.storage.integrity import tool_result_checksum
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.postgres import migrations as postgres_migrations
from agentledger.storage.postgres.check import check_invariants as check_postgres
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.sqlite import check_invariants as check_sqlite
from agentledger.storage.sqlite import schema as sqlite_schema
from tests.storage.postgres.server import create_database, drop_database

SECRET = b'{"content":"tool-result-plaintext-7731"}'

Rows = Callable[[str], Awaitable[list[tuple[str, str, bytes]]]]
"""Raw ``(run_id, call_key, data)`` rows of the tool results table, where run_id LIKE."""


class Backend:
    """One database, how to open stores on it and how to read its raw rows."""

    def __init__(self, kind: str, target: str) -> None:
        self.kind = kind
        self.target = target

    async def open(
        self, encryption: Encryption | None = None, max_payload_bytes: int = 16 << 20
    ) -> SQLiteStore | PostgresStore:
        if self.kind == "sqlite":
            return await SQLiteStore.open(
                self.target,
                durability="normal",
                encryption=encryption,
                max_payload_bytes=max_payload_bytes,
            )
        return await PostgresStore.open(
            self.target,
            min_size=1,
            max_size=2,
            encryption=encryption,
            max_payload_bytes=max_payload_bytes,
        )

    def rows(self, prefix: str) -> list[tuple[str, str, bytes]]:
        if self.kind == "sqlite":
            conn = sqlite3.connect(self.target)
            try:
                found = conn.execute(
                    "SELECT run_id, call_key, data FROM tool_results WHERE run_id LIKE ? "
                    "ORDER BY run_id, call_key",
                    (prefix + "%",),
                ).fetchall()
            finally:
                conn.close()
        else:
            with psycopg.connect(self.target, autocommit=True) as pg:
                found = pg.execute(
                    "SELECT run_id, call_key, data FROM agentledger_tool_results "
                    "WHERE run_id LIKE %s ORDER BY run_id, call_key",
                    (prefix + "%",),
                ).fetchall()
        return [(str(r), str(k), bytes(d)) for r, k, d in found]

    def execute(self, statement: str, params: tuple[object, ...]) -> None:
        if self.kind == "sqlite":
            conn = sqlite3.connect(self.target)
            try:
                conn.execute(statement.replace("%s", "?"), params)
                conn.commit()
            finally:
                conn.close()
        else:
            with psycopg.connect(self.target, autocommit=True) as pg:
                pg.execute(statement.replace("tool_results", "agentledger_tool_results"), params)

    async def backfill_tool_result_checksums(self) -> None:
        """Run the migration's backfill step over the whole table, as an upgrade does."""
        if self.kind == "sqlite":
            conn = sqlite3.connect(self.target)
            try:
                sqlite_schema._backfill_tool_result_checksums(conn)
                conn.commit()
            finally:
                conn.close()
            return
        async with await psycopg.AsyncConnection.connect(self.target, autocommit=True) as pg:
            await postgres_migrations._backfill_tool_result_checksums(pg)

    async def check(self) -> list[str]:
        if self.kind == "sqlite":
            return check_sqlite(self.target)
        return await check_postgres(self.target)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        yield Backend("sqlite", str(tmp_path / "ledger.db"))
        return
    dsn = create_database(request.getfixturevalue("postgres_dsn"), prefix="agentledger_tools")
    try:
        yield Backend("postgres", dsn)
    finally:
        drop_database(dsn)


@pytest_asyncio.fixture
async def plain(backend: Backend) -> AsyncIterator[SQLiteStore | PostgresStore]:
    store = await backend.open()
    yield store
    await store.close()


async def test_suspension_and_terminal_delete_the_runs_results_only(
    backend: Backend, plain: SQLiteStore | PostgresStore
) -> None:
    """The run's suspension or end deletes its saved results; a running run keeps its own."""
    world = World(plain)
    sid = await world.session("s")
    runs = {name: await world.root(name, session=sid) for name in ("done", "waiting", "busy")}
    for run in runs.values():
        for key in ("a", "b"):
            await plain.save_tool_result(run.run.run_id, key, SECRET)
    assert len(backend.rows(world.ns)) == 6
    await world.finish(runs["done"])
    await world.suspend(runs["waiting"])
    busy = runs["busy"].run.run_id
    assert backend.rows(world.ns) == [(busy, "a", SECRET), (busy, "b", SECRET)]
    assert await backend.check() == []


async def test_purge_leaves_no_saved_result(
    backend: Backend, plain: SQLiteStore | PostgresStore
) -> None:
    """A result left behind (as by an older version) goes with its session's purge."""
    world = World(plain)
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    await world.finish(run)
    backend.execute(
        "INSERT INTO tool_results (run_id, call_key, data, checksum) VALUES (%s, %s, %s, %s)",
        (run.run.run_id, "k", SECRET, tool_result_checksum(run.run.run_id, "k", SECRET)),
    )
    problems = await backend.check()
    assert problems == [f"saved tool result of a run that is not running: {run.run.run_id!r}"]
    await plain.end_session(sid, ended_at=world.now())
    await plain.purge_session(sid)
    assert backend.rows(world.ns) == []
    assert await backend.check() == []


async def test_a_result_over_the_payload_cap_is_refused(backend: Backend) -> None:
    """The store's ``max_payload_bytes`` bounds a saved result; nothing is kept."""
    store = await backend.open(max_payload_bytes=512)
    try:
        world = World(store)
        run_id = (await world.root("r", session=await world.session("s"))).run.run_id
        with pytest.raises(ValidationError) as caught:
            await store.save_tool_result(run_id, "k", b"x" * 513)
        assert caught.value.field == "data"
        assert "512 bytes" in str(caught.value.expected)
        assert backend.rows(world.ns) == []
        assert await store.save_tool_result(run_id, "k", b"x" * 512) == b"x" * 512
        assert backend.rows(world.ns) == [(run_id, "k", b"x" * 512)]
    finally:
        await store.close()


async def test_sealed_results_hold_no_plaintext_and_die_with_the_key(
    backend: Backend, tmp_path: Path
) -> None:
    """[A2] sealed under the session's key, bound to run and call; erasure makes it unreadable."""
    encryption = Encryption(Keyring.generate(), tmp_path / "keys.vault")
    store = await backend.open(encryption=encryption)
    try:
        world = World(store)
        sid = await world.session("s")
        run_id = (await world.root("r", session=sid)).run.run_id
        assert await store.save_tool_result(run_id, "a", SECRET) == SECRET
        assert await store.load_tool_result(run_id, "a") == SECRET
        ((_, _, sealed),) = backend.rows(world.ns)
        assert SECRET not in sealed
        assert len(sealed) > len(SECRET)
        # The sealed bytes of call "a" moved to call "b" (checksummed for "b", so
        # only the associated data can tell) do not open there.
        backend.execute(
            "INSERT INTO tool_results (run_id, call_key, data, checksum) VALUES (%s, %s, %s, %s)",
            (run_id, "b", sealed, tool_result_checksum(run_id, "b", sealed)),
        )
        with pytest.raises(CorruptRecordError):
            await store.load_tool_result(run_id, "b")
        await store.erase_session_keys(sid)
        with pytest.raises(SessionKeyErasedError) as caught:
            await store.load_tool_result(run_id, "a")
        assert caught.value.session_id == sid
    finally:
        await store.close()


async def test_a_damaged_saved_result_is_corruption_never_an_outcome(
    backend: Backend, plain: SQLiteStore | PostgresStore
) -> None:
    """[J1] a saved result whose bytes changed behind the store (still valid JSON, so
    the tool call could not tell) is refused on load, on a retried save and by check."""
    world = World(plain)
    run_id = (await world.root("r", session=await world.session("s"))).run.run_id
    await plain.save_tool_result(run_id, "a", SECRET)
    backend.execute(
        "UPDATE tool_results SET data = %s WHERE run_id = %s AND call_key = %s",
        (SECRET.replace(b"7731", b"7732"), run_id, "a"),
    )
    with pytest.raises(CorruptRecordError) as loaded:
        await plain.load_tool_result(run_id, "a")
    assert (loaded.value.run_id, loaded.value.record_id) == (run_id, "tool_result:a")
    with pytest.raises(CorruptRecordError) as saved:
        await plain.save_tool_result(run_id, "a", SECRET)
    assert saved.value.record_id == "tool_result:a"
    assert await backend.check() == [str(loaded.value)]


async def test_the_migration_checksums_results_saved_before_it(
    backend: Backend, plain: SQLiteStore | PostgresStore
) -> None:
    """Results saved by the previous version (no checksum yet) verify after the backfill."""
    world = World(plain)
    run_id = (await world.root("r", session=await world.session("s"))).run.run_id
    await plain.save_tool_result(run_id, "a", SECRET)
    backend.execute("UPDATE tool_results SET checksum = -1 WHERE run_id = %s", (run_id,))
    with pytest.raises(CorruptRecordError):
        await plain.load_tool_result(run_id, "a")
    await backend.backfill_tool_result_checksums()
    assert await plain.load_tool_result(run_id, "a") == SECRET
    assert await backend.check() == []
