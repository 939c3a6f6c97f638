"""[G1] ``check`` audits the search index against the records it is made of: on SQLite a
record's words missing from the FTS5 index, differing from its text, or words of no
record (or of one still waiting) are each reported; on PostgreSQL a record indexed without
words or a place, words on a record with nothing to index, or words that disagree with its
messages' text; a sound index, also one whose build has not finished, is not."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentledger.storage import payloads
from agentledger.storage.conformance import World
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.postgres import check as pg_check
from agentledger.storage.sqlite import SQLiteStore, check_invariants
from agentledger.storage.sqlite import search as sqlite_search
from agentledger.transcript import Message, TextPart, encode_messages
from tests.storage.postgres.server import create_database, drop_database


async def _fill(store: Any) -> None:
    world = World(store, namespace="sc")
    for s in range(2):
        sid = await world.session(f"s{s}")
        run = await world.root(f"s{s}-r", session=sid)
        for m in range(3):
            said = encode_messages([
                Message(role="user", parts=(TextPart(text=f"question {s} {m}"),)),
                Message(role="assistant", parts=(TextPart(text=f"answer {s} {m}"),)),
            ])  # fmt: skip
            record = run.record(payloads.TRANSCRIPT_APPENDED, said, event_key=f"m{m}",
                                at=world.now())  # fmt: skip
            await store.append_run_record(record)
        await world.finish(run)


@pytest.fixture
async def sqlite_db(tmp_path: Path) -> Path:
    path = tmp_path / "search.db"
    store = await SQLiteStore.open(path)
    try:
        await _fill(store)
    finally:
        await store.close()
    assert check_invariants(path) == []  # the records' words still waiting
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        sqlite_search.flush(conn)  # the records' words in the FTS5 table
    finally:
        conn.close()
    assert check_invariants(path) == []
    return path


def _damage(path: Path, *statements: str | tuple[str, tuple[object, ...]]) -> list[str]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in statements:
            if isinstance(statement, tuple):
                conn.execute(*statement)
            else:
                conn.execute(statement)
    finally:
        conn.close()
    return check_invariants(path)


def _newest(path: Path) -> tuple[int, str]:
    """The newest transcript record's position and the words the index holds for it."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        pos, sid, type_, payload = conn.execute(
            "SELECT pos, session_id, type, payload FROM records WHERE type = ? "
            "ORDER BY pos DESC LIMIT 1",
            (payloads.TRANSCRIPT_APPENDED,),
        ).fetchone()
    finally:
        conn.close()
    return pos, sqlite_search.record_text(sid, type_, payload)


_FORGET = "INSERT INTO search_words (search_words, rowid, body) VALUES ('delete', ?, ?)"
_ADD = "INSERT INTO search_words (rowid, body) VALUES (?, ?)"


def test_sqlite_check_reports_missing_words(sqlite_db: Path) -> None:
    pos, text = _newest(sqlite_db)
    assert text == "question 1 2\nanswer 1 2"
    found = _damage(sqlite_db, (_FORGET, (pos, text)))  # the record stays, its words go
    assert found == ["search index words missing for a record: session 'sc-s1', "
                     "run 'sc-s1-r', record 4"]  # fmt: skip


def test_sqlite_check_reports_words_of_no_record(sqlite_db: Path) -> None:
    found = _damage(sqlite_db, (_ADD, (999, "stray words")))
    assert found == ["search index words of no indexed record: position 999"]


def test_sqlite_check_reports_words_of_a_waiting_record(sqlite_db: Path) -> None:
    """A record above the watermark is read by a search itself: words of it are stray
    (a search would find it twice)."""
    pos, text = _newest(sqlite_db)
    found = _damage(
        sqlite_db,
        (_FORGET, (pos, text)),
        ("UPDATE search_indexed SET upto = ?", (pos - 1,)),
        (_ADD, (pos, text)),
    )
    assert found == [f"search index words of no indexed record: position {pos}"]


def test_sqlite_check_reports_words_differing_from_their_record(sqlite_db: Path) -> None:
    pos, text = _newest(sqlite_db)
    found = _damage(sqlite_db, (_FORGET, (pos, text)), (_ADD, (pos, "answer 1 9")))
    assert found == ["search index words disagreeing with their record: "
                     "session 'sc-s1', run 'sc-s1-r', record 4"]  # fmt: skip


def test_sqlite_check_allows_an_unfinished_build(sqlite_db: Path) -> None:
    """While the build of older records is under way, their words may be missing."""
    conn = sqlite3.connect(sqlite_db, isolation_level=None)
    try:
        (top,) = conn.execute("SELECT max(pos) FROM records").fetchone()
        conn.execute("INSERT INTO search_backfill (id, below) VALUES (1, ?)", (top + 1,))
    finally:
        conn.close()
    forget_all = "INSERT INTO search_words (search_words) VALUES ('delete-all')"
    assert _damage(sqlite_db, forget_all) == []


@pytest.fixture
async def pg_dsn(postgres_dsn: str) -> AsyncIterator[str]:
    dsn = create_database(postgres_dsn)
    try:
        store = await PostgresStore.open(dsn, min_size=1, max_size=2)
        try:
            await _fill(store)
        finally:
            await store.close()
        assert await pg_check.check_invariants(dsn) == []
        yield dsn
    finally:
        drop_database(dsn)


async def _pg_damage(dsn: str, *statements: str) -> list[str]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            await conn.execute(statement)  # type: ignore[arg-type]
    return await pg_check.check_invariants(dsn)


_PG_NEWEST = "search_pos = (SELECT max(search_pos) FROM agentledger_records)"


async def test_postgres_check_reports_damaged_entries(pg_dsn: str) -> None:
    """PostgreSQL keeps a record's words and position on its row: words that are not the
    words of its messages, an indexed record without them, one with only one of the two,
    and a record of no indexed text that has them are each reported."""
    found = await _pg_damage(
        pg_dsn, f"UPDATE agentledger_records SET words = 'other' WHERE {_PG_NEWEST}"
    )
    assert found == [
        "search index words disagreeing with the text of session 'sc-s1', run 'sc-s1-r', record 4"
    ]
    found = await _pg_damage(
        pg_dsn,
        "UPDATE agentledger_records SET words = NULL, search_pos = NULL "
        "WHERE run_id = 'sc-s0-r' AND seq = 2",
        "UPDATE agentledger_records SET words = NULL WHERE run_id = 'sc-s0-r' AND seq = 3",
        "UPDATE agentledger_records SET words = 'question', search_pos = 999 "
        "WHERE run_id = 'sc-s0-r' AND seq = 1",
    )
    assert found == [
        "search index missing for a record: session 'sc-s0', run 'sc-s0-r', record 2",
        "search index position and words not both set: session 'sc-s0', run 'sc-s0-r', record 3",
        "search index words of a record with no indexed text: "
        "session 'sc-s0', run 'sc-s0-r', record 1",
        "search index words disagreeing with the text of session 'sc-s1', run 'sc-s1-r', record 4",
    ]


async def test_sqlite_check_reports_a_sealed_session_not_left_out(tmp_path: Path) -> None:
    """A sealed store indexes no text; each session with transcripts counts as left out."""
    from agentledger.storage.encryption import Encryption, Keyring

    path = tmp_path / "sealed.db"
    store = await SQLiteStore.open(path, encryption=Encryption(Keyring.generate(), tmp_path / "k"))
    try:
        await _fill(store)
    finally:
        await store.close()
    assert check_invariants(path) == []
    found = _damage(path, "DELETE FROM search_left_out WHERE session_id = 'sc-s0'")
    assert found == ["sealed session not counted as left out of search: 'sc-s0'"]
