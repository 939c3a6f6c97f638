"""Search on PostgreSQL [G1]: a ``tsvector`` column of ``agentledger_search`` and its GIN index.

The SQLite module's twin (:mod:`agentledger.storage.sqlite.search`): one row per indexed
message (see :mod:`agentledger.storage.search`), its words a ``tsvector`` of the
lexemes :func:`lexemes_of` reads (no positions, no stemming: the words every backend
reads) written by the statement that writes the entry, in the transaction of its record;
a search asks for the same lexemes (:func:`tsquery_of`), so PostgreSQL's own parser
(which reads ``-1182`` as a number) never reads a message. An
entry's id comes from a sequence when it is written, not when it commits: in one session
the two orders agree (the session row is locked until commit), across sessions a write
that took its id first may commit last. A page is the newest matches (ids descending),
read as :func:`search_reader` says; a write in flight while a page is read has an id below
the page's newest, and once committed it is on the page its id falls in.

Migration 14 creates the table; the records stored before it are indexed by
:func:`build_index` in batches, each its own transaction, newest first (by their time),
so a build that stops resumes where it was (``agentledger_search_backfill``). Its
entries take ids below every id written since.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import msgspec
from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from agentledger.storage import lifecycle, payloads
from agentledger.storage.postgres.pages import decide
from agentledger.storage.postgres.reader import Loader
from agentledger.storage.postgres.rows import RECORD_COLUMNS, record_from_row
from agentledger.storage.search import (
    FoundEntry,
    SearchPage,
    SearchQuery,
    index_entries,
    scope_filter,
    search_page,
    words_of,
)
from agentledger.storage.types import Record

__all__ = [
    "GUESSED_INSERT",
    "GUESSED_LEFT_OUT",
    "INDEXED_TYPES",
    "MIGRATION",
    "PURGE",
    "build_index",
    "count_entries",
    "entry_rows",
    "guessed_params",
    "insert_entries",
    "lexemes_of",
    "search_reader",
    "tsquery_of",
]

INDEXED_TYPES = [*sorted(payloads.TRANSCRIPT_TYPES), payloads.TRANSCRIPT_WINDOW]
"""The record types whose text is indexed."""

MIGRATION = """
CREATE TABLE agentledger_search (
    id          bigserial PRIMARY KEY,
    session_id  text NOT NULL,
    run_id      text NOT NULL,
    seq         bigint NOT NULL,
    message     integer NOT NULL,
    role        text NOT NULL,
    ts          timestamptz NOT NULL,
    body        text NOT NULL,
    words       tsvector NOT NULL
);
CREATE INDEX agentledger_search_words ON agentledger_search USING gin (words);
CREATE INDEX agentledger_search_by_session ON agentledger_search (session_id, id);
CREATE TABLE agentledger_search_left_out (session_id text PRIMARY KEY);
CREATE TABLE agentledger_search_backfill (
    id       integer PRIMARY KEY CHECK (id = 1),
    ts       timestamptz,
    run_id   text,
    seq      bigint,
    next_id  bigint NOT NULL
);
INSERT INTO agentledger_search_backfill (id, next_id)
    SELECT 1, -1 WHERE EXISTS (SELECT 1 FROM agentledger_records);
DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM agentledger_records) THEN
        CREATE INDEX agentledger_search_backfill_order
            ON agentledger_records (ts DESC, run_id COLLATE "C" DESC, seq DESC)
            WHERE session_id <> '' AND type IN ('transcript_messages_appended',
            'transcript_messages_seeded', 'transcript_window_applied');
    END IF;
END $$;
"""
"""Migration 14: the search index, empty, and where its build starts (with an index of
the older records in the build's order, dropped when the build ends)."""

PURGE = (
    "DELETE FROM agentledger_search WHERE session_id = %(s)s",
    "DELETE FROM agentledger_search_left_out WHERE session_id = %(s)s",
)
"""A purge's statements for the index, in its transaction."""

_COLUMNS = "session_id, run_id, seq, message, role, ts, body, words"
# The entries travel as one JSON array of arrays (one parameter): adapting eight array
# parameters cost the client more than the database spent writing the entries.
_FROM_JSON = (
    "SELECT u->>0, u->>1, (u->>2)::bigint, (u->>3)::integer, u->>4, (u->>5)::timestamptz, "
    "u->>6, (u->>7)::tsvector FROM json_array_elements({}::json) AS u"
)
_INSERT = f"INSERT INTO agentledger_search ({_COLUMNS}) " + _FROM_JSON.format("%s")
_INSERT_WITH_ID = (
    f"INSERT INTO agentledger_search (id, {_COLUMNS}) "
    "SELECT i, a, b, c, d, e, f, g, h::tsvector FROM "
    "unnest(%s::bigint[], %s::text[], %s::text[], %s::bigint[], %s::integer[], %s::text[], "
    "%s::timestamptz[], %s::text[], %s::text[]) AS u (i, a, b, c, d, e, f, g, h)"
)
GUESSED_INSERT = (
    f"x AS (INSERT INTO agentledger_search ({_COLUMNS}) "
    + _FROM_JSON.format("%(x)s")
    + " WHERE EXISTS (SELECT 1 FROM i)) "
)
"""The index entries of a one-statement append, written only if its records were."""
GUESSED_LEFT_OUT = (
    "x AS (INSERT INTO agentledger_search_left_out (session_id) SELECT %(sid)s "
    "WHERE EXISTS (SELECT 1 FROM i) ON CONFLICT DO NOTHING) "
)
"""A sealed session's one-statement append: the session is left out of the index."""


def guessed_params(records: Sequence[Record]) -> dict[str, object] | None:
    """The parameters of :data:`GUESSED_INSERT` for ``records``; None: nothing to index."""
    rows = entry_rows(records)
    if not rows:
        return None
    return {"x": _json(rows)}


LEFT_OUT = (
    "INSERT INTO agentledger_search_left_out (session_id) SELECT unnest(%s::text[]) "
    "ON CONFLICT DO NOTHING"
)
_COUNT = "SELECT count(*) FROM agentledger_search WHERE session_id = %s"

EntryRow = tuple[str, str, int, int, str, datetime, str, str]


_LONGEST = 2046
"""The longest lexeme PostgreSQL keeps, in bytes (its parser skips longer words)."""


def lexemes_of(body: str) -> str:
    """``body``'s words, each once, as the text of a ``tsvector`` (each word is letters
    and digits, so needs no quotes); words longer than PostgreSQL keeps are left out,
    as its own parser leaves them out."""
    words = dict.fromkeys(words_of(body).split())
    return " ".join(w for w in words if len(w) * 4 <= _LONGEST or len(w.encode()) <= _LONGEST)


def tsquery_of(terms: Sequence[str]) -> str:
    """The ``tsquery`` text of entries holding every one of ``terms`` (each letters and
    digits, quoted all the same)."""
    return " & ".join(f"'{term}'" for term in terms)


def entry_rows(records: Sequence[Record]) -> list[EntryRow]:
    """The ``agentledger_search`` rows of ``records`` (ids set), in order."""
    return [
        (
            r.session_id,
            r.run_id,
            int(r.id),
            e.message_index,
            e.role,
            r.timestamp,
            e.body,
            lexemes_of(e.body),
        )
        for r in records
        if r.type in INDEXED_TYPES
        for e in index_entries(r)
    ]


_ENCODE = msgspec.json.Encoder()


def _json(rows: Sequence[EntryRow]) -> str:
    """``rows`` as the JSON the insert reads (times in RFC 3339, to the microsecond)."""
    return _ENCODE.encode(rows).decode()


def _columns(rows: Sequence[tuple[object, ...]]) -> list[list[object]]:
    return [list(column) for column in zip(*rows, strict=True)]


async def insert_entries(
    conn: AsyncConnection[TupleRow], records: Sequence[Record], *, sealed: bool
) -> None:
    """Index ``records`` as they are written (sent, not awaited: pipeline friendly);
    ``sealed``: the store seals them, so their sessions are counted as left out."""
    if sealed:
        sessions = sorted(
            {r.session_id for r in records if r.session_id and r.type in INDEXED_TYPES}
        )
        if sessions:
            await conn.execute(LEFT_OUT, (sessions,))
        return
    rows = entry_rows(records)
    if rows:
        await conn.execute(_INSERT, (_json(rows),))


async def count_entries(conn: AsyncConnection[TupleRow], session_id: str) -> int:
    """How many index entries ``session_id`` has (what its purge deletes)."""
    cur = await conn.execute(_COUNT, (session_id,))
    row = await cur.fetchone()
    return int(row[0]) if row is not None else 0


def _filter(query: SearchQuery, table: str) -> tuple[list[str], list[object]]:
    return scope_filter(query, table, labels_table="agentledger_session_labels", mark="%s")


WINDOW = 2000
"""How many of the newest entries a page reads in order before it asks the GIN index."""

_HIT = "e.id, e.session_id, e.run_id, e.seq, e.message, e.role, e.ts, e.body"


def search_reader(query: SearchQuery) -> Callable[[Loader], Awaitable[SearchPage]]:
    """The read of one page of ``query``'s hits, newest first.

    A page is read in two steps, because no one plan serves every word: among the newest
    :data:`WINDOW` entries within the filter, read in id order, which fills a page of a
    common word at once; then, if the page is not full, among the older ones through the
    GIN index (every match, then sorted): a word that did not fill the window has few.
    (One ``ORDER BY id DESC LIMIT`` statement leaves the choice to the planner, which
    cannot tell a rare word from a common one, and reads the whole table for a rare one.)
    """

    async def read(loader: Loader) -> SearchPage:
        if query.session_id:
            await decide(loader, lambda r: lifecycle.require_session(r, query.session_id))
        conn = loader.conn
        where, params = _filter(query, "e")
        where.insert(0, "e.words @@ %s::tsquery")
        params.insert(0, tsquery_of(query.terms))
        if query.before is not None:
            where.append("e.id < %s")
            params.append(query.before)
        scope, scope_params = where[1:], params[1:]
        left_where, left_params = _filter(query, "o")
        left = " AND ".join(left_where) or "true"
        cur = await conn.execute(
            "SELECT (SELECT e.id FROM agentledger_search e "
            f"WHERE {' AND '.join(['true', *scope])} ORDER BY e.id DESC "
            f"OFFSET {WINDOW - 1} LIMIT 1), "
            f"(SELECT count(*) FROM agentledger_search_left_out o WHERE {left}), "
            "EXISTS (SELECT 1 FROM agentledger_search_backfill)",
            [*scope_params, *left_params],
        )
        counts = await cur.fetchone()
        assert counts is not None
        edge = None if counts[0] is None else int(counts[0])  # None: the window has them all
        window = where if edge is None else [*where, f"e.id >= {edge}"]
        cur = await conn.execute(
            f"SELECT {_HIT} FROM agentledger_search e WHERE {' AND '.join(window)} "
            "ORDER BY e.id DESC LIMIT %s",
            [*params, query.fetch],
        )
        found = [FoundEntry(*row) for row in await cur.fetchall()]  # the body, not the words
        if edge is not None and len(found) < query.fetch:
            # "e.id + 0": no plan reading the ids in order, so the GIN index finds them.
            cur = await conn.execute(
                f"SELECT {_HIT} FROM agentledger_search e "
                f"WHERE {' AND '.join([*where, f'e.id < {edge}'])} "
                "ORDER BY e.id + 0 DESC LIMIT %s",
                [*params, query.fetch - len(found)],
            )
            found += [FoundEntry(*row) for row in await cur.fetchall()]
        return search_page(query, found, left_out=int(counts[1]), complete=not counts[2])

    return read


_BATCH = (
    f"SELECT {RECORD_COLUMNS} FROM agentledger_records "
    "WHERE session_id <> '' AND type = ANY(%(types)s) "
    'AND (%(ts)s::timestamptz IS NULL OR (ts, run_id COLLATE "C", seq) < '
    '(%(ts)s, %(run_id)s COLLATE "C", %(seq)s)) '
    'ORDER BY ts DESC, run_id COLLATE "C" DESC, seq DESC LIMIT %(batch)s'
)


async def build_index(
    conn: AsyncConnection[TupleRow],
    *,
    batch: int = 1000,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Index the records stored before the index existed, ``batch`` per transaction,
    newest first; resumable; ``progress(done)`` after each batch. ``conn`` in autocommit.

    Raises:
        CorruptRecordError: a record to index fails its checksum (nothing of its batch
            is written; the build stops there).

    Returns:
        How many records this call indexed (0 when the index was built).
    """
    done = 0
    while True:
        async with conn.transaction():
            cur = await conn.execute(
                "SELECT ts, run_id, seq, next_id FROM agentledger_search_backfill FOR UPDATE"
            )
            row = await cur.fetchone()
            if row is None:
                return done
            ts, run_id, seq, next_id = row
            cur = await conn.execute("SELECT EXISTS (SELECT 1 FROM agentledger_encryption)")
            sealed_row = await cur.fetchone()
            sealed = bool(sealed_row and sealed_row[0])
            params: dict[str, Any] = {
                "types": INDEXED_TYPES, "ts": ts, "run_id": run_id, "seq": seq, "batch": batch,
            }  # fmt: skip
            cur = await conn.execute(_BATCH, params)
            rows = await cur.fetchall()
            sessions: set[str] = set()
            with_ids: list[tuple[object, ...]] = []
            for row in rows:
                # Its checksum verified: a damaged record is corruption, not left out.
                record = record_from_row(row)
                if sealed:
                    sessions.add(record.session_id)
                    continue
                entries = entry_rows([record])
                first = next_id - len(entries) + 1  # a record's messages in order
                with_ids += [(first + i, *e) for i, e in enumerate(entries)]
                next_id = first - 1
            if rows:
                run_id, ts, seq = rows[-1][0], rows[-1][6], rows[-1][8]
            if with_ids:
                await conn.execute(_INSERT_WITH_ID, _columns(with_ids))
            if sessions:
                await conn.execute(LEFT_OUT, (sorted(sessions),))
            if len(rows) < batch:
                await conn.execute("DELETE FROM agentledger_search_backfill")
                await conn.execute("DROP INDEX IF EXISTS agentledger_search_backfill_order")
            else:
                await conn.execute(
                    "UPDATE agentledger_search_backfill SET ts = %s, run_id = %s, seq = %s, "
                    "next_id = %s",
                    (ts, run_id, seq, next_id),
                )
        done += len(rows)
        if progress is not None:
            progress(done)
        if len(rows) < batch:
            return done
