"""``check``'s audit of the SQLite search index [G1]: its words against the records.

The index holds no copy of the text (see :mod:`.search`): each indexed record whose words
were written (at or below the watermark, and not in the range the build has still to
reach) has one FTS5 row of exactly the words of :func:`.search.record_text`; a record
still waiting, or one with no text, has none, and no FTS5 row is of anything else. A
sealed store holds no words at all and counts each session with transcript records as
left out. Each record's checksum is verified; a damaged one is reported (its words are
not compared). Words are compared exactly where the text is ASCII, where Python reads
words as FTS5 does; each record's words are kept as their count and a sum of their
hashes, so the audit's memory grows with the records, not with their words.
"""

from __future__ import annotations

import sqlite3
import zlib

from agentledger.errors import CorruptRecordError
from agentledger.storage.search import index_entries, terms_of
from agentledger.storage.search_check import left_out_findings
from agentledger.storage.sqlite.rows import RECORD_COLUMNS, decode_record
from agentledger.storage.sqlite.search import INDEXED_TYPES

__all__ = ["open_vocabulary", "search_problems"]

_INDEXED = ", ".join(f"'{t}'" for t in INDEXED_TYPES)


def open_vocabulary(conn: sqlite3.Connection) -> None:
    """A temporary view of the words the FTS5 index holds, for :func:`search_problems`
    (made before the connection turns query-only; it writes nothing to the file)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'search_words'").fetchone():
        conn.execute(
            "CREATE VIRTUAL TABLE temp.search_vocabulary "
            "USING fts5vocab(main, search_words, instance)"
        )


def _digest(terms: list[str]) -> tuple[int, int]:
    return len(terms), sum(zlib.crc32(t.encode()) for t in terms)


def search_problems(conn: sqlite3.Connection, sealed: bool) -> list[str]:
    """Each difference between the search index and the records, as a sentence."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'search_words'").fetchone():
        return []
    upto, below = conn.execute(
        "SELECT upto, coalesce((SELECT below FROM search_backfill), 0) FROM search_indexed"
    ).fetchone()
    words: dict[int, tuple[int, int]] = {}
    for term, doc in conn.execute("SELECT term, doc FROM temp.search_vocabulary"):
        count, total = words.get(doc, (0, 0))
        words[doc] = (count + 1, total + zlib.crc32(term.encode()))
    problems: list[str] = []
    sealed_sessions: set[str] = set()
    for pos, *row in conn.execute(
        f"SELECT pos, {RECORD_COLUMNS} FROM records WHERE session_id <> '' "
        f"AND type IN ({_INDEXED}) ORDER BY pos"
    ):
        try:
            record = decode_record(row)
        except CorruptRecordError as e:
            problems.append(str(e))
            words.pop(pos, None)  # the words of what it was: not comparable
            continue
        if pos < below:  # the build has not reached it: no words yet
            continue
        if sealed:
            sealed_sessions.add(record.session_id)
            continue
        if pos > upto:  # waiting: no words yet
            continue
        body = "\n".join(entry.body for entry in index_entries(record))
        have, want = words.pop(pos, (0, 0)), _digest(terms_of(body))
        if have == want or (have[0] and not body.isascii()):
            continue
        where = f"session {record.session_id!r}, run {record.run_id!r}, record {record.id}"
        if not have[0]:
            problems.append(f"search index words missing for a record: {where}")
        else:
            problems.append(f"search index words disagreeing with their record: {where}")
    if sealed:
        left_out = [sid for (sid,) in conn.execute("SELECT session_id FROM search_left_out")]
        problems += left_out_findings(sealed_sessions, left_out)
    problems += [
        f"search index words of no indexed record: position {pos}" for pos in sorted(words)
    ]
    return problems
