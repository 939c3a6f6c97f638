"""Schema migrations: recorded, atomic, read-only inspection, and a real version-1 file."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from agentledger.errors import (
    CorruptRecordError,
    RunConflictError,
    SessionConflictError,
    SessionPurgedError,
)
from agentledger.storage import PurgeReceipt, RecordBuilder, RunStart, RunStatus, SessionStatus
from agentledger.storage.conformance import World
from agentledger.storage.receipts import unknown_receipt
from agentledger.storage.sqlite import LATEST_VERSION, MIGRATIONS, SQLiteStore, check_invariants
from agentledger.storage.sqlite.schema import Migration, applied, check_migrations, migrate, pending

FIXTURE = Path(__file__).with_name("fixtures") / "ledger_v1.db"
AT = datetime(2026, 2, 1, tzinfo=UTC)


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


@pytest.fixture
def v1_copy(tmp_path: Path) -> Path:
    """The committed version-1 database, copied so tests can migrate it."""
    target = tmp_path / "ledger_v1.db"
    shutil.copyfile(FIXTURE, target)
    return target


def test_migrations_are_numbered_without_gaps_and_named_once() -> None:
    check_migrations(MIGRATIONS)
    assert [m.version for m in MIGRATIONS] == list(range(1, LATEST_VERSION + 1))
    assert LATEST_VERSION >= 2


def test_a_bad_migration_list_is_rejected() -> None:
    base = MIGRATIONS[0]
    with pytest.raises(ValueError, match="without gaps"):
        check_migrations([base, Migration(version=3, name="skips", statements=())])
    with pytest.raises(ValueError, match=r"duplicate migration names: \['base_schema'\]"):
        check_migrations([base, Migration(version=2, name="base_schema", statements=())])


def test_the_fixture_is_at_version_1_and_pending_never_writes(v1_copy: Path) -> None:
    before = v1_copy.read_bytes()
    conn = _connect(v1_copy)
    try:
        assert applied(conn) == [(1, "base_schema")]
        assert [m.name for m in pending(conn)] == [m.name for m in MIGRATIONS[1:]]
        assert conn.total_changes == 0
    finally:
        conn.close()
    assert v1_copy.read_bytes() == before


def test_a_new_database_has_everything_pending_and_pending_creates_nothing(
    tmp_path: Path,
) -> None:
    conn = _connect(tmp_path / "new.db")
    try:
        assert pending(conn) == list(MIGRATIONS)
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)
    finally:
        conn.close()


def test_opening_the_v1_fixture_migrates_it_and_keeps_its_data(v1_copy: Path) -> None:
    asyncio.run(_open_v1_and_use_it(v1_copy))
    conn = _connect(v1_copy)
    try:
        assert applied(conn) == [(m.version, m.name) for m in MIGRATIONS]
        assert pending(conn) == []
        indexes = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        assert "runs_by_session_status" in indexes
    finally:
        conn.close()
    assert check_invariants(v1_copy) == []


async def _open_v1_and_use_it(path: Path) -> None:
    async with await SQLiteStore.open(path) as store:
        listed = (await store.list_sessions()).sessions  # [D6] newest first
        assert [(s.id, s.status, s.labels) for s in listed] == [
            ("s-ended", SessionStatus.ENDED, {}),
            ("s-active", SessionStatus.ACTIVE, {}),
        ]
        root = await store.load_run("r-root")
        assert root.status is RunStatus.RUNNING
        assert root.labels == {"tier": "gold"}
        assert root.started_at == datetime(2026, 1, 1, 0, 0, 0, 10_000, tzinfo=UTC)
        assert root.started_at.tzinfo is UTC
        page = await store.list_run_records("r-root", limit=100)
        assert [(r.id, r.type) for r in page.records] == [
            ("1", "run_started"),
            ("2", "planner_note"),
            ("3", "planner_note"),
            ("4", "planner_note"),
            ("5", "child_run_linked"),
        ]
        assert page.records[1].payload == b'{"step": 0}'
        assert (await store.load_run("r-child")).status is RunStatus.COMPLETED
        assert (await store.load_run_suspension("r-waiting")).data == b"\x00state\xff"
        late = await store.load_run("r-late")
        assert (late.status, late.cancellation_reason) == (RunStatus.CANCELED, "session_ended")
        assert (await store.load_run("r-canceled")).cancellation_reason == "user"
        assert (await store.load_run("r-solo")).session_id == ""
        with pytest.raises(SessionPurgedError):
            await store.load_run("r-gone")
        with pytest.raises(SessionPurgedError):
            await store.create_session("s-purged", created_at=AT)
        session_log = await store.list_session_run_records("s-active", limit=100)
        assert [r.run_id for r in session_log.records][:2] == ["r-root", "r-root"]

        # The migrated file takes new writes where version 1 left off.
        builder = RecordBuilder(
            RunStart(run_id="r-root", agent_id="agent", session_id="s-active", started_at=AT)
        )
        note = builder.record("planner_note", b"{}", event_key="after-migration", at=AT)
        assert (await store.append_run_record(note)).id == "6"
        successor = RecordBuilder(
            RunStart(
                run_id="r-next",
                agent_id="agent",
                session_id="s-active",
                predecessor_run_id="r-waiting",
                started_at=AT,
            )
        )
        assert (await store.start_root_run(successor.root_start())).started.inserted
        assert (await store.load_run("r-waiting")).successor_run_id == "r-next"


def test_a_version_2_file_gains_session_labels(v1_copy: Path) -> None:
    """Migration 3 from version 2: existing sessions get no labels, new ones keep theirs [D6]."""
    conn = _connect(v1_copy)
    try:
        migrate(conn, upto=2)
        assert pending(conn)[0].name == "session_labels"
        columns = [row[1] for row in conn.execute("PRAGMA table_info(sessions)")]
        assert "labels" not in columns
    finally:
        conn.close()
    asyncio.run(_label_the_v2_file(v1_copy))
    conn = _connect(v1_copy)
    try:
        assert (3, "session_labels") in applied(conn)
        plan = " ".join(
            str(row[-1])
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT id FROM sessions ORDER BY created_at DESC, id DESC"
            )
        )
        assert "sessions_newest_first" in plan
    finally:
        conn.close()
    assert check_invariants(v1_copy) == []


async def _label_the_v2_file(path: Path) -> None:
    async with await SQLiteStore.open(path) as store:
        assert (await store.load_session("s-active")).labels == {}
        assert await store.create_session("s-active") == await store.load_session("s-active")
        with pytest.raises(SessionConflictError):
            await store.create_session("s-active", labels={"tenant": "acme"})
        await store.create_session("s-new", created_at=AT, labels={"tenant": "acme"})
        page = await store.list_sessions(labels={"tenant": "acme"})
        assert [(s.id, s.labels) for s in page.sessions] == [("s-new", {"tenant": "acme"})]
        everything = await store.list_sessions(limit=1)
        rest = await store.list_sessions(cursor=everything.next_cursor, limit=5)
        ids = [s.id for s in everything.sessions + rest.sessions]
        assert ids == ["s-new", "s-ended", "s-active"]


def test_each_migration_commits_with_its_record_or_not_at_all(tmp_path: Path) -> None:
    conn = _connect(tmp_path / "atomic.db")
    broken = Migration(
        version=LATEST_VERSION + 1,
        name="half_done",
        statements=("CREATE TABLE extra (a INTEGER) STRICT", "CREATE INDEX nope ON missing (a)"),
    )
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            migrate(conn, [*MIGRATIONS, broken])
        assert applied(conn) == [(m.version, m.name) for m in MIGRATIONS]
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        assert "extra" not in tables
        assert not conn.in_transaction
    finally:
        conn.close()


def test_migrate_applies_each_migration_once(tmp_path: Path) -> None:
    conn = _connect(tmp_path / "once.db")
    try:
        assert migrate(conn, upto=1) == [MIGRATIONS[0]]
        assert migrate(conn) == list(MIGRATIONS[1:])
        assert migrate(conn) == []
        rows = conn.execute("SELECT version, applied_at FROM _agentledger_migrations").fetchall()
        assert [version for version, _ in rows] == [m.version for m in MIGRATIONS]
        assert all(applied_at > 1_700_000_000_000 for _, applied_at in rows)  # ms since epoch
    finally:
        conn.close()


async def test_handles_opening_a_new_file_together_migrate_it_once(tmp_path: Path) -> None:
    path = tmp_path / "together.db"
    stores = await asyncio.gather(*(SQLiteStore.open(path) for _ in range(4)))
    try:
        await stores[0].create_session("s", created_at=AT)
        assert (await stores[3].load_session("s")).id == "s"
    finally:
        for store in stores:
            await store.close()
    conn = _connect(path)
    try:
        assert applied(conn) == [(m.version, m.name) for m in MIGRATIONS]
    finally:
        conn.close()


def test_a_version_4_file_gains_checksums_of_every_existing_record(v1_copy: Path) -> None:
    """Migration 5: existing records are checksummed as stored, then verified on read [J1]."""
    conn = _connect(v1_copy)
    try:
        migrate(conn, upto=4)
        assert "checksum" not in [row[1] for row in conn.execute("PRAGMA table_info(records)")]
        count = conn.execute("SELECT count(*) FROM records").fetchone()[0]
        assert count > 0
    finally:
        conn.close()
    asyncio.run(_read_every_run(v1_copy, count))
    conn = _connect(v1_copy)
    try:
        assert (5, "record_checksums") in applied(conn)
        assert conn.execute("SELECT count(*) FROM records WHERE checksum = -1").fetchone() == (0,)
        conn.execute("UPDATE records SET payload = X'7B2278223AFFFE7D' WHERE seq = 1")
    finally:
        conn.close()
    with pytest.raises(CorruptRecordError, match="checksum mismatch"):
        asyncio.run(_read_every_run(v1_copy, count))


async def _read_every_run(path: Path, count: int) -> None:
    conn = _connect(path)
    try:
        run_ids = [run_id for (run_id,) in conn.execute("SELECT run_id FROM runs")]
    finally:
        conn.close()
    async with await SQLiteStore.open(path) as store:
        seen = 0
        for run_id in run_ids:
            page = await store.list_run_records(run_id, limit=1000)
            seen += len(page.records)
        assert seen == count


def test_a_version_5_tombstone_gains_an_unknown_receipt(v1_copy: Path) -> None:
    """Migration 6 [D7]: a tombstone from before receipts reads back as an unknown receipt
    (no counts, digest ""); a purge after it keeps its real receipt; a damaged one is corrupt."""
    conn = _connect(v1_copy)
    try:
        migrate(conn, upto=5)
        conn.execute("INSERT INTO session_tombstones (id) VALUES ('gone-before')")
    finally:
        conn.close()

    async def purge() -> tuple[PurgeReceipt, PurgeReceipt, PurgeReceipt]:
        async with await SQLiteStore.open(v1_copy) as store:
            old = await store.purge_session("gone-before")
            with pytest.raises(SessionPurgedError):
                await store.load_session("gone-before")
            await store.create_session("fresh", created_at=AT)
            await store.end_session("fresh", ended_at=AT)
            new = await store.purge_session("fresh")
            return old, new, await store.purge_session("fresh")

    old, new, again = asyncio.run(purge())
    assert old == unknown_receipt("gone-before")
    assert not old.known
    assert (old.runs, old.records, old.checkpoints, old.bytes, old.purged_at) == (None,) * 5
    assert new.known
    assert again == new
    assert (new.runs, new.records, new.checkpoints, new.bytes) == (0, 0, 0, 0)
    conn = _connect(v1_copy)
    try:
        assert (6, "purge_receipts") in applied(conn)
        conn.execute("UPDATE session_tombstones SET receipt = '{\"session_id\": 1}'")
    finally:
        conn.close()

    async def purge_damaged() -> None:
        async with await SQLiteStore.open(v1_copy) as store:
            await store.purge_session("fresh")

    with pytest.raises(CorruptRecordError, match="purge receipt of session 'fresh'"):
        asyncio.run(purge_damaged())


def test_a_version_12_file_gains_the_label_index_of_its_sessions(v1_copy: Path) -> None:
    """Migration 13 [D6]: sessions stored at version 12 get their label index rows (status and
    time included), so label-filtered pages list them; ending and purging keep it exact."""
    conn = _connect(v1_copy)
    try:
        migrate(conn, upto=12)
        conn.execute(
            "INSERT INTO sessions (id, status, created_at, ended_at, labels) VALUES "
            '(\'a\', \'active\', 10, NULL, \'{"tenant":"acme","tier":"gold"}\'), '
            "('b', 'ended', 11, 12, '{\"tenant\":\"acme\"}')"
        )
    finally:
        conn.close()

    async def use() -> None:
        async with await SQLiteStore.open(v1_copy) as store:
            acme = await store.list_sessions(labels={"tenant": "acme"})
            assert [s.id for s in acme.sessions] == ["b", "a"]
            ended = await store.list_sessions([SessionStatus.ENDED], labels={"tenant": "acme"})
            assert [s.id for s in ended.sessions] == ["b"]
            gold = await store.list_sessions(labels={"tier": "gold", "tenant": "acme"})
            assert [s.id for s in gold.sessions] == ["a"]
            await store.end_session("a", ended_at=AT)
            ended = await store.list_sessions([SessionStatus.ENDED], labels={"tier": "gold"})
            assert [s.id for s in ended.sessions] == ["a"]
            await store.purge_session("b")

    asyncio.run(use())
    conn = _connect(v1_copy)
    try:
        assert (13, "session_label_index") in applied(conn)
        rows = conn.execute(
            "SELECT session_id, key, value, status, created_at FROM session_labels ORDER BY 1, 2"
        ).fetchall()
        assert rows == [("a", "tenant", "acme", "ended", 10), ("a", "tier", "gold", "ended", 10)]
    finally:
        conn.close()
    assert check_invariants(v1_copy) == []


def test_a_version_13_file_keeps_no_count_of_its_starts_records(v1_copy: Path) -> None:
    """Migration 14 [L10]: a run stored before it has an unknown count (-1), not 0."""
    conn = _connect(v1_copy)
    try:
        migrate(conn, upto=13)
        runs = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        assert runs > 0
        migrate(conn)
        assert conn.execute("SELECT DISTINCT start_records FROM runs").fetchall() == [(-1,)]
    finally:
        conn.close()


async def test_a_start_stored_without_its_count_is_retried_as_far_as_its_ids_tell(
    tmp_path: Path,
) -> None:
    """A run whose count is unknown (stored before migration 14): its retry must still carry
    records from id 2 on, in order; a leading part of them cannot be told from all."""
    db = tmp_path / "old.db"
    async with await SQLiteStore.open(db) as store:
        world = World(store)
        run = world.run("r", session=await world.session("s"))
        notes = (world.note(run, "a"), world.note(run, "b"))
        cmd = msgspec.structs.replace(run.root_start(), records=notes)
        await store.start_root_run(cmd)
    conn = _connect(db)
    try:
        conn.execute("UPDATE runs SET start_records = -1")  # as migration 14 leaves older runs
    finally:
        conn.close()
    async with await SQLiteStore.open(db) as store:
        again = await store.start_root_run(cmd)
        assert [(r.id, r.inserted) for r in again.records] == [("2", False), ("3", False)]
        part = await store.start_root_run(msgspec.structs.replace(cmd, records=notes[:1]))
        assert [r.id for r in part.records] == ["2"]
        for records in (notes[1:], notes[::-1], (*notes, world.note(run, "c"))):
            with pytest.raises(RunConflictError):
                await store.start_root_run(msgspec.structs.replace(cmd, records=records))
