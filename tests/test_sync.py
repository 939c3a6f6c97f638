"""The blocking facade ``agentledger.sync`` on real SQLite and PostgreSQL stores.

Everything a host does from code that is not async: open a store, create, end
and purge sessions, list and load, and rebuild a run's transcript; typed errors
come through unchanged, and threads may share one facade.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentledger import sync
from agentledger.errors import (
    SessionKeyErasedError,
    SessionNotFoundError,
    SessionPurgedError,
    StoreClosedError,
    ValidationError,
)
from agentledger.storage import MemoryStore, RecordBuilder, RunStart, RunStatus, SessionStatus
from agentledger.storage.encryption import Encryption, Keyring
from agentledger.storage.payloads import TRANSCRIPT_APPENDED, TRANSCRIPT_SEEDED
from agentledger.transcript import Message, TextPart, encode_messages
from tests.storage.postgres.server import create_database, drop_database

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture(params=["sqlite", "postgres"])
def opened(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], sync.SyncStore]]:
    """Opens facades on one database of each backend (the dsn fixture only when needed)."""
    if request.param == "sqlite":
        path = tmp_path / "ledger.db"

        def open_one() -> sync.SyncStore:
            return sync.open_sqlite(path)
    else:
        dsn: str = request.getfixturevalue("postgres_dsn")

        def open_one() -> sync.SyncStore:
            return sync.open_postgres(dsn, min_size=1, max_size=4)

    stores: list[sync.SyncStore] = []

    def tracked() -> sync.SyncStore:
        stores.append(open_one())
        return stores[-1]

    yield tracked
    for store in stores:
        store.close()


def _run_with_transcript(store: sync.SyncStore, session_id: str, run_id: str) -> list[Message]:
    """Start a run and record a transcript in its log, through the wrapped async store."""
    history = [Message(role="user", parts=(TextPart(text="Hi"),))]
    new = [Message(role="assistant", parts=(TextPart(text="Hello!"),))]
    run = RecordBuilder(
        RunStart(run_id=run_id, agent_id="chat", session_id=session_id, started_at=at(1))
    )
    store.run(store.store.start_root_run(run.root_start()))
    seeded = run.record(TRANSCRIPT_SEEDED, encode_messages(history), event_key="seed", at=at(2))
    appended = run.record(TRANSCRIPT_APPENDED, encode_messages(new), event_key="turn", at=at(3))
    store.run(store.store.append_run_record(seeded))
    store.run(store.store.append_run_record(appended))
    store.run(store.store.record_run_terminal(run.terminal(RunStatus.COMPLETED, at=at(4))))
    return history + new


def test_a_host_session_from_start_to_purge(opened: Callable[[], sync.SyncStore]) -> None:
    with opened() as store:
        session = store.create_session("sync-s1", created_at=at(0))
        assert (session.id, session.status) == ("sync-s1", SessionStatus.ACTIVE)
        assert store.create_session("sync-s1", created_at=at(0)) == session  # [D4] idempotent
        messages = _run_with_transcript(store, "sync-s1", "sync-r1")

        # A second facade on the same database sees it all.
        other = opened()
        assert [s.id for s in other.list_sessions(limit=1000).sessions if s.id == "sync-s1"] == [
            "sync-s1"
        ]
        assert [r.run_id for r in other.list_runs_by_session("sync-s1")] == ["sync-r1"]
        assert other.load_run("sync-r1").status is RunStatus.COMPLETED
        page = other.list_run_records("sync-r1", limit=2)
        assert [r.id for r in page.records] == ["1", "2"]
        assert page.next_cursor
        assert other.transcript("sync-r1") == messages
        assert other.load_session_status("sync-s1") is SessionStatus.ACTIVE
        found = other.search("hello", session_id="sync-s1")  # [G1]
        assert [(h.record_id, h.snippet) for h in found.hits] == [("3", "**Hello**!")]

        ended = store.end_session("sync-s1", ended_at=at(5))
        assert ended.status is SessionStatus.ENDED
        assert other.load_session("sync-s1") == ended
        receipt = store.purge_session("sync-s1")
        assert (receipt.session_id, receipt.runs) == ("sync-s1", 1)
        assert receipt.search_entries == 2  # both messages, indexed
        assert other.purge_session("sync-s1") == receipt  # [D7] kept with the tombstone
        with pytest.raises(SessionPurgedError) as purged:
            other.create_session("sync-s1", created_at=at(6))
        assert purged.value.session_id == "sync-s1"


def test_errors_come_through_typed_and_change_nothing(
    opened: Callable[[], sync.SyncStore],
) -> None:
    store = opened()
    with pytest.raises(SessionNotFoundError) as missing:
        store.end_session("sync-nobody", ended_at=at(0))
    assert missing.value.session_id == "sync-nobody"
    assert [s.id for s in store.list_sessions(limit=1000).sessions if s.id == "sync-nobody"] == []


def test_threads_share_one_facade(opened: Callable[[], sync.SyncStore]) -> None:
    """Eight threads create sessions through one facade; all land, none twice."""
    store = opened()
    errors: list[BaseException] = []

    def create(i: int) -> None:
        try:
            for n in range(5):
                store.create_session(f"sync-t{i}-{n}", created_at=at(n))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    ids = [s.id for s in store.list_sessions(limit=1000).sessions if s.id.startswith("sync-t")]
    assert sorted(ids) == sorted(f"sync-t{i}-{n}" for i in range(8) for n in range(5))


def test_any_store_opens_through_its_opener() -> None:
    """``SyncStore.open`` takes any opener, sync (MemoryStore) or async; close is idempotent."""
    store = sync.SyncStore.open(MemoryStore)
    assert isinstance(store.store, MemoryStore)
    store.create_session("m", created_at=at(0))
    assert [s.id for s in store.list_sessions().sessions] == ["m"]
    store.close()
    store.close()
    with pytest.raises(StoreClosedError) as refused:
        store.list_sessions()
    assert refused.value.backend == "memory"


def test_a_failed_open_leaves_no_loop_thread(tmp_path: Path) -> None:
    before = threading.active_count()
    with pytest.raises(Exception, match="directory"):
        sync.open_sqlite(tmp_path / "missing" / "ledger.db")
    assert threading.active_count() == before


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_encryption_at_rest_through_the_facade(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """[A2] ``encryption=`` as for the async store; erasure, rotation and a sealed archive block."""
    keyring = Keyring.generate("k1")
    encryption = Encryption(keyring, tmp_path / "keys.vault")
    dsn = ""
    if backend == "sqlite":
        store = sync.open_sqlite(tmp_path / "ledger.db", encryption=encryption)
    else:
        dsn = create_database(request.getfixturevalue("postgres_dsn"))
        request.addfinalizer(lambda: drop_database(dsn))
        store = sync.open_postgres(dsn, encryption=encryption, min_size=1, max_size=2)
    with store:
        assert store.store.encryption is encryption
        store.create_session("sync-e", created_at=at(0))
        messages = _run_with_transcript(store, "sync-e", "sync-e-run")
        store.end_session("sync-e", ended_at=at(5))
        manifest = store.archive_session("sync-e", tmp_path / "e.alarchive")
        assert manifest.sealed
        assert b"Hello!" not in (tmp_path / "e.alarchive").read_bytes()
        encryption.keyring = keyring.with_key("k2")
        assert store.rotate_keys() == 1
        assert store.transcript("sync-e-run") == messages
        assert store.erase_session_keys("sync-e")
        assert not store.erase_session_keys("sync-e")
        with pytest.raises(SessionKeyErasedError) as erased:
            store.transcript("sync-e-run")
        assert erased.value.session_id == "sync-e"
        store.purge_session("sync-e")
        with pytest.raises(SessionKeyErasedError):
            store.restore_archive(tmp_path / "e.alarchive")
    with sync.SyncStore.open(MemoryStore) as plain, pytest.raises(ValidationError):
        plain.erase_session_keys("m")
