"""An invariant checker for a PostgreSQL store: the SQLite checker's twin.

It only reads, in one ``REPEATABLE READ READ ONLY`` transaction (one
snapshot), and returns the violations it found as sentences (an empty list
means consistent). The same checks as :mod:`agentledger.storage.sqlite.check`,
on this backend's tables: a checkpoint lives on its run row, a record's
session position is ``session_seq``.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import TupleRow

from agentledger.errors import AgentledgerError, CorruptRecordError
from agentledger.storage import accounting, payloads
from agentledger.storage.integrity import verified_tool_result
from agentledger.storage.invariants import run_problems
from agentledger.storage.postgres import migrations, search
from agentledger.storage.postgres import usage as usage_schema
from agentledger.storage.postgres.apply import USAGE
from agentledger.storage.postgres.rows import RECORD_COLUMNS, record_from_row
from agentledger.storage.search_check import left_out_findings
from agentledger.storage.types import Record
from agentledger.storage.usage_check import usage_findings
from agentledger.storage.validation import decode_stored_payload

__all__ = ["check_invariants", "stored_run_ids"]

_PAYLOADS: dict[str, type[Any]] = {
    payloads.RUN_STARTED: payloads.RunStarted,
    payloads.RUN_COMPLETED: payloads.RunCompleted,
    payloads.RUN_SUSPENDED: payloads.RunSuspended,
    payloads.CHILD_RUN_LINKED: payloads.ChildRunLinked,
    payloads.CANCELLATION_INTENT: payloads.CancellationIntent,
}

_RUNS = """
SELECT r.run_id, r.status, r.last_seq, r.session_id, r.parent_run_id,
       count(rec.seq), coalesce(min(rec.seq), 0), coalesce(max(rec.seq), 0),
       count(*) FILTER (WHERE rec.type = 'run_started' AND rec.seq = 1
                        AND rec.event_key = r.started_key),
       count(*) FILTER (WHERE rec.type = 'run_started'),
       count(*) FILTER (WHERE rec.type = 'run_completed'),
       count(*) FILTER (WHERE rec.type = 'run_suspended'),
       r.checkpoint_id IS NOT NULL,
       EXISTS (SELECT 1 FROM agentledger_sessions s WHERE s.id = r.session_id),
       EXISTS (SELECT 1 FROM agentledger_runs p WHERE p.run_id = r.parent_run_id)
FROM agentledger_runs r LEFT JOIN agentledger_records rec ON rec.run_id = r.run_id
GROUP BY r.run_id ORDER BY r.ord
"""

_KEYS = (
    ("terminal_key", "run_completed", "r.run_id"),
    ("suspension_key", "run_suspended", "r.run_id"),
    ("cancel_key", "runtime.cancellation_intent", "r.run_id"),
    ("link_key", "child_run_linked", "r.parent_run_id"),
)

# A session's messages (the same rules as SQLite's check).
_MESSAGES = (
    (
        "message of a missing or purged session",
        "SELECT run_id FROM agentledger_session_messages "
        "WHERE session_id NOT IN (SELECT id FROM agentledger_sessions)",
    ),
    (
        "message marked started without its run",
        "SELECT m.run_id FROM agentledger_session_messages m WHERE m.started = 1 "
        "AND NOT EXISTS (SELECT 1 FROM agentledger_runs r WHERE r.run_id = m.run_id "
        "AND r.session_id = m.session_id AND r.agent_id = m.agent_id)",
    ),
    (
        "message waiting though its run has started",
        "SELECT m.run_id FROM agentledger_session_messages m WHERE m.started = 0 "
        "AND EXISTS (SELECT 1 FROM agentledger_runs r WHERE r.run_id = m.run_id)",
    ),
    (
        "session whose messages are not numbered 1, 2, ... without gaps",
        "SELECT session_id FROM agentledger_session_messages GROUP BY session_id "
        "HAVING min(pos) <> 1 OR max(pos) <> count(*)",
    ),
)

_ORPHANS = (
    (
        "record naming another agent or session than its run",
        "SELECT DISTINCT rec.run_id FROM agentledger_records rec "
        "JOIN agentledger_runs r ON r.run_id = rec.run_id "
        "WHERE rec.agent_id <> r.agent_id OR rec.session_id <> r.session_id",
    ),
    (
        "run of a purged session",
        "SELECT run_id FROM agentledger_runs WHERE session_id IN "
        "(SELECT id FROM agentledger_purged_sessions) "
        "OR run_id IN (SELECT run_id FROM agentledger_purged_runs)",
    ),
    (
        "session that is also a tombstone",
        "SELECT id FROM agentledger_sessions WHERE id IN "
        "(SELECT id FROM agentledger_purged_sessions)",
    ),
    (
        "saved tool result of a run that is not running",
        "SELECT DISTINCT t.run_id FROM agentledger_tool_results t "
        "JOIN agentledger_runs r ON r.run_id = t.run_id WHERE r.status <> 'running'",
    ),
    (
        "session records whose positions repeat or pass the session's last_seq",
        "SELECT rec.session_id FROM agentledger_records rec "
        "JOIN agentledger_sessions s ON s.id = rec.session_id "
        "GROUP BY rec.session_id, s.last_seq "
        "HAVING count(DISTINCT rec.session_seq) <> count(*) OR max(rec.session_seq) > s.last_seq",
    ),
)


# [D6] the label index against the sessions' labels (the truth), both ways.
_LABEL_INDEX = (
    (
        "label index row disagreeing with its session",
        "SELECT l.session_id, l.key FROM agentledger_session_labels l "
        "LEFT JOIN agentledger_sessions s ON s.id = l.session_id WHERE s.id IS NULL "
        "OR l.status <> s.status OR l.created_at <> s.created_at "
        "OR s.labels ->> l.key IS DISTINCT FROM l.value ORDER BY l.session_id, l.key",
    ),
    (
        "session label missing from the label index",
        "SELECT s.id, j.key FROM agentledger_sessions s, jsonb_each_text(s.labels) j "
        "WHERE NOT EXISTS (SELECT 1 FROM agentledger_session_labels l "
        "WHERE l.session_id = s.id AND l.key = j.key) ORDER BY s.id, j.key",
    ),
)


async def stored_run_ids(dsn: str) -> list[str]:
    """Every run id in the database in start order, one-shot runs included; only reads."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT run_id FROM agentledger_runs ORDER BY ord")
        return [str(run_id) for (run_id,) in await cur.fetchall()]


async def check_invariants(dsn: str) -> list[str]:
    """Every violation of the store's invariants in the database ``dsn`` names.

    Checked: a schema version this code knows and has fully applied; every
    terminal run has exactly one ``run_completed`` record and no other run
    has one; every suspended run has a checkpoint and one ``run_suspended``
    record, and no other run has either; every run starts with its
    ``run_started`` at id 1 and its ids run 1..``last_seq`` without gaps;
    each lifecycle key names a record of its type; stored lifecycle payloads
    decode strictly; no run without its session or parent, records owned by
    their run's agent and session, session positions unique, nothing left of
    a purged session, no saved tool result of a run that is not running or
    whose checksum fails; the label index holds exactly each session's labels,
    with its status and creation time.
    """
    try:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            await conn.set_read_only(True)
            await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
            async with conn.transaction():
                return await _check(conn)
    except psycopg.Error as e:
        return [f"{type(e).__name__}: {e}"]
    except AgentledgerError as e:
        return [str(e)]


async def _check(conn: psycopg.AsyncConnection[TupleRow]) -> list[str]:
    if not await migrations.applied(conn):
        return ["schema: no agentledger migrations recorded"]
    missing = await migrations.pending(conn)  # a version this code does not know raises
    problems = [f"schema: migration {m.version} ({m.name}) not applied" for m in missing]
    if missing:
        return problems
    cur = await conn.execute(_RUNS)
    for row in await cur.fetchall():
        problems.extend(run_problems(*row))
    for what, record_type, owner in _KEYS:
        cur = await conn.execute(
            f"SELECT r.run_id, r.{what} FROM agentledger_runs r WHERE r.{what} <> '' "
            f"AND NOT EXISTS (SELECT 1 FROM agentledger_records rec WHERE rec.run_id = {owner} "
            f"AND rec.event_key = r.{what} AND rec.type = %s)",
            (record_type,),
        )
        for run_id, event_key in await cur.fetchall():
            problems.append(f"run {run_id!r}: {what} {event_key!r} names no {record_type} record")
    for what, query in (*_ORPHANS, *_MESSAGES):
        cur = await conn.execute(query)
        problems.extend(f"{what}: {value!r}" for (value,) in await cur.fetchall())
    for what, query in _LABEL_INDEX:
        cur = await conn.execute(query)
        problems.extend(
            f"{what}: session {session_id!r}, label {key!r}"
            for session_id, key in await cur.fetchall()
        )
    cur = await conn.execute(
        f"SELECT {RECORD_COLUMNS} FROM agentledger_records WHERE type = ANY(%s)",
        (list(_PAYLOADS),),
    )
    rows = await cur.fetchall()
    # [A2] sealed payloads are decoded by the audit through an opened store, not here.
    marker = await conn.execute("SELECT 1 FROM agentledger_encryption")
    sealed = await marker.fetchone() is not None
    for row in rows:
        try:
            record = record_from_row(row)
            if not sealed:
                decode_stored_payload(record, _PAYLOADS[record.type])
        except CorruptRecordError as e:
            problems.append(str(e))
    cur = await conn.execute(
        "SELECT run_id, call_key, data, checksum FROM agentledger_tool_results"
    )
    for run_id, call_key, data, checksum in await cur.fetchall():
        try:
            verified_tool_result(run_id, call_key, bytes(data), checksum)
        except CorruptRecordError as e:
            problems.append(str(e))
    problems.extend(await _usage_problems(conn, sealed))
    problems.extend(await _search_problems(conn, sealed))
    return problems


_INDEXED_RECORDS = (
    f"SELECT {RECORD_COLUMNS}, x.search_pos, strip(x.words)::text, "
    "EXISTS (SELECT 1 FROM agentledger_search_backfill b "
    'WHERE b.ts IS NULL OR (x.ts, x.run_id COLLATE "C", x.seq) < '
    '(b.ts, b.run_id COLLATE "C", b.seq)) '
    "FROM agentledger_records x WHERE x.session_id <> '' AND x.type = ANY(%s) "
    "ORDER BY x.run_id, x.seq"
)
_STRAY_WORDS = (
    "SELECT session_id, run_id, seq FROM agentledger_records "
    "WHERE (search_pos IS NOT NULL OR words IS NOT NULL) "
    "AND (session_id = '' OR NOT type = ANY(%s)) ORDER BY run_id, seq"
)
_WORDS_BATCH = 5000
_WRONG_WORDS = (
    "SELECT u.i FROM unnest(%s::integer[], %s::text[], %s::text[]) AS u (i, have, want) "
    "WHERE u.have::tsvector <> u.want::tsvector ORDER BY u.i"
)


def _name(record: Record) -> str:
    return f"session {record.session_id!r}, run {record.run_id!r}, record {record.id}"


async def _search_problems(conn: psycopg.AsyncConnection[TupleRow], sealed: bool) -> list[str]:
    """[G1] the search index against the records it is kept on: each indexed record has
    a position and the words of its messages, no other record has either (a sealed store
    indexes none, and counts their sessions as left out)."""
    problems: list[str] = []
    later: set[tuple[str, int]] = set()
    records: list[Record] = []
    compare: list[tuple[Record, str, str]] = []
    cur = await conn.execute(_INDEXED_RECORDS, (search.INDEXED_TYPES,))
    for found in await cur.fetchall():
        row, (pos, words, maybe_later) = found[:-3], found[-3:]
        try:
            record = record_from_row(row)
        except CorruptRecordError as e:
            problems.append(str(e))
            continue
        if maybe_later:
            later.add((record.run_id, int(record.id)))
        records.append(record)
        want = None if sealed else search.record_words(record)
        if (pos is None) != (words is None):
            problems.append(f"search index position and words not both set: {_name(record)}")
        elif want is None and words is not None:
            problems.append(f"search index words of a record with no indexed text: {_name(record)}")
        elif want is not None and words is None:
            if not maybe_later:
                problems.append(f"search index missing for a record: {_name(record)}")
        elif want is not None and words is not None:
            compare.append((record, words, want))
    if sealed:
        cur = await conn.execute("SELECT session_id FROM agentledger_search_left_out")
        left_out = [sid for (sid,) in await cur.fetchall()]
        problems += left_out_findings(
            {r.session_id for r in records if (r.run_id, int(r.id)) not in later}, left_out
        )
    cur = await conn.execute(_STRAY_WORDS, (search.INDEXED_TYPES,))
    problems += [
        f"search index words of a record with no indexed text: "
        f"session {sid!r}, run {rid!r}, record {seq}"
        for sid, rid, seq in await cur.fetchall()
    ]
    for start in range(0, len(compare), _WORDS_BATCH):
        batch = compare[start : start + _WORDS_BATCH]
        cur = await conn.execute(
            _WRONG_WORDS,
            (list(range(len(batch))), [have for _, have, _ in batch], [w for _, _, w in batch]),
        )
        problems += [
            f"search index words disagreeing with the text of {_name(batch[i][0])}"
            for (i,) in await cur.fetchall()
        ]
    return problems


_USAGE_RUNS = (
    "SELECT r.run_id, r.session_id, coalesce(sum(octet_length(x.payload)), 0), count(x.run_id) "
    "FROM agentledger_runs r LEFT JOIN agentledger_records x ON x.run_id = r.run_id "
    "GROUP BY r.run_id, r.session_id"
)
_USAGE_COUNTERS = ", ".join(accounting.USAGE_COLUMNS)


async def _usage_problems(conn: psycopg.AsyncConnection[TupleRow], sealed: bool) -> list[str]:
    """[G3] the usage counters against a count of the rows."""

    async def rows(sql: str, params: tuple[object, ...] = ()) -> list[TupleRow]:
        cur = await conn.execute(sql, params)
        return await cur.fetchall()

    kept_runs = {
        row[0]: accounting.usage_from_row(row[1:])
        for row in await rows(f"SELECT run_id, {_USAGE_COUNTERS} FROM {usage_schema.RUN_TOTALS}")
    }
    kept_sessions = {
        row[0]: accounting.usage_from_row(row[1:])
        for row in await rows(
            f"SELECT session_id, {_USAGE_COUNTERS} FROM {usage_schema.SESSION_TOTALS}"
        )
    }
    usage_records = [
        (run_id, type_, bytes(payload))
        for run_id, type_, payload in await rows(
            "SELECT run_id, type, payload FROM agentledger_records WHERE type = %s",
            (accounting.MODEL_USAGE,),
        )
    ]
    counts = [(r, s, int(b), int(n)) for r, s, b, n in await rows(_USAGE_RUNS)]
    sessions = [sid for (sid,) in await rows("SELECT id FROM agentledger_sessions")]
    session_labels = [
        (sid, key, value)
        for sid, key, value in await rows(
            "SELECT session_id, key, value FROM agentledger_session_labels"
        )
    ]
    kept_labels = {
        (row[0], row[1]): (int(row[2]), accounting.usage_from_row(row[3:]))
        for row in await rows(USAGE.label_totals_rows)
    }
    return usage_findings(
        counts,
        usage_records,
        kept_runs,
        kept_sessions,
        sessions,
        sealed=sealed,
        session_labels=session_labels,
        kept_labels=kept_labels,
    )
