"""Opening and closing SQLiteStore: pragmas, bad input, busy locks, closed handles."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

import agentledger.storage.sqlite as sqlite_backend
from agentledger.errors import (
    CorruptRecordError,
    SchemaVersionError,
    SessionNotFoundError,
    StoreClosedError,
    TransientError,
    ValidationError,
)
from agentledger.storage import SessionAdmin, SessionStatus, Store
from agentledger.storage.conformance import World
from agentledger.storage.sqlite import LATEST_VERSION, SQLiteStore, default_path
from agentledger.storage.sqlite.group import QUEUE
from agentledger.target import Target
from tests.conditions import HANG_GUARD, until

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _snapshot(directory: Path) -> dict[str, bytes]:
    """Every file in ``directory`` with its bytes: equal snapshots mean nothing was written."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


async def _make_db(path: Path) -> None:
    async with await SQLiteStore.open(path) as store:
        await store.create_session("s", created_at=AT)


async def _session_status(path: Path, session_id: str) -> SessionStatus:
    async with await SQLiteStore.open(path) as store:
        return await store.load_session_status(session_id)


async def _pragma(store: SQLiteStore, name: str, *, small: bool = False) -> object:
    """A pragma as the store's write connection sees it (a ``small`` operation's, maybe inline)."""
    writer = store._writer
    assert writer is not None

    def pragma(c: sqlite3.Connection, _: object, shared: bool) -> object:
        return c.execute(f"PRAGMA {name}").fetchone()[0]

    if small:
        result = writer.run_inline(pragma)
        if result is not QUEUE:
            return result
    return await writer.submit(pragma)


def test_public_names() -> None:
    assert sorted(sqlite_backend.__all__) == [
        "Durability",
        "LATEST_VERSION",
        "MIGRATIONS",
        "Migration",
        "SQLiteStore",
        "check_invariants",
        "default_path",
    ]


async def test_implements_both_protocols(store: SQLiteStore) -> None:
    assert isinstance(store, Store)
    assert isinstance(store, SessionAdmin)


# durability and pragmas ------------------------------------------------------


async def test_default_durability_is_full_in_wal_mode(db_path: Path) -> None:
    async with await SQLiteStore.open(db_path) as store:
        assert await _pragma(store, "synchronous") == 2  # FULL
        assert await _pragma(store, "journal_mode") == "wal"
        assert await _pragma(store, "busy_timeout") == 5000


async def test_normal_durability(db_path: Path) -> None:
    async with await SQLiteStore.open(db_path, durability="normal", busy_timeout=0.25) as store:
        assert await _pragma(store, "synchronous") == 1  # NORMAL
        assert await _pragma(store, "busy_timeout") == 250  # not small: the writer thread's
        # Run on the caller's thread, an operation never waits for the lock ...
        assert await _pragma(store, "busy_timeout", small=True) == 0
        # ... one that finds it taken waits on the writer thread, as configured.
        blocker = sqlite3.connect(db_path, isolation_level=None)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            waiting = asyncio.ensure_future(_pragma(store, "busy_timeout", small=True))
            await asyncio.sleep(0.1)
            blocker.execute("ROLLBACK")
        finally:
            blocker.close()
        assert await waiting == 250


@pytest.mark.parametrize("durability", ["FULL", "off", "", None, 2])
def test_unknown_durability_is_refused(db_path: Path, durability: object) -> None:
    with pytest.raises(ValidationError) as caught:
        asyncio.run(SQLiteStore.open(db_path, durability=durability))  # type: ignore[arg-type]
    assert caught.value.field == "durability"
    assert not db_path.exists()


@pytest.mark.parametrize("busy_timeout", [-1, "5", None, True, float("nan")])
def test_bad_busy_timeout_is_refused(db_path: Path, busy_timeout: object) -> None:
    with pytest.raises(ValidationError) as caught:
        asyncio.run(SQLiteStore.open(db_path, busy_timeout=busy_timeout))  # type: ignore[arg-type]
    assert caught.value.field == "busy_timeout"


async def test_wal_is_persistent_in_the_file(db_path: Path) -> None:
    await _make_db(db_path)
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


# default path ------------------------------------------------------------------


def test_default_path_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLEDGER_DB", "/srv/ledger/agents.db")
    assert default_path() == "/srv/ledger/agents.db"


@pytest.mark.parametrize("value", [None, ""])
def test_default_path_falls_back_to_the_working_directory(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("AGENTLEDGER_DB", raising=False)
    else:
        monkeypatch.setenv("AGENTLEDGER_DB", value)
    assert default_path() == os.path.join(".", "agentledger.db")


async def test_default_path_opens_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTLEDGER_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    async with await SQLiteStore.open(default_path()) as store:
        await store.create_session("s", created_at=AT)
    assert (tmp_path / "agentledger.db").is_file()


# bad input: clear errors, nothing written ---------------------------------------


def test_a_directory_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "dir.db"
    target.mkdir()
    with pytest.raises(ValidationError) as caught:
        asyncio.run(SQLiteStore.open(target))
    assert caught.value.field == "path"
    assert "directory" in str(caught.value)
    assert list(target.iterdir()) == []
    assert [p.name for p in tmp_path.iterdir()] == ["dir.db"]


def test_a_read_only_file_is_refused_and_left_unchanged(db_path: Path) -> None:
    asyncio.run(_make_db(db_path))
    before = _snapshot(db_path.parent)
    db_path.chmod(0o444)
    try:
        with pytest.raises(ValidationError) as caught:
            asyncio.run(SQLiteStore.open(db_path))
        assert caught.value.field == "path"
        assert "writable" in str(caught.value)
        assert _snapshot(db_path.parent) == before
    finally:
        db_path.chmod(0o644)


def test_a_file_that_is_not_a_database_is_refused_and_left_unchanged(db_path: Path) -> None:
    db_path.write_bytes(b"these are not the pages you are looking for\n" * 200)
    before = _snapshot(db_path.parent)
    with pytest.raises(ValidationError) as caught:
        asyncio.run(SQLiteStore.open(db_path))
    assert caught.value.field == "path"
    assert "SQLite database" in str(caught.value)
    assert _snapshot(db_path.parent) == before


async def test_a_database_from_a_newer_schema_is_refused_and_left_unchanged(
    db_path: Path,
) -> None:
    await _make_db(db_path)
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute(
        "INSERT INTO _agentledger_migrations (version, name, applied_at) VALUES (?, ?, 0)",
        (LATEST_VERSION + 1, "from_the_future"),
    )
    conn.close()
    before = _snapshot(db_path.parent)
    newer = (
        f"this database was written by a newer agentledger (schema {LATEST_VERSION + 1}, "
        f"this one knows {LATEST_VERSION}); upgrade agentledger"
    )
    with pytest.raises(SchemaVersionError) as caught:
        await SQLiteStore.open(db_path)
    assert (caught.value.current, caught.value.latest) == (LATEST_VERSION + 1, LATEST_VERSION)
    assert (caught.value.field, caught.value.got) == ("schema_version", LATEST_VERSION + 1)
    assert str(caught.value) == newer
    with pytest.raises(SchemaVersionError) as read_only:
        await SQLiteStore.open_read_only(db_path)
    assert str(read_only.value) == newer
    # What the command line and workers open: no "-1 migration pending ... migrate" advice.
    for create in (False, True):
        with pytest.raises(SchemaVersionError) as target:
            await Target.parse(str(db_path)).open(create=create)
        assert str(target.value) == f"{db_path}: {newer}"
    assert _snapshot(db_path.parent) == before


async def test_a_database_with_a_foreign_migration_history_is_refused(db_path: Path) -> None:
    await _make_db(db_path)
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("UPDATE _agentledger_migrations SET name = 'somebody_else' WHERE version = 1")
    conn.close()
    before = _snapshot(db_path.parent)
    with pytest.raises(ValidationError) as caught:
        await SQLiteStore.open(db_path)
    assert caught.value.field == "schema_version"
    assert caught.value.got == "somebody_else"
    assert _snapshot(db_path.parent) == before


def test_a_missing_directory_is_refused_and_not_created(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as caught:
        asyncio.run(SQLiteStore.open(tmp_path / "missing" / "ledger.db"))
    assert caught.value.field == "path"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", ["", ":memory:", "file:ledger.db?mode=memory"])
async def test_non_file_paths_are_refused(path: str) -> None:
    with pytest.raises(ValidationError) as caught:
        await SQLiteStore.open(path)
    assert caught.value.field == "path"


def test_an_empty_file_becomes_a_database(db_path: Path) -> None:
    db_path.touch()
    asyncio.run(_make_db(db_path))
    assert asyncio.run(_session_status(db_path, "s")) is SessionStatus.ACTIVE


# busy locks -------------------------------------------------------------------


def _hold_write_lock(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("BEGIN IMMEDIATE")
    return conn


async def test_a_lock_held_past_the_busy_timeout_is_a_transient_error(db_path: Path) -> None:
    await _make_db(db_path)
    async with await SQLiteStore.open(db_path, busy_timeout=0.2) as store:
        holder = _hold_write_lock(db_path)
        try:
            started = time.monotonic()
            with pytest.raises(TransientError) as caught:
                await store.create_session("late", created_at=AT)
            assert time.monotonic() - started >= 0.19
            assert caught.value.operation == "create_session"
            assert "busy" in str(caught.value)
            assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
        finally:
            holder.rollback()
            holder.close()
        # Nothing was written, and the handle works again once the lock is free.
        with pytest.raises(SessionNotFoundError):
            await store.load_session("late")
        await store.create_session("late", created_at=AT)


async def test_a_lock_released_within_the_busy_timeout_is_waited_for(db_path: Path) -> None:
    await _make_db(db_path)
    async with await SQLiteStore.open(db_path, busy_timeout=HANG_GUARD) as store:
        holder = _hold_write_lock(db_path)
        release = threading.Timer(0.3, holder.rollback)
        release.start()
        try:
            session = await store.create_session("patient", created_at=AT)
        finally:
            release.join()
            holder.close()
        assert session.id == "patient"


async def _read_five_times(store: SQLiteStore) -> None:
    for _ in range(5):
        assert (await store.load_session("s")).id == "s"
        assert [s.id for s in (await store.list_sessions()).sessions] == ["s"]


async def test_readers_do_not_wait_behind_a_writer(db_path: Path) -> None:
    await _make_db(db_path)
    # The writer waits for the lock as long as the test may take (a hang guard, not a measure):
    # a read that queued behind it would hang until the holder lets go, below.
    async with await SQLiteStore.open(db_path, busy_timeout=HANG_GUARD) as store:
        holder = _hold_write_lock(db_path)
        try:
            blocked = asyncio.ensure_future(store.create_session("queued", created_at=AT))
            await until(lambda: store._writer is not None and store._writer._outstanding == 1,
                        "the store's writer waits on the lock")  # fmt: skip
            reads = asyncio.ensure_future(_read_five_times(store))
            await until(lambda: reads.done() or blocked.done(), "the reads or the write end")
            assert not blocked.done()
            reads.result()
        finally:
            holder.rollback()
            holder.close()
        assert (await blocked).id == "queued"


# closed handles and raw errors ----------------------------------------------------


async def test_close_is_idempotent_and_refuses_later_calls(db_path: Path) -> None:
    store = await SQLiteStore.open(db_path)
    await store.close()
    await store.close()
    assert "closed" in repr(store)
    with pytest.raises(StoreClosedError) as caught:
        await store.create_session("s", created_at=AT)
    assert caught.value.backend == "sqlite"
    with pytest.raises(StoreClosedError):
        await store.load_session("s")


async def test_close_finishes_queued_writes(db_path: Path) -> None:
    store = await SQLiteStore.open(db_path, durability="normal")
    writes = [
        asyncio.ensure_future(store.create_session(f"s{i}", created_at=AT)) for i in range(20)
    ]
    await asyncio.sleep(0)
    await store.close()
    assert [w.result().id for w in writes] == [f"s{i}" for i in range(20)]
    async with await SQLiteStore.open(db_path) as again:
        assert len((await again.list_sessions()).sessions) == 20


async def test_a_damaged_schema_is_corruption_not_a_raw_error(store: SQLiteStore) -> None:
    world = World(store)
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    conn = sqlite3.connect(store.path, isolation_level=None)
    conn.execute("DROP TABLE records")
    conn.close()
    with pytest.raises(CorruptRecordError) as caught:
        await store.list_run_records(run.run.run_id)
    assert "no such table" in str(caught.value)
    with pytest.raises(CorruptRecordError):
        await store.append_run_record(world.note(run, "n1"))


async def test_a_value_over_the_size_limit_is_a_validation_error(store: SQLiteStore) -> None:
    world = World(store)
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    await store._writer.submit(lambda c, _, shared: c.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1000))
    big = world.note(run, "big", b'{"text": "' + b"x" * 2000 + b'"}')
    with pytest.raises(ValidationError) as caught:
        await store.append_run_record(big)
    assert caught.value.field == "append_run_record"
    assert (await store.load_run(run.run.run_id)).status.value == "running"


async def test_close_leaves_every_commit_in_the_database_file(tmp_path: Path) -> None:
    """Closed, the only handle leaves no WAL: the database file alone holds every commit,
    so a copy of it is a whole backup. Its reader threads close their connections all at
    once (each may find the others open and skip the WAL's cleanup); the writer's closes
    after them, alone."""
    for round_ in range(16):
        db = tmp_path / f"ledger-{round_}.db"
        store = await SQLiteStore.open(db, inline=False)
        world = World(store)
        run = await world.root("r", session=await world.session("s"))
        await store.append_run_records([world.note(run, f"k{i}") for i in range(20)])
        rid = run.run.run_id
        await asyncio.gather(*(store.list_run_records(rid, limit=5) for _ in range(8)))
        await store.close()
        assert not await asyncio.to_thread(Path(f"{db}-wal").exists)
        main_file = sqlite3.connect(f"file:{db}?immutable=1", uri=True)
        try:
            (count,) = main_file.execute("SELECT count(*) FROM records").fetchone()
        finally:
            main_file.close()
        assert count == 21
