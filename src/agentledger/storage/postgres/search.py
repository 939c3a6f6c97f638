"""Search on PostgreSQL [G1]: two columns of the record's own row and their indexes.

The SQLite module's twin (:mod:`agentledger.storage.sqlite.search`), kept on the row of
each indexed record (see :mod:`agentledger.storage.search`), not in a table of its own:

- ``words``: a ``tsvector`` of the lexemes of every message of the record
  (:func:`record_words`: no positions, no stemming, the words every backend reads),
  under a GIN index of the rows that have it;
- ``search_pos``: where the record stands in newest-first order, from a sequence when
  the record is written, under a unique b-tree of the rows that have it.

Both are NULL for a record not indexed (no session, no text, a sealed session), so it
costs the indexes nothing. They are written by the statement that writes the record,
in its transaction, so an append adds no row, only two index entries. A message
(:class:`~agentledger.storage.search.FoundEntry`) is found at search time: the records
whose words hold every term are read newest first, their payloads decoded (each one's
checksum verified) and each message that holds every term is a hit
(:func:`~agentledger.storage.search.matches`). A hit's position, which the cursor
carries, is ``search_pos * 2**32 + message index``: newest record first, and in a record
its last message first, as the entries' ids ordered them before.

A record's position is taken when it is written, not when it commits: in one session
the two orders agree (the session row is locked until commit), across sessions a write
that took its position first may commit last. A page is the newest matches, read as
:func:`search_reader` says; a write in flight while a page is read has a position below
the page's newest, and once committed it is on the page its position falls in.

Migration 15 created the index as a table of one row per message; migration 17
(:data:`MIGRATION_17`) moves it onto the records, positions in the same order. The
records stored before search existed are indexed by :func:`build_index` in batches,
each its own transaction, newest first (by their time), so a build that stops resumes
where it was (``agentledger_search_backfill``); they take positions below every one
taken since.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from agentledger.storage import lifecycle, payloads
from agentledger.storage.postgres.pages import decide
from agentledger.storage.postgres.reader import Loader
from agentledger.storage.postgres.rows import RECORD_COLUMNS, record_from_row, unverified_record
from agentledger.storage.search import (
    FoundEntry,
    SearchPage,
    SearchQuery,
    index_entries,
    matches,
    scope_filter,
    search_page,
    words_of,
)
from agentledger.storage.types import Record

__all__ = [
    "GUESSED_LEFT_OUT",
    "INDEXED_TYPES",
    "MESSAGE_BITS",
    "MIGRATION",
    "MIGRATION_17",
    "POSITION",
    "PURGE",
    "build_index",
    "count_entries",
    "lexemes_of",
    "note_left_out",
    "record_words",
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
"""Migration 15: the search index as a table of one row per message (moved onto the
records by migration 17), and where its build starts (with an index of the older
records in the build's order, dropped when the build ends)."""

MIGRATION_17 = """
ALTER TABLE agentledger_records ADD COLUMN search_pos bigint, ADD COLUMN words tsvector;
CREATE SEQUENCE agentledger_search_pos;
SELECT setval('agentledger_search_pos', last_value, is_called) FROM agentledger_search_id_seq;
UPDATE agentledger_records r SET search_pos = e.pos, words = e.words
    FROM (SELECT run_id, seq, max(id) AS pos,
                 string_agg(strip(words)::text, ' ')::tsvector AS words
          FROM agentledger_search GROUP BY run_id, seq) AS e
    WHERE r.run_id = e.run_id AND r.seq = e.seq;
DROP TABLE agentledger_search;
CREATE UNIQUE INDEX agentledger_records_search_pos ON agentledger_records (search_pos)
    WHERE search_pos IS NOT NULL;
CREATE INDEX agentledger_records_words ON agentledger_records USING gin (words)
    WHERE words IS NOT NULL;
"""
"""Migration 17: the search index moved onto the records' rows (one per record, not one
per message: an append writes no row of its own), each record at the position of its
last entry, so the order and the build's progress stay as they were."""

MESSAGE_BITS = 32
"""A hit's position is its record's ``search_pos`` shifted left by this, plus its
message's index: a record holds fewer than 2**32 messages (a ``bytea`` holds at most
1 GB, and a message takes at least 3 bytes of it). A position is a Python integer in the
cursor's text, so it may be wider than a ``bigint``; only ``search_pos`` goes to SQL."""

POSITION = "CASE WHEN %s::tsvector IS NULL THEN NULL ELSE nextval('agentledger_search_pos') END"
"""A record's ``search_pos`` as the INSERT writing it reads it from its ``words``."""

PURGE = ("DELETE FROM agentledger_search_left_out WHERE session_id = %(s)s",)
"""A purge's statement for the index, in its transaction (the words go with the records)."""

GUESSED_LEFT_OUT = (
    "x AS (INSERT INTO agentledger_search_left_out (session_id) SELECT %(sid)s "
    "WHERE EXISTS (SELECT 1 FROM i) ON CONFLICT DO NOTHING) "
)
"""A sealed session's one-statement append: the session is left out of the index."""

LEFT_OUT = (
    "INSERT INTO agentledger_search_left_out (session_id) SELECT unnest(%s::text[]) "
    "ON CONFLICT DO NOTHING"
)

_LONGEST = 2046
"""The longest lexeme PostgreSQL keeps, in bytes (its parser skips longer words)."""


_ASCII_WORDS = bytes(
    c + 32 if 65 <= c <= 90 else c if 48 <= c <= 57 or 97 <= c <= 122 else 32 for c in range(256)
)
"""Each ASCII byte as :func:`~agentledger.storage.search.words_of` reads it: a letter
lower-cased, a digit kept, anything else a space (one pass in C, for each append)."""


def lexemes_of(body: str) -> str:
    """``body``'s words, each once, as the text of a ``tsvector`` (each word is letters
    and digits, so needs no quotes); words longer than PostgreSQL keeps are left out,
    as its own parser leaves them out."""
    if body.isascii():  # the words of words_of, read a byte at a time
        text = body.encode()
        found = dict.fromkeys(text.translate(_ASCII_WORDS).split())
        if len(text) <= _LONGEST:  # no word of it is too long
            return b" ".join(found).decode()
        return b" ".join(w for w in found if len(w) <= _LONGEST).decode()
    words = dict.fromkeys(words_of(body).split())
    return " ".join(w for w in words if len(w) * 4 <= _LONGEST or len(w.encode()) <= _LONGEST)


def tsquery_of(terms: Sequence[str]) -> str:
    """The ``tsquery`` text of entries holding every one of ``terms`` (each letters and
    digits, quoted all the same)."""
    return " & ".join(f"'{term}'" for term in terms)


def record_words(record: Record) -> str | None:
    """The ``words`` of ``record`` (the lexemes of all its messages) as it is written in
    plaintext; None: the record is not indexed (no session, or no text)."""
    if record.type not in INDEXED_TYPES:
        return None
    entries = index_entries(record)
    if not entries:
        return None
    return lexemes_of(" ".join(e.body for e in entries))


async def note_left_out(conn: AsyncConnection[TupleRow], records: Sequence[Record]) -> None:
    """A sealed store's write of ``records``: their sessions are counted as left out
    (sent, not awaited: pipeline friendly)."""
    sessions = sorted({r.session_id for r in records if r.session_id and r.type in INDEXED_TYPES})
    if sessions:
        await conn.execute(LEFT_OUT, (sessions,))


_INDEXED = (
    f"SELECT {RECORD_COLUMNS} FROM agentledger_records "
    "WHERE session_id = %s AND search_pos IS NOT NULL"
)


async def count_entries(conn: AsyncConnection[TupleRow], session_id: str) -> int:
    """How many messages of ``session_id`` are indexed (what its purge deletes): its
    indexed records' messages, counted as written (a damaged record is still purged)."""
    cur = await conn.execute(_INDEXED, (session_id,))
    count = 0
    for row in await cur.fetchall():
        record = unverified_record(row) or record_from_row(row)
        count += len(index_entries(record))
    return count


def _filter(query: SearchQuery, table: str) -> tuple[list[str], list[object]]:
    return scope_filter(query, table, labels_table="agentledger_session_labels", mark="%s")


WINDOW = 2000
"""How many of the newest indexed records a page reads in order before it asks the GIN
index."""

_CANDIDATE = f"e.search_pos, {', '.join(f'e.{c.strip()}' for c in RECORD_COLUMNS.split(','))}"


def _hits(query: SearchQuery, rows: Sequence[TupleRow], below: int | None) -> list[FoundEntry]:
    """The messages of the records ``rows`` (newest first) that hold every term, newest
    first, each position below ``below``."""
    found = []
    for pos, *columns in rows:
        record = record_from_row(tuple(columns))  # its checksum verified
        base = int(pos) << MESSAGE_BITS
        for e in reversed(index_entries(record)):
            at = base + e.message_index
            if (below is None or at < below) and matches(query.terms, e.body):
                sid, rid = record.session_id, record.run_id
                found.append(FoundEntry(at, sid, rid, int(record.id), e.message_index,
                                        e.role, record.timestamp, e.body))  # fmt: skip
    return found


def search_reader(query: SearchQuery) -> Callable[[Loader], Awaitable[SearchPage]]:
    """The read of one page of ``query``'s hits, newest first.

    A record's words hold the words of all its messages, so a record they match may hold
    no message that has every term: records are read in batches, newest first, until the
    page is full or none is left. Across sessions a page is read in two steps, because no
    one plan serves every word: among the newest :data:`WINDOW` indexed records within
    the filter, read in position order, which fills a page of a common word at once;
    then, if the page is not full, among the older ones through the GIN index (every
    match, then sorted): a word that did not fill the window has few. (One ``ORDER BY
    search_pos DESC LIMIT`` statement leaves the choice to the planner, which cannot tell
    a rare word from a common one, and reads the whole table for a rare one.) In one
    session the planner is left to find its records (by the session, or by the GIN
    index) and sort them, never by walking every session's positions.
    """

    async def read(loader: Loader) -> SearchPage:
        if query.session_id:
            await decide(loader, lambda r: lifecycle.require_session(r, query.session_id))
        conn = loader.conn
        scope, scope_params = _filter(query, "e")
        scope.insert(0, "e.search_pos IS NOT NULL")
        if query.before is not None:
            scope.append(f"e.search_pos <= {query.before >> MESSAGE_BITS}")
        left_where, left_params = _filter(query, "o")
        left = " AND ".join(left_where) or "true"
        window = "NULL::bigint"
        if not query.session_id:
            window = (
                f"(SELECT e.search_pos FROM agentledger_records e WHERE {' AND '.join(scope)} "
                f"ORDER BY e.search_pos DESC OFFSET {WINDOW - 1} LIMIT 1)"
            )
        cur = await conn.execute(
            f"SELECT {window}, "
            f"(SELECT count(*) FROM agentledger_search_left_out o WHERE {left}), "
            "EXISTS (SELECT 1 FROM agentledger_search_backfill)",
            [*(scope_params if not query.session_id else []), *left_params],
        )
        counts = await cur.fetchone()
        assert counts is not None
        edge = None if counts[0] is None else int(counts[0])  # None: one step reads them all
        where = ["e.words @@ %s::tsquery", *scope]
        params: list[object] = [tsquery_of(query.terms), *scope_params]
        found: list[FoundEntry] = []

        async def step(bounds: list[str], order: str) -> None:
            """Read the matching records within ``bounds``, newest first, in batches."""
            upper = None
            while len(found) < query.fetch:
                more: list[str] = [] if upper is None else [f"e.search_pos < {upper}"]
                cur = await conn.execute(
                    f"SELECT {_CANDIDATE} FROM agentledger_records e "
                    f"WHERE {' AND '.join([*where, *bounds, *more])} "
                    f"ORDER BY {order} DESC LIMIT %s",
                    [*params, query.fetch],
                )
                rows = await cur.fetchall()
                found.extend(_hits(query, rows, query.before))
                if len(rows) < query.fetch:
                    return
                upper = int(rows[-1][0])

        if query.session_id:
            # "session_seq IS NOT NULL" (true of every session's record): the session's
            # records by its index; "+ 0": no plan walking every session's positions.
            await step(["e.session_seq IS NOT NULL"], "e.search_pos + 0")
        elif edge is None:
            await step([], "e.search_pos")
        else:
            await step([f"e.search_pos >= {edge}"], "e.search_pos")
            if len(found) < query.fetch:
                # "+ 0": no plan reading the positions in order, so the GIN index finds them.
                await step([f"e.search_pos < {edge}"], "e.search_pos + 0")
        page = found[: query.fetch]
        return search_page(query, page, left_out=int(counts[1]), complete=not counts[2])

    return read


_BATCH = (
    f"SELECT {RECORD_COLUMNS} FROM agentledger_records "
    "WHERE session_id <> '' AND type = ANY(%(types)s) "
    'AND (%(ts)s::timestamptz IS NULL OR (ts, run_id COLLATE "C", seq) < '
    '(%(ts)s, %(run_id)s COLLATE "C", %(seq)s)) '
    'ORDER BY ts DESC, run_id COLLATE "C" DESC, seq DESC LIMIT %(batch)s'
)
_SET_WORDS = (
    "UPDATE agentledger_records r SET search_pos = u.p, words = u.w::tsvector "
    "FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::text[]) AS u (rid, seq, p, w) "
    "WHERE r.run_id = u.rid AND r.seq = u.seq"
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
            indexed: list[tuple[str, int, int, str]] = []
            for row in rows:
                # Its checksum verified: a damaged record is corruption, not left out.
                record = record_from_row(row)
                if sealed:
                    sessions.add(record.session_id)
                    continue
                words = record_words(record)
                if words is not None:
                    indexed.append((record.run_id, int(record.id), next_id, words))
                    next_id -= 1
            if rows:
                run_id, ts, seq = rows[-1][0], rows[-1][6], rows[-1][8]
            if indexed:
                await conn.execute(_SET_WORDS, [list(c) for c in zip(*indexed, strict=True)])
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
