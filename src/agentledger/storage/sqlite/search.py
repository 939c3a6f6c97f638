"""Search on SQLite [G1]: an FTS5 index of the records' own text, no row per message.

``search_words`` is a contentless FTS5 table with one row per indexed record (see
:mod:`agentledger.storage.search` for what is indexed): its rowid is the record's ``pos``
(the commit order), its words those of the record's messages joined by newlines. The text
is not stored twice: a hit reads its record (checksum verified) for the message, its role
and the snippet, and keeps the messages that hold every term (:func:`holds`), so a hit
is exact even where a record's terms are spread over several of its messages.

Nothing is written per append. The words of the newest records wait: the transaction
that leaves :data:`FLUSH_EVERY` records or more above the watermark
(``search_indexed.upto``) writes the words of all of them, as one FTS5 segment, and moves
the watermark (:func:`flush_due`, run by the writer right before each COMMIT). A search
decodes the records still waiting and matches them one by one, so it is exact as soon as
a record commits. A hit's id (its place in the cursor's order) is ``pos << 32`` plus the
message's index: a record has fewer than 2**31 messages (SQLite keeps no value of 2**31
bytes or more), and a page is a descending range of positions, never a sort of every match.

A purge deletes the session's words in its transaction: contentless FTS5 (SQLite 3.40)
deletes a row given its exact text, which is recomputed from the payloads being purged
(:func:`record_text` is deterministic). Schema migration 17 created a row per message,
19 batched its FTS5 writes, 20 replaces both with this index; the records stored before
it are indexed by :func:`build_index` in batches, each its own transaction, newest first,
so a build that stops resumes where it was (``search_backfill.below``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from agentledger.storage import payloads
from agentledger.storage.search import (
    Entry,
    FoundEntry,
    SearchPage,
    SearchQuery,
    index_entries,
    scope_filter,
    search_page,
)
from agentledger.storage.sqlite.rows import RECORD_COLUMNS, decode_records
from agentledger.storage.types import Record

__all__ = [
    "AFTER_PURGE",
    "BATCHED",
    "FLUSH_EVERY",
    "INDEXED_TYPES",
    "MIGRATION",
    "PURGE",
    "RECORD_WORDS",
    "build_index",
    "flush",
    "flush_due",
    "hit_id",
    "holds",
    "index_statements",
    "purge_statements",
    "record_text",
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
"""Schema migration 17: the search index, empty, and where its build starts."""

FLUSH_EVERY = 32
"""How many records wait, at most, before their words are written to the FTS5 table
(migration 19 wrote its trigger with it, for entries then)."""

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


RECORD_WORDS = (
    "DROP TABLE search_text",
    "DROP TABLE search_entries",  # and its triggers
    "DROP TABLE search_flushed",
    "DROP TABLE search_backfill",
    "CREATE VIRTUAL TABLE search_words USING fts5(body, content='', "
    "tokenize='unicode61 remove_diacritics 0', detail=none, columnsize=0)",
    # The records up to pos ``upto`` have their words in search_words (those of the
    # build's range once it is done); the newer ones wait, read by a search one by one.
    "CREATE TABLE search_indexed (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "upto INTEGER NOT NULL) STRICT",
    "INSERT INTO search_indexed (id, upto) SELECT 1, coalesce(max(pos), 0) FROM records",
    # Records below pos ``below`` are still to index (by build_index). No row: built.
    "CREATE TABLE search_backfill (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "below INTEGER NOT NULL) STRICT",
    "INSERT INTO search_backfill (id, below) SELECT 1, max(pos) + 1 FROM records "
    "WHERE session_id <> '' AND type IN "
    f"({', '.join(repr(t) for t in INDEXED_TYPES)}) HAVING count(*) > 0",
)
"""Schema migration 20: the index of the records' own text (one FTS5 row per record, no
row per message, nothing written per append), empty, and where its build starts."""

PURGE = ("DELETE FROM search_left_out WHERE session_id = :id",)
"""A purge's statements for the index, in its transaction (the words: see
:func:`purge_statements`)."""

AFTER_PURGE = (
    # A purge of the newest records lets SQLite give their positions again: a record that
    # takes one must wait (and the build must not reach it).
    "UPDATE search_indexed SET upto = min(upto, coalesce((SELECT max(pos) FROM records), 0))",
    "UPDATE search_backfill SET below = min(below, coalesce((SELECT max(pos) FROM records), 0)"
    " + 1)",
)
"""A purge's statements for the index, after its records are deleted."""

_TYPES = ", ".join("?" * len(INDEXED_TYPES))
_INSERT_WORDS = "INSERT INTO search_words (rowid, body) VALUES (?, ?)"
_DELETE_WORDS = "INSERT INTO search_words (search_words, rowid, body) VALUES ('delete', ?, ?)"
_LEFT_OUT = "INSERT OR IGNORE INTO search_left_out (session_id) VALUES (?)"
_MARKS = "SELECT upto, (SELECT below FROM search_backfill) FROM search_indexed"
_DUE = "SELECT upto, (SELECT max(pos) FROM records) FROM search_indexed"
_WAITING_TEXT = (
    "SELECT pos, session_id, type, payload FROM records "
    f"WHERE pos > ? AND session_id <> '' AND type IN ({_TYPES}) ORDER BY pos"
)
_SESSION_TEXT = (
    "SELECT pos, session_id, type, payload FROM records "
    f"WHERE session_id = ? AND pos >= ? AND type IN ({_TYPES})"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MESSAGE_BITS = 32
_LARGEST = 2**62  # a position bound SQLite takes (a cursor is text: any number)

_Statement = tuple[str, Any, bool]


def _entries(session_id: str, type_: str, payload: bytes) -> list[Entry]:
    record = Record(
        run_id="", agent_id="", session_id=session_id, turn_id="", event_key="",
        type=type_, timestamp=_EPOCH, payload=payload,
    )  # fmt: skip
    return index_entries(record)


def _text(entries: Sequence[Entry]) -> str:
    return "\n".join(entry.body for entry in entries)


def record_text(session_id: str, type_: str, payload: bytes) -> str:
    """The words a record gives the index: its messages' text, one per line ("" for a
    record with none), from its payload as stored. Deterministic: a purge recomputes it
    to delete the words."""
    return _text(_entries(session_id, type_, payload))


def hit_id(pos: int, message_index: int) -> int:
    """A message's place in the order of hits (and cursors): its record's position, then
    its index in the record."""
    return (pos << _MESSAGE_BITS) | message_index


def index_statements(records: Sequence[Record], *, sealed: bool) -> list[_Statement]:
    """What an append writes for the index: nothing, unless ``sealed`` (the store seals
    its records): then their sessions are counted as left out (once each)."""
    if not sealed:
        return []
    sessions = {(r.session_id,) for r in records if r.session_id and r.type in INDEXED_TYPES}
    return [(_LEFT_OUT, sorted(sessions), True)] if sessions else []


def _write_waiting(conn: sqlite3.Connection, upto: int, top: int) -> None:
    rows = conn.execute(_WAITING_TEXT, (upto, *INDEXED_TYPES)).fetchall()
    docs = [(row[0], record_text(*row[1:])) for row in rows]
    docs = [doc for doc in docs if doc[1]]
    if docs:
        conn.executemany(_INSERT_WORDS, docs)
    conn.execute("UPDATE search_indexed SET upto = ?", (top,))


def flush_due(conn: sqlite3.Connection) -> None:
    """Write the words of the waiting records if there are :data:`FLUSH_EVERY` records or
    more above the watermark (in the caller's write transaction, before its COMMIT).

    Their words are read from their payloads as stored: a damaged one is reported by
    ``check`` and by the search that reads it, not by every write after it.
    """
    upto, top = conn.execute(_DUE).fetchone()
    if top is not None and top - upto >= FLUSH_EVERY:
        _write_waiting(conn, upto, top)


def flush(conn: sqlite3.Connection) -> None:
    """Write the words of every waiting record now (what the record that fills a batch
    does, done early); in the caller's transaction, or its own."""
    upto, top = conn.execute(_DUE).fetchone()
    if top is not None and top > upto:
        _write_waiting(conn, upto, top)


def purge_statements(
    conn: sqlite3.Connection, session_ids: Sequence[str], *, sealed: bool
) -> tuple[int, list[_Statement]]:
    """How many messages of the first of ``session_ids`` the index holds (what its purge
    removes), and the statements deleting the words of them all (run before the records
    are deleted, in the same transaction). A sealed store indexed none.

    Contentless FTS5 deletes a row given the text it was given: it is recomputed from the
    payloads (a purge reads its sessions' records through their checksums first, and a
    damaged one refuses it, so they are the bytes the words were read from).
    """
    if sealed:
        return 0, []
    upto, below = conn.execute(_MARKS).fetchone()
    count = 0
    deletes = []
    for session_id in session_ids:
        for pos, sid, type_, payload in conn.execute(
            _SESSION_TEXT, (session_id, below or 0, *INDEXED_TYPES)
        ):
            entries = _entries(sid, type_, payload)
            if session_id == session_ids[0]:
                count += len(entries)
            if entries and pos <= upto:  # its words written
                deletes.append((pos, _text(entries)))
    return count, ([(_DELETE_WORDS, deletes, True)] if deletes else [])


def _filter(query: SearchQuery, table: str) -> tuple[list[str], list[object]]:
    return scope_filter(query, table, labels_table="session_labels", mark="?")


def _hits(rows: list[Any], query: SearchQuery) -> list[FoundEntry]:
    """The messages of ``rows`` (``pos`` and :data:`RECORD_COLUMNS`, newest first) that
    hold every term, below the query's cursor, newest first; checksums verified."""
    found = []
    records = decode_records([row[1:] for row in rows])
    for row, record in zip(rows, records, strict=True):
        pos = row[0]
        for entry in reversed(index_entries(record)):
            id_ = hit_id(pos, entry.message_index)
            if query.before is not None and id_ >= query.before:
                continue
            if holds(query.terms, entry.body):
                found.append(FoundEntry(
                    id_, record.session_id, record.run_id, int(record.id), entry.message_index,
                    entry.role, record.timestamp, entry.body,
                ))  # fmt: skip
    return found


def holds(terms: Sequence[str], body: str) -> bool:
    """Whether ``body`` holds every term as a whole word, in any case: what
    :func:`~agentledger.storage.search.matches` answers, found without reading every word
    of the message (a word is a run of letters and digits of the lower-cased text, and
    ``[^\\W_]`` is ``str.isalnum``)."""
    low = body.lower()
    for term in terms:
        at = low.find(term)
        while at >= 0:
            end = at + len(term)
            if (at == 0 or not low[at - 1].isalnum()) and (
                end == len(low) or not low[end].isalnum()
            ):
                break
            at = low.find(term, at + 1)
        else:
            return False
    return True


def _bound(query: SearchQuery, upto: int | None) -> int:
    """The highest position a page may hold."""
    bound = _LARGEST if upto is None else upto
    if query.before is not None:
        bound = min(bound, query.before >> _MESSAGE_BITS)
    return max(-1, bound)


_ROW = f"r.pos, {RECORD_COLUMNS}"
_ESCAPE = "X'5C75'"  # the bytes of a JSON escape: backslash, u


def _sieve(query: SearchQuery) -> tuple[str, list[object]]:
    """A first sieve of the waiting records, on their payloads' bytes, that never drops a
    hit: a message's word of ASCII letters is in its record's JSON as it is (JSON changes
    no letter, and re-encoded tool inputs keep strings and keys), unless the JSON spells
    a character as an escape (backslash, u), which lets the record through. LIKE ignores
    the case of ASCII letters; a word with digits may come from a number written
    differently, so it is not sieved."""
    words = [term for term in query.terms if term.isascii() and term.isalpha()]
    if not words:
        return "", []
    likes = " AND ".join("CAST(r.payload AS TEXT) LIKE ?" for _ in words)
    return f"(instr(r.payload, {_ESCAPE}) > 0 OR ({likes}))", [f"%{w}%" for w in words]


def search(conn: sqlite3.Connection, query: SearchQuery) -> SearchPage:
    """One page of ``query``'s hits, newest first, and the sessions it could not see.

    The records above the watermark (fewer than :data:`FLUSH_EVERY`, unless a flush is
    due) are read and matched one by one, first; the FTS5 table answers for the others,
    its candidates read and matched the same way.
    """
    upto, below = conn.execute(_MARKS).fetchone()
    found: list[FoundEntry] = []
    if conn.execute("SELECT 1 FROM encryption").fetchone() is None:  # sealed: no text
        where, params = _filter(query, "r")
        where[:0] = ["r.pos > ?", "r.pos <= ?", "r.session_id <> ''", f"r.type IN ({_TYPES})"]
        params[:0] = [upto, _bound(query, None), *INDEXED_TYPES]
        sieve, words = _sieve(query)
        if sieve:
            where.append(sieve)
            params += words
        waiting = conn.execute(
            f"SELECT {_ROW} FROM records AS r WHERE {' AND '.join(where)} ORDER BY r.pos DESC",
            params,
        )
        while len(found) < query.fetch and (rows := waiting.fetchmany(query.fetch)):
            found += _hits(rows, query)
        found = found[: query.fetch]
        # Up to the same ``upto``: a record written since the first read (each statement
        # has its own snapshot) was read above, not again here.
        found += _written(conn, query, _bound(query, upto), query.fetch - len(found))
    left_where, left_params = _filter(query, "o")
    left_sql = "SELECT count(*) FROM search_left_out AS o"
    if left_where:
        left_sql += " WHERE " + " AND ".join(left_where)
    (left_out,) = conn.execute(left_sql, left_params).fetchone()
    return search_page(query, found, left_out=int(left_out), complete=below is None)


def _written(
    conn: sqlite3.Connection, query: SearchQuery, bound: int, need: int
) -> list[FoundEntry]:
    """Up to ``need`` hits among the records whose words the FTS5 table holds, at
    positions up to ``bound``, newest first (a page of candidates at a time: a record
    whose terms are in different messages is no hit)."""
    match = " ".join(f'"{term}"' for term in query.terms)  # each a word: letters and digits
    where, params = _filter(query, "r")
    sql = (
        f"SELECT {_ROW} FROM search_words CROSS JOIN records AS r "
        "ON r.pos = search_words.rowid WHERE search_words MATCH ? "
        f"AND search_words.rowid <= ? {''.join(' AND ' + w for w in where)} "
        "ORDER BY search_words.rowid DESC LIMIT ?"
    )
    found: list[FoundEntry] = []
    while need > 0 and bound > 0:
        rows = conn.execute(sql, [match, bound, *params, need]).fetchall()
        hits = _hits(rows, query)[:need]
        found += hits
        if len(rows) < need:  # fewer candidates than asked for: no more
            break
        need -= len(hits)
        bound = rows[-1][0] - 1
    return found


_BATCH = (
    f"SELECT pos, {RECORD_COLUMNS} FROM records "
    f"WHERE pos < ? AND session_id <> '' AND type IN ({_TYPES}) "
    "ORDER BY pos DESC LIMIT ?"
)
_LEFT = f"SELECT count(*) FROM records WHERE pos < ? AND session_id <> '' AND type IN ({_TYPES})"


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
            row = conn.execute("SELECT below FROM search_backfill").fetchone()
            if row is None:
                conn.execute("COMMIT")
                return done
            below = int(row[0])
            if left < 0:
                (left,) = conn.execute(_LEFT, (below, *INDEXED_TYPES)).fetchone()
            sealed = conn.execute("SELECT 1 FROM encryption").fetchone() is not None
            rows = conn.execute(_BATCH, (below, *INDEXED_TYPES, batch)).fetchall()
            if rows:
                below = rows[-1][0]
            # Each row's checksum verified: a damaged record is corruption, not left out.
            records = decode_records([row[1:] for row in rows])
            if sealed:
                sessions = sorted({(record.session_id,) for record in records})
                conn.executemany(_LEFT_OUT, sessions)
            else:
                docs = [
                    (row[0], _text(index_entries(record)))
                    for row, record in zip(rows, records, strict=True)
                ]
                # In ascending order: one FTS5 segment for the batch, not one per record.
                conn.executemany(_INSERT_WORDS, [doc for doc in reversed(docs) if doc[1]])
            left = max(0, left - len(rows))
            if len(rows) < batch:
                left = 0
            if left == 0:
                conn.execute("DELETE FROM search_backfill")
            else:
                conn.execute("UPDATE search_backfill SET below = ?", (below,))
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
