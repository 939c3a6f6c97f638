"""[G1] The search index of a database made before search existed: the migrations (SQLite
17, 19 and 20, the index of the records' own words; PostgreSQL 15 and 17) create it empty,
and the build indexes the older records in batches, each its own transaction, resumable
after a stop, with progress; afterwards a search answers exactly what it answered for the
same records indexed as they were written (same hits, same order)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentledger.errors import CorruptRecordError
from agentledger.storage import payloads
from agentledger.storage.conformance import World
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.postgres import migrations as pg_migrations
from agentledger.storage.postgres import search as pg_search
from agentledger.storage.search import SearchHit, search_query
from agentledger.storage.sqlite import SQLiteStore, check_invariants
from agentledger.storage.sqlite import schema as sqlite_schema
from agentledger.storage.sqlite import search as sqlite_search
from agentledger.transcript import Message, TextPart, encode_messages
from tests.storage.postgres.server import create_database, drop_database

Where = tuple[str, str, str, int, str]


class Stop(Exception):
    """Stands for a build cut off (a crash, a deploy) after its first batch."""


async def _fill(store: Any) -> None:
    """Three sessions, two runs each, every transcript holding 'common', some 'rare'."""
    world = World(store, namespace="idx")
    for s in range(3):
        sid = await world.session(f"s{s}", labels={"tenant": f"t{s % 2}"})
        for r in range(2):
            run = await world.root(f"s{s}-r{r}", session=sid)
            for m in range(3):
                text = f"common words {s} {r} {m}" + (" rare" if (s + r + m) % 4 == 0 else "")
                said = encode_messages([
                    Message(role="user", parts=(TextPart(text=text),)),
                    Message(role="assistant", parts=(TextPart(text=f"common answer {m}"),)),
                ])  # fmt: skip
                record = run.record(
                    payloads.TRANSCRIPT_APPENDED, said, event_key=f"m{m}", at=world.now()
                )
                await store.append_run_record(record)
            await world.finish(run)


async def _everything(store: Any, text: str, **kw: Any) -> list[Where]:
    found: list[SearchHit] = []
    cursor = ""
    while True:
        page = await store.search(text, cursor=cursor, limit=7, **kw)
        assert page.complete
        found += page.hits
        if not page.next_cursor:
            return [
                (h.session_id, h.run_id, h.record_id, h.message_index, h.snippet) for h in found
            ]
        cursor = page.next_cursor


async def _answers(store: Any) -> list[list[Where]]:
    return [
        await _everything(store, "common"),
        await _everything(store, "rare"),
        await _everything(store, "common rare", labels={"tenant": "t0"}),
        await _everything(store, "answer 2", session_id="idx-s1"),
    ]


_SEARCH_MIGRATIONS = ("search_index", "search_index_batched", "search_record_words")


def _forget_sqlite(conn: sqlite3.Connection) -> None:
    """The database as the version before search left it."""
    for table in ("search_words", "search_left_out", "search_backfill", "search_indexed"):
        conn.execute(f"DROP TABLE {table}")
    conn.execute(
        f"DELETE FROM {sqlite_schema.MIGRATIONS_TABLE} WHERE name IN (?, ?, ?)",
        _SEARCH_MIGRATIONS,
    )


def _holding(conn: sqlite3.Connection, word: str) -> int:
    """How many records the FTS5 index holds ``word`` for."""
    query = "SELECT count(*) FROM search_words WHERE search_words MATCH ?"
    (count,) = conn.execute(query, (word,)).fetchone()
    return int(count)


async def _check_rebuild(
    open_store: Callable[[], Awaitable[Any]],
    forget: Callable[[], Awaitable[None]],
    build: Callable[[int, Callable[[int], None]], Awaitable[int]],
    pending: Callable[[], Awaitable[bool]],
) -> None:
    store = await open_store()
    try:
        await _fill(store)
        live = await _answers(store)
    finally:
        await store.close()
    assert len(live[0]) == 3 * 2 * 3 * 2
    assert all(live[1:])

    await forget()  # the database as the version before search left it, migrated again
    assert await pending()
    progress: list[int] = []

    def stop(done: int) -> None:
        progress.append(done)
        raise Stop

    with pytest.raises(Stop):
        await build(4, stop)
    assert progress == [4]
    assert await pending()
    assert await build(4, progress.append) == 3 * 2 * 3 - 4
    assert progress == [4, 4, 8, 12, 14]
    assert not await pending()
    assert await build(4, progress.append) == 0  # built: nothing more

    store = await open_store()
    try:
        assert await _answers(store) == live
    finally:
        await store.close()


async def test_sqlite_builds_the_index_of_older_records(tmp_path: Path) -> None:
    path = tmp_path / "old.db"

    async def open_store() -> SQLiteStore:
        return await SQLiteStore.open(path)

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(path, isolation_level=None)

    async def forget() -> None:
        conn = connect()
        try:
            _forget_sqlite(conn)
            assert tuple(m.name for m in sqlite_schema.migrate(conn)) == _SEARCH_MIGRATIONS
            page = sqlite_search.search(conn, search_query("common", None, None, "", 10))
            assert (page.hits, page.complete) == ([], False)
        finally:
            conn.close()

    async def build(batch: int, progress: Callable[[int], None]) -> int:
        conn = connect()
        try:
            return sqlite_search.build_index(
                conn, batch=batch, progress=lambda done, left: progress(done)
            )
        finally:
            conn.close()

    async def pending() -> bool:
        conn = connect()
        try:
            return conn.execute("SELECT 1 FROM search_backfill").fetchone() is not None
        finally:
            conn.close()

    await _check_rebuild(open_store, forget, build, pending)


@pytest.fixture
async def fresh_dsn(postgres_dsn: str) -> AsyncIterator[str]:
    """A database of its own on the test session's server (see tests/conftest.py)."""
    dsn = create_database(postgres_dsn)
    try:
        yield dsn
    finally:
        drop_database(dsn)


async def _forget_postgres(conn: psycopg.AsyncConnection[Any]) -> None:
    """The database as the version before search left it (migrations 15 and 17 undone)."""
    await conn.execute(
        "ALTER TABLE agentledger_records DROP COLUMN search_pos, DROP COLUMN words; "
        "DROP SEQUENCE agentledger_search_pos; "
        "DROP TABLE agentledger_search_left_out, agentledger_search_backfill"
    )
    await conn.execute(f"DELETE FROM {pg_migrations.MIGRATIONS_TABLE} WHERE version IN (15, 17)")


async def test_postgres_builds_the_index_of_older_records(fresh_dsn: str) -> None:
    async def open_store() -> PostgresStore:
        return await PostgresStore.open(fresh_dsn, min_size=1, max_size=2)

    async def connect() -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True)

    async def forget() -> None:
        async with await connect() as conn:
            await _forget_postgres(conn)
            assert await pg_migrations.migrate(conn) == [15, 17]

    async def build(batch: int, progress: Callable[[int], None]) -> int:
        async with await connect() as conn:
            return await pg_search.build_index(conn, batch=batch, progress=progress)

    async def pending() -> bool:
        async with await connect() as conn:
            cur = await conn.execute("SELECT EXISTS (SELECT 1 FROM agentledger_search_backfill)")
            row = await cur.fetchone()
            return bool(row and row[0])

    await _check_rebuild(open_store, forget, build, pending)


async def test_postgres_pages_read_past_the_window_alike(
    fresh_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PostgreSQL page reads the newest entries in order, then older ones through the GIN
    index: with a window of 5 entries the answers are the same as with the whole window."""
    store = await PostgresStore.open(fresh_dsn, min_size=1, max_size=2)
    try:
        await _fill(store)
        whole = await _answers(store)
        monkeypatch.setattr(pg_search, "WINDOW", 5)
        assert await _answers(store) == whole
        monkeypatch.setattr(pg_search, "WINDOW", 1)
        assert await _answers(store) == whole
    finally:
        await store.close()


async def test_a_sealed_sqlite_database_builds_no_text_only_what_it_left_out(
    tmp_path: Path,
) -> None:
    """Encryption at rest: the build never opens a sealed record; it counts the sessions."""
    from agentledger.storage.encryption import Encryption, Keyring

    path = tmp_path / "sealed.db"
    encryption = Encryption(Keyring.generate(), tmp_path / "keys.vault")
    store = await SQLiteStore.open(path, encryption=encryption)
    try:
        await _fill(store)
    finally:
        await store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        _forget_sqlite(conn)
        sqlite_schema.migrate(conn)
        assert sqlite_search.build_index(conn, batch=4) == 3 * 2 * 3
        assert _holding(conn, "common") == 0
    finally:
        conn.close()
    store = await SQLiteStore.open(path, encryption=encryption)
    try:
        page = await store.search("common")
        assert (page.hits, page.left_out, page.complete) == ([], 3, True)
        assert (await store.search("common", labels={"tenant": "t0"})).left_out == 2
    finally:
        await store.close()


_FORGED = encode_messages([Message(role="user", parts=(TextPart(text="forged words"),))])


async def test_sqlite_build_refuses_a_damaged_record(tmp_path: Path) -> None:
    """A record whose checksum fails is corruption: the build stops on it, writes nothing
    of its batch and leaves the build to do, rather than index (or skip) it."""
    path = tmp_path / "damaged.db"
    store = await SQLiteStore.open(path)
    try:
        await _fill(store)
    finally:
        await store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        _forget_sqlite(conn)
        sqlite_schema.migrate(conn)
        conn.execute(
            "UPDATE records SET payload = ? WHERE pos = (SELECT min(pos) FROM records "
            "WHERE type = ?)",
            (_FORGED, payloads.TRANSCRIPT_APPENDED),
        )
        with pytest.raises(CorruptRecordError):
            sqlite_search.build_index(conn, batch=100)
        assert _holding(conn, "common") == 0
        assert conn.execute("SELECT 1 FROM search_backfill").fetchone() == (1,)
    finally:
        conn.close()


async def test_postgres_build_refuses_a_damaged_record(fresh_dsn: str) -> None:
    store = await PostgresStore.open(fresh_dsn, min_size=1, max_size=2)
    try:
        await _fill(store)
    finally:
        await store.close()
    async with await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True) as conn:
        await _forget_postgres(conn)
        await pg_migrations.migrate(conn)
        await conn.execute(
            "UPDATE agentledger_records SET payload = %s WHERE (run_id, seq) = "
            "(SELECT run_id, seq FROM agentledger_records WHERE type = %s "
            "ORDER BY ts, seq LIMIT 1)",
            (_FORGED, payloads.TRANSCRIPT_APPENDED),
        )
        with pytest.raises(CorruptRecordError):
            await pg_search.build_index(conn, batch=100)
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM agentledger_records WHERE words IS NOT NULL), "
            "EXISTS (SELECT 1 FROM agentledger_search_backfill)"
        )
        assert await cur.fetchone() == (0, True)


async def test_sqlite_reads_waiting_records_as_the_fts5_table_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The newest records wait (fewer than FLUSH_EVERY) before their words go to the FTS5
    table; a search reads them one by one: the same answers before and after they go, and
    a purge of records on both sides of the line leaves the index sound."""
    monkeypatch.setattr(sqlite_search, "FLUSH_EVERY", 8)  # both kinds, from 30 records
    path = tmp_path / "waiting.db"
    store = await SQLiteStore.open(path)
    try:
        await _fill(store)
        before = await _answers(store)
    finally:
        await store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        (waiting,) = conn.execute(
            "SELECT count(*) FROM records WHERE pos > (SELECT upto FROM search_indexed)"
        ).fetchone()
        assert 0 < waiting < sqlite_search.FLUSH_EVERY
        assert 0 < _holding(conn, "common") < 3 * 2 * 3
        sqlite_search.flush(conn)
        assert _holding(conn, "common") == 3 * 2 * 3
    finally:
        conn.close()
    store = await SQLiteStore.open(path)
    try:
        assert await _answers(store) == before
        await store.end_session("idx-s2", ended_at=datetime(2030, 1, 1, tzinfo=UTC))
        await store.purge_session("idx-s2")  # its records: the newest, some waiting
    finally:
        await store.close()
    assert check_invariants(path) == []


async def test_sqlite_purges_waiting_and_written_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_search, "FLUSH_EVERY", 8)
    path = tmp_path / "purge.db"
    store = await SQLiteStore.open(path)
    try:
        await _fill(store)
        await store.end_session("idx-s2", ended_at=datetime(2030, 1, 1, tzinfo=UTC))
        receipt = await store.purge_session("idx-s2")  # the newest: waiting, and written
        assert receipt.search_entries == 2 * 3 * 2
        assert [h[0] for h in await _everything(store, "common")] == ["idx-s1"] * 12 + [
            "idx-s0"
        ] * 12
    finally:
        await store.close()
    assert check_invariants(path) == []  # no word of the purged records is left
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        sqlite_search.flush(conn)
        assert _holding(conn, "common") == 2 * 2 * 3
    finally:
        conn.close()


async def test_sqlite_positions_given_again_after_a_purge_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A purge of the newest records lets SQLite give their positions to the next ones:
    those are new, so they wait for their words and a search finds them at once."""
    monkeypatch.setattr(sqlite_search, "FLUSH_EVERY", 4)
    path = tmp_path / "again.db"
    store = await SQLiteStore.open(path)
    try:
        await _fill(store)
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            sqlite_search.flush(conn)  # every record's words written: none waiting
        finally:
            conn.close()
        await store.end_session("idx-s2", ended_at=datetime(2030, 1, 1, tzinfo=UTC))
        await store.purge_session("idx-s2")
        world = World(store, namespace="idx")
        sid = await world.session("s3")
        run = await world.root("s3-r", session=sid)
        said = encode_messages([Message(role="user", parts=(TextPart(text="zebra"),))])
        await store.append_run_record(
            run.record(payloads.TRANSCRIPT_APPENDED, said, event_key="z", at=world.now())
        )
        assert [h[:4] for h in await _everything(store, "zebra")] == [
            ("idx-s3", "idx-s3-r", "2", 0)
        ]
    finally:
        await store.close()
    assert check_invariants(path) == []


class _FlushAfterFirstRead(sqlite3.Connection):
    """A reader whose statements each see their own snapshot, and a writer that flushes the
    waiting records' words to FTS5 right after the search read where the waiting ones start."""

    flush_from: str = ""
    flushed = False

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
        cursor = super().execute(sql, *args)
        if sql.startswith("SELECT upto, (SELECT below") and self.flush_from:
            row = cursor.fetchone()
            writer = sqlite3.connect(self.flush_from, isolation_level=None)
            try:
                sqlite_search.flush(writer)
                self.flushed = True
            finally:
                writer.close()
            return super().execute("SELECT ?, ?", row)
        return cursor


async def test_sqlite_search_counts_an_entry_flushed_during_it_once(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    store = await SQLiteStore.open(path)
    try:
        await _fill(store)
        expected = await _everything(store, "common")
    finally:
        await store.close()
    conn = sqlite3.connect(path, isolation_level=None, factory=_FlushAfterFirstRead)
    try:
        assert isinstance(conn, _FlushAfterFirstRead)
        conn.flush_from = str(path)
        page = sqlite_search.search(conn, search_query("common", None, None, "", 50))
        assert conn.flushed
    finally:
        conn.close()
    assert [(h.session_id, h.run_id, h.record_id, h.message_index) for h in page.hits] == [
        where[:4] for where in expected
    ]


_SPELLED = (  # a letter as a JSON escape; a number the text writes otherwise
    b'[{"role":"user","parts":[{"kind":"text","text":"\\u0041pple pie"}]}]',
    b'[{"role":"assistant","parts":[{"kind":"tool_use","id":"t1","name":"weigh",'
    b'"input":{"grams":1.5e3}}]}]',
)


async def test_sqlite_waiting_records_are_sieved_without_losing_a_hit(tmp_path: Path) -> None:
    """A search reads the waiting records' payloads through a first sieve on their bytes;
    a word the JSON spells with an escape, or a number written otherwise in the payload,
    is still found, waiting and once its words are written."""
    path = tmp_path / "sieve.db"
    store = await SQLiteStore.open(path)
    try:
        world = World(store, namespace="sv")
        sid = await world.session("s")
        run = await world.root("s-r", session=sid)
        for i, said in enumerate(_SPELLED):
            record = run.record(payloads.TRANSCRIPT_APPENDED, said, event_key=f"k{i}",
                                at=world.now())  # fmt: skip
            await store.append_run_record(record)
        expected = [[("sv-s", "sv-s-r", "2", 0)], [("sv-s", "sv-s-r", "3", 0)], []]

        async def found() -> list[list[tuple[str, str, str, int]]]:
            return [
                [h[:4] for h in await _everything(store, text)]
                for text in ("apple", "1500", "pear")
            ]

        assert await found() == expected  # waiting
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            sqlite_search.flush(conn)
            assert _holding(conn, "apple") == 1
        finally:
            conn.close()
        assert await found() == expected  # written
    finally:
        await store.close()
    assert check_invariants(path) == []


async def test_sqlite_migration_20_replaces_an_index_of_entries(tmp_path: Path) -> None:
    """A database at schema version 19 (an entry row per message, their words flushed 32 at
    a time by a trigger) becomes the index of the records' own words: migration 20 drops
    the entries, the build indexes every record again, and searches answer as before."""
    path = tmp_path / "v19.db"
    store = await SQLiteStore.open(path)
    try:
        await _fill(store)
        live = await _answers(store)
    finally:
        await store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        _forget_sqlite(conn)
        sqlite_schema.migrate(conn, upto=19)
        conn.execute("DELETE FROM search_backfill")  # built, by version 19's build
        rows = conn.execute(
            "SELECT session_id, run_id, seq, type, timestamp, payload FROM records ORDER BY pos"
        ).fetchall()
        for sid, rid, seq, type_, ms, payload in rows:
            text = sqlite_search.record_text(sid, type_, payload)
            for message, body in enumerate(text.split("\n") if text else []):
                conn.execute(
                    "INSERT INTO search_entries (session_id, run_id, seq, message, role, "
                    "timestamp, body) VALUES (?, ?, ?, ?, '', ?, ?)",
                    (sid, rid, seq, message, ms, body),
                )
        (flushed,) = conn.execute("SELECT upto FROM search_flushed").fetchone()
        assert flushed == 32  # version 19's trigger wrote a batch of words
    finally:
        conn.close()
    store = await SQLiteStore.open(path)  # migrates to 20 and builds the index
    try:
        assert await _answers(store) == live
    finally:
        await store.close()
    assert check_invariants(path) == []


def _index_state(path: Path) -> tuple[Any, ...]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return tuple(
            conn.execute(
                "SELECT (SELECT upto FROM search_indexed), (SELECT max(pos) FROM records), "
                "(SELECT group_concat(id || ':' || hex(block)) FROM search_words_data)"
            ).fetchone()
        )
    finally:
        conn.close()


async def test_sqlite_appends_write_the_index_only_when_a_batch_fills(tmp_path: Path) -> None:
    """An append writes nothing for the index until FLUSH_EVERY records wait; the
    transaction of the record that makes them FLUSH_EVERY writes all their words."""
    path = tmp_path / "batches.db"
    store = await SQLiteStore.open(path)
    try:
        world = World(store, namespace="b")
        sid = await world.session("s")
        run = await world.root("s-r", session=sid)
        said = encode_messages([Message(role="user", parts=(TextPart(text="batch words"),))])
        upto, top, empty = _index_state(path)
        assert (upto, top) == (0, 1)  # the run's start record waits
        for i in range(sqlite_search.FLUSH_EVERY - 2):
            await store.append_run_record(
                run.record(payloads.TRANSCRIPT_APPENDED, said, event_key=f"k{i}", at=world.now())
            )
            assert _index_state(path) == (0, i + 2, empty)  # nothing written
        await store.append_run_record(
            run.record(payloads.TRANSCRIPT_APPENDED, said, event_key="last", at=world.now())
        )
        upto, top, words = _index_state(path)
        assert (upto, top) == (sqlite_search.FLUSH_EVERY, sqlite_search.FLUSH_EVERY)
        assert words != empty
        assert len((await store.search("batch", limit=100)).hits) == sqlite_search.FLUSH_EVERY - 1
    finally:
        await store.close()
    assert check_invariants(path) == []


async def test_sqlite_cascade_purge_erases_the_words_of_the_copies(tmp_path: Path) -> None:
    """A cascade purges the sessions holding copies in the same transaction: their words
    go from the FTS5 table with the source's."""
    from agentledger.storage.conformance._derived import _source_and_holder, _summarised

    path = tmp_path / "cascade.db"
    store = await SQLiteStore.open(path)
    try:
        world = World(store, namespace="cas")
        source, holder, copy = await _source_and_holder(world, "cas")
        await _summarised(world, copy, "cas-next", "Summary: zebra was copied.")
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            sqlite_search.flush(conn)
            assert _holding(conn, "zebra") == 1
        finally:
            conn.close()
        await store.end_session(holder, ended_at=world.now())
        receipt = await store.purge_session(source, cascade=True)
        assert receipt.cascaded == [holder]
        assert (await store.search("zebra")).hits == []
    finally:
        await store.close()
    assert check_invariants(path) == []  # no word of either session left
