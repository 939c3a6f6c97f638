"""Search on SQLite [G1]: an FTS5 index over ``search_entries``, kept in each record's transaction.

``search_entries`` holds one row per indexed message (see :mod:`agentledger.storage.search`),
written by the transaction of the record it comes from, and deleted by its session's
purge. ``search_text`` is an external-content FTS5 table over its ``body``, kept by
triggers: an entry that makes :data:`FLUSH_EVERY` entries waiting writes the words of all
of them, in its own transaction, as one FTS5 segment (a segment per transaction was most
of an append's cost at ``full`` durability). A search reads the entries still waiting one by
one and the FTS5 table for the others, so it is exact as soon as a record commits. An
entry's id is its place in the commit order: a page is a descending range of ids, never a
sort of every match.

Schema migration 17 creates the tables, 19 batches the FTS5 writes; the records stored
before them are indexed by :func:`build_index` in batches, each its own transaction,
newest first, so a build that stops resumes where it was (``search_backfill`` keeps
where). Entries it writes take ids below every id written since, so the commit order
holds, and go to the FTS5 table at once."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from agentledger.storage import payloads
from agentledger.storage.search import (
    FoundEntry,
    SearchPage,
    SearchQuery,
    index_entries,
    matches,
    scope_filter,
    search_page,
)
from agentledger.storage.sqlite.rows import RECORD_COLUMNS, decode_records, from_ms, to_ms
from agentledger.storage.types import Record

__all__ = [
    "BATCHED",
    "FLUSH_EVERY",
    "INDEXED_TYPES",
    "MIGRATION",
    "PURGE",
    "build_index",
    "count_entries",
    "entry_values",
    "flush",
    "index_statements",
    "search",
]

INDEXED_TYPES = (*sorted(payloads.TRANSCRIPT_TYPES), payloads.TRANSCRIPT_WINDOW)
"""The record types whose text is indexed."""

MIGRATION = (
    """CREATE TABLE search_entries (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        message INTEGER NOT NULL,
        role TEXT NOT NULL,
        timestamp INTEGER NOT NULL,
        body TEXT NOT NULL
    ) STRICT""",
    "CREATE INDEX search_entries_by_session ON search_entries (session_id, id)",
    "CREATE VIRTUAL TABLE search_text USING fts5(body, content='search_entries', "
    "content_rowid='id', tokenize='unicode61 remove_diacritics 0', "
    "detail=none, columnsize=0)",
    "CREATE TRIGGER search_entries_added AFTER INSERT ON search_entries BEGIN "
    "INSERT INTO search_text (rowid, body) VALUES (new.id, new.body); END",
    "CREATE TRIGGER search_entries_deleted AFTER DELETE ON search_entries BEGIN "
    "INSERT INTO search_text (search_text, rowid, body) VALUES ('delete', old.id, old.body); END",
    # Sessions whose records are sealed (encryption at rest): never indexed, counted.
    "CREATE TABLE search_left_out (session_id TEXT PRIMARY KEY) STRICT, WITHOUT ROWID",
    # Where the build of the index of older records is: records below pos ``below``
    # are still to index, their entries take ids from ``next_id`` down. No row: built.
    "CREATE TABLE search_backfill (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "below INTEGER NOT NULL, next_id INTEGER NOT NULL) STRICT",
    "INSERT INTO search_backfill (id, below, next_id) "
    "SELECT 1, max(pos) + 1, -1 FROM records HAVING count(*) > 0",
)
"""Schema migration 16: the search index, empty, and where its build starts."""

FLUSH_EVERY = 32
"""How many entries wait, at most, before their words are written to the FTS5 table."""

BATCHED = (
    "DROP TRIGGER search_entries_added",
    "DROP TRIGGER search_entries_deleted",
    # The entries up to ``upto`` are in the FTS5 table; the newer ones (fewer than
    # FLUSH_EVERY) are read by a search one by one.
    "CREATE TABLE search_flushed (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "upto INTEGER NOT NULL) STRICT",
    "INSERT INTO search_flushed (id, upto) SELECT 1, coalesce(max(id), 0) FROM search_entries",
    "CREATE TRIGGER search_entries_flushed AFTER INSERT ON search_entries "
    f"WHEN new.id >= (SELECT upto FROM search_flushed) + {FLUSH_EVERY} BEGIN "
    "INSERT INTO search_text (rowid, body) SELECT id, body FROM search_entries "
    "WHERE id > (SELECT upto FROM search_flushed) ORDER BY id; "
    "UPDATE search_flushed SET upto = new.id; END",
    "CREATE TRIGGER search_entries_deleted AFTER DELETE ON search_entries "
    "WHEN old.id <= (SELECT upto FROM search_flushed) BEGIN "
    "INSERT INTO search_text (search_text, rowid, body) VALUES ('delete', old.id, old.body); END",
)
"""Schema migration 19: the FTS5 table takes the entries' words every FLUSH_EVERY entries
(one segment for many records) instead of once per transaction, still in the transaction
of the record that fills the batch; a search reads the few newer entries itself."""

PURGE = (
    "DELETE FROM search_entries WHERE session_id = :id",
    "DELETE FROM search_left_out WHERE session_id = :id",
)
"""A purge's statements for the index, in its transaction."""

_INSERT = (
    "INSERT INTO search_entries (session_id, run_id, seq, message, role, timestamp, body) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_WITH_ID = (
    "INSERT INTO search_entries (id, session_id, run_id, seq, message, role, timestamp, body) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_WORDS = "INSERT INTO search_text (rowid, body) VALUES (?, ?)"
_LEFT_OUT = "INSERT OR IGNORE INTO search_left_out (session_id) VALUES (?)"
_COUNT = "SELECT count(*) FROM search_entries WHERE session_id = ?"

_Statement = tuple[str, Any, bool]


def entry_values(record: Record) -> list[tuple[object, ...]]:
    """The ``search_entries`` rows of ``record`` (no id: the next ones)."""
    ms = to_ms(record.timestamp)
    return [
        (record.session_id, record.run_id, int(record.id), e.message_index, e.role, ms, e.body)
        for e in index_entries(record)
    ]


def index_statements(records: Sequence[Record], *, sealed: bool) -> list[_Statement]:
    """The statements that index ``records`` as they are stored (ids set); ``sealed``: the
    store seals them, so their sessions are counted as left out instead."""
    if sealed:
        sessions = {(r.session_id,) for r in records if r.session_id and r.type in INDEXED_TYPES}
        return [(_LEFT_OUT, sorted(sessions), True)] if sessions else []
    rows = [
        row for record in records if record.type in INDEXED_TYPES for row in entry_values(record)
    ]
    if not rows:
        return []
    if len(rows) == 1:
        return [(_INSERT, rows[0], False)]
    return [(_INSERT, rows, True)]


def count_entries(conn: sqlite3.Connection, session_id: str) -> int:
    """How many index entries ``session_id`` has (what its purge deletes)."""
    (count,) = conn.execute(_COUNT, (session_id,)).fetchone()
    return int(count)


def _filter(query: SearchQuery, table: str) -> tuple[list[str], list[object]]:
    return scope_filter(query, table, labels_table="session_labels", mark="?")


def search(conn: sqlite3.Connection, query: SearchQuery) -> SearchPage:
    """One page of ``query``'s hits, newest first, and the sessions it could not see.

    The entries newer than the FTS5 table's (fewer than :data:`FLUSH_EVERY`) are read and
    matched one by one, first; the FTS5 table answers for the older ones.
    """
    (upto,) = conn.execute("SELECT upto FROM search_flushed").fetchone()
    where, params = _filter(query, "e")
    where.insert(0, "e.id > ?")
    params.insert(0, upto)
    for term in query.terms:  # a first sieve (LIKE ignores the case of ASCII letters only)
        if term.isascii():
            where.append("e.body LIKE ?")
            params.append(f"%{term}%")  # letters and digits: no wildcard in it
    if query.before is not None:
        where.append("e.id < ?")
        params.append(query.before)
    newer = conn.execute(
        f"SELECT {_HIT} FROM search_entries AS e WHERE {' AND '.join(where)} ORDER BY e.id DESC",
        params,
    ).fetchall()
    found = [_found(row) for row in newer if matches(query.terms, row[-1])][: query.fetch]
    if len(found) < query.fetch:
        match = " ".join(f'"{term}"' for term in query.terms)  # each a word: letters and digits
        where, params = _filter(query, "e")
        # Up to the same ``upto``: an entry flushed since the first read (each statement
        # has its own snapshot) was read above, not again here.
        where[:0] = ["search_text MATCH ?", "search_text.rowid <= ?"]
        params[:0] = [match, upto]
        if query.before is not None:
            where.append("search_text.rowid < ?")
            params.append(query.before)
        sql = (
            f"SELECT {_HIT} FROM search_text CROSS JOIN search_entries AS e "
            f"ON e.id = search_text.rowid WHERE {' AND '.join(where)} "
            "ORDER BY search_text.rowid DESC LIMIT ?"
        )
        rows = conn.execute(sql, [*params, query.fetch - len(found)]).fetchall()
        found += [_found(row) for row in rows]
    left_where, left_params = _filter(query, "o")
    left_sql = "SELECT count(*) FROM search_left_out AS o"
    if left_where:
        left_sql += " WHERE " + " AND ".join(left_where)
    (left_out,) = conn.execute(left_sql, left_params).fetchone()
    building = conn.execute("SELECT 1 FROM search_backfill").fetchone() is not None
    return search_page(query, found, left_out=int(left_out), complete=not building)


_HIT = "e.id, e.session_id, e.run_id, e.seq, e.message, e.role, e.timestamp, e.body"


def _found(row: tuple[Any, ...]) -> FoundEntry:
    id_, sid, rid, seq, msg, role, ms, body = row
    return FoundEntry(id_, sid, rid, seq, msg, role, from_ms(ms), body)


def flush(conn: sqlite3.Connection) -> None:
    """Write the words of the entries still waiting to the FTS5 table (in the caller's
    transaction): what an entry that fills a batch does, done early."""
    conn.execute(
        "INSERT INTO search_text (rowid, body) SELECT id, body FROM search_entries "
        "WHERE id > (SELECT upto FROM search_flushed) ORDER BY id"
    )
    conn.execute(
        "UPDATE search_flushed SET upto = max(upto, coalesce((SELECT max(id) FROM "
        "search_entries), 0))"
    )


_BATCH = (
    f"SELECT pos, {RECORD_COLUMNS} FROM records "
    "WHERE pos < ? AND session_id <> '' AND type IN (?, ?, ?) "
    "ORDER BY pos DESC LIMIT ?"
)
_LEFT = "SELECT count(*) FROM records WHERE pos < ? AND session_id <> '' AND type IN (?, ?, ?)"


def build_index(
    conn: sqlite3.Connection,
    *,
    batch: int = 1000,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Index the records stored before the index existed, ``batch`` records per
    transaction, newest first; resumable. ``progress(done, left)`` after each batch
    (records indexed by this call, records still to index). ``conn`` in autocommit mode.

    Raises:
        CorruptRecordError: a record to index fails its checksum (nothing of its batch
            is written; the build stops there).

    Returns:
        How many records this call indexed (0 when the index was built).
    """
    done = 0
    left = -1  # unknown until the first batch counts them
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute("SELECT below, next_id FROM search_backfill").fetchone()
            if row is None:
                conn.execute("COMMIT")
                return done
            below, next_id = int(row[0]), int(row[1])
            if left < 0:
                (left,) = conn.execute(_LEFT, (below, *INDEXED_TYPES)).fetchone()
            sealed = conn.execute("SELECT 1 FROM encryption").fetchone() is not None
            rows = conn.execute(_BATCH, (below, *INDEXED_TYPES, batch)).fetchall()
            if rows:
                below = rows[-1][0]
            # Each row's checksum verified: a damaged record is corruption, not left out.
            records = decode_records([row[1:] for row in rows])
            sessions: set[str] = set()
            for record in records:
                if sealed:
                    sessions.add(record.session_id)
                    continue
                values = entry_values(record)
                first = next_id - len(values) + 1  # a record's messages in order
                rows_ = [(first + i, *v) for i, v in enumerate(values)]
                conn.executemany(_INSERT_WITH_ID, rows_)
                conn.executemany(_INSERT_WORDS, [(row[0], row[-1]) for row in rows_])
                next_id = first - 1
            conn.executemany(_LEFT_OUT, [(s,) for s in sorted(sessions)])
            left = max(0, left - len(rows))
            if len(rows) < batch:
                left = 0
            if left == 0:
                conn.execute("DELETE FROM search_backfill")
            else:
                conn.execute("UPDATE search_backfill SET below = ?, next_id = ?", (below, next_id))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        done += len(rows)
        if progress is not None:
            progress(done, left)
        if left == 0:
            return done
