"""An invariant checker for a store database: what must hold after any crash.

The crash tests run it after every ``SIGKILL``; operators can run it on a
file they distrust. It only reads, in one read transaction, and returns the
violations it found as sentences (an empty list means consistent).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from agentledger.errors import AgentledgerError, CorruptRecordError, ValidationError
from agentledger.storage import accounting, payloads
from agentledger.storage.integrity import verified_tool_result
from agentledger.storage.invariants import run_problems
from agentledger.storage.sqlite import schema
from agentledger.storage.sqlite.apply import USAGE
from agentledger.storage.sqlite.connection import map_open_error
from agentledger.storage.sqlite.readonly import read_only_uri
from agentledger.storage.sqlite.rows import RECORD_COLUMNS, decode_record
from agentledger.storage.sqlite.search_check import open_vocabulary, search_problems
from agentledger.storage.usage_check import LabelCount, usage_findings
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
SELECT runs.run_id, runs.status, coalesce(max(records.seq), 0), runs.session_id,
       runs.parent_run_id,
       count(records.pos), coalesce(min(records.seq), 0), coalesce(max(records.seq), 0),
       coalesce(sum(records.type = 'run_started' AND records.seq = 1
                    AND records.event_key = runs.started_key), 0),
       coalesce(sum(records.type = 'run_started'), 0),
       coalesce(sum(records.type = 'run_completed'), 0),
       coalesce(sum(records.type = 'run_suspended'), 0),
       EXISTS (SELECT 1 FROM checkpoints WHERE checkpoints.run_id = runs.run_id),
       EXISTS (SELECT 1 FROM sessions WHERE sessions.id = runs.session_id),
       EXISTS (SELECT 1 FROM runs AS parent WHERE parent.run_id = runs.parent_run_id)
FROM runs LEFT JOIN records ON records.run_id = runs.run_id
GROUP BY runs.run_id ORDER BY runs.pos
"""

# (key, record type, the run whose log holds it, key column): each set key names a record.
_KEYS = (
    ("terminal_key", "run_completed", "runs.run_id", "runs.terminal_key"),
    ("suspension_key", "run_suspended", "runs.run_id", "runs.suspension_key"),
    ("cancel_key", "runtime.cancellation_intent", "runs.run_id", "runs.cancel_key"),
    ("link_key", "child_run_linked", "runs.parent_run_id", "runs.link_key"),
)

_ORPHANS = (
    (
        "record without its run",
        "SELECT DISTINCT run_id FROM records WHERE run_id NOT IN (SELECT run_id FROM runs)",
    ),
    (
        "checkpoint without its run",
        "SELECT run_id FROM checkpoints WHERE run_id NOT IN (SELECT run_id FROM runs)",
    ),
    (
        "record naming another agent or session than its run",
        "SELECT DISTINCT records.run_id FROM records JOIN runs ON runs.run_id = records.run_id "
        "WHERE records.agent_id != runs.agent_id OR records.session_id != runs.session_id",
    ),
    (
        "run of a purged session",
        "SELECT run_id FROM runs WHERE session_id IN (SELECT id FROM session_tombstones) "
        "OR run_id IN (SELECT run_id FROM run_tombstones)",
    ),
    (
        "session that is also a tombstone",
        "SELECT id FROM sessions WHERE id IN (SELECT id FROM session_tombstones)",
    ),
)


# [D6] the label index against the sessions' labels (the truth), both ways.
_LABEL_INDEX = (
    (
        "label index row disagreeing with its session",
        "SELECT l.session_id, l.key FROM session_labels AS l "
        "LEFT JOIN sessions AS s ON s.id = l.session_id WHERE s.id IS NULL "
        "OR l.status != s.status OR l.created_at != s.created_at OR NOT EXISTS ("
        "SELECT 1 FROM json_each(s.labels) AS j WHERE j.key = l.key AND j.value = l.value)",
    ),
    (
        "session label missing from the label index",
        "SELECT s.id, j.key FROM sessions AS s, json_each(s.labels) AS j WHERE NOT EXISTS ("
        "SELECT 1 FROM session_labels AS l WHERE l.session_id = s.id AND l.key = j.key)",
    ),
)

# A session's messages: each in a live session, numbered 1.. without gaps, started exactly
# when its run exists, waiting only while its run does not.
_MESSAGES = (
    (
        "message of a missing or purged session",
        "SELECT run_id FROM session_messages WHERE session_id NOT IN (SELECT id FROM sessions)",
    ),
    (
        "message marked started without its run",
        "SELECT m.run_id FROM session_messages AS m WHERE m.started = 1 "
        "AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.run_id = m.run_id "
        "AND runs.session_id = m.session_id AND runs.agent_id = m.agent_id)",
    ),
    (
        "message waiting though its run has started",
        "SELECT m.run_id FROM session_messages AS m WHERE m.started = 0 "
        "AND EXISTS (SELECT 1 FROM runs WHERE runs.run_id = m.run_id)",
    ),
    (
        "session whose messages are not numbered 1, 2, ... without gaps",
        "SELECT session_id FROM session_messages GROUP BY session_id "
        "HAVING min(pos) != 1 OR max(pos) != count(*)",
    ),
)

_STALE_TOOL_RESULTS = (
    "SELECT DISTINCT run_id FROM tool_results "
    "WHERE run_id NOT IN (SELECT run_id FROM runs WHERE status = 'running')"
)


def check_invariants(path: str | os.PathLike[str]) -> list[str]:
    """Every violation of the store's invariants in the database at ``path``.

    Checked: ``PRAGMA integrity_check``; a schema version this code knows; every
    terminal run (completed, failed, canceled) has exactly one
    ``run_completed`` record and no other run has one; every suspended run
    has a checkpoint and one ``run_suspended`` record, and no other run has
    either; every run starts with its ``run_started`` at id 1 and its ids run
    1..``last_seq`` without gaps; each lifecycle key names a record of its
    type; stored lifecycle payloads decode strictly; no record or checkpoint
    without its run, no run without its session or parent, nothing left of a
    purged session, no saved tool result of a run that is not running or
    whose checksum fails; the label index holds exactly each session's labels,
    with its status and creation time; a session's messages are numbered 1, 2,
    ... in a live session, marked started exactly when their run exists; the search
    index holds the words of each indexed record whose words were written, and
    nothing else (see :mod:`.search_check`).

    Raises:
        ValidationError: ``field="schema_version"``: the schema is behind this
            code's (migrations pending), so the checks cannot be run as written;
            opening it with a writer migrates it.
    """
    name = os.fspath(path)
    if not os.path.isfile(name):
        return [f"{name}: no such database file"]
    try:
        conn = sqlite3.connect(read_only_uri(name), uri=True, isolation_level=None)
    except ValidationError as e:
        return [f"{name}: {e}"]
    except sqlite3.Error as e:
        return [f"{name}: cannot open: {e}"]
    try:
        open_vocabulary(conn)
        conn.execute("PRAGMA query_only = ON")
        conn.execute("BEGIN")
        # Not a finding: the file is consistent, but these checks assume the latest schema.
        # (A file with no agentledger schema at all is a finding, reported by _check.)
        behind = schema.behind(conn, name) if schema.applied(conn) else None
        if behind is None:
            return _check(conn)
    except UnicodeDecodeError as e:  # SQLite's message quoted a damaged schema's bytes
        return [f"{name}: {map_open_error(e, name)}"]
    except sqlite3.Error as e:
        return [f"{name}: {type(e).__name__}: {e}"]
    except AgentledgerError as e:
        return [f"{name}: {e}"]
    finally:
        conn.close()
    raise behind


def stored_run_ids(path: str | os.PathLike[str]) -> list[str]:
    """Every run id in the database at ``path`` in start order, one-shot runs included.

    For audits that walk every run through the ``Store`` protocol, which lists
    runs by session only. Only reads.
    """
    conn = sqlite3.connect(read_only_uri(os.fspath(path)), uri=True, isolation_level=None)
    try:
        return [str(run_id) for (run_id,) in conn.execute("SELECT run_id FROM runs ORDER BY pos")]
    finally:
        conn.close()


def _check(conn: sqlite3.Connection) -> list[str]:
    problems = [
        f"integrity_check: {message}"
        for (message,) in conn.execute("PRAGMA integrity_check")
        if message != "ok"
    ]
    if not schema.applied(conn):
        (tables,) = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if tables:  # an empty file is a store not yet created: nothing to violate
            problems.append("schema: no agentledger migrations recorded")
        return problems
    schema.pending(conn)  # a version this code does not know is reported, not guessed at
    for row in conn.execute(_RUNS):
        problems.extend(run_problems(*row))
    for what, record_type, owner, key in _KEYS:
        query = (
            f"SELECT runs.run_id, {key} FROM runs WHERE {key} != '' AND NOT EXISTS ("
            f"SELECT 1 FROM records WHERE records.run_id = {owner} "
            f"AND records.event_key = {key} AND records.type = ?)"
        )
        for run_id, event_key in conn.execute(query, (record_type,)):
            problems.append(f"run {run_id!r}: {what} {event_key!r} names no {record_type} record")
    for what, query in _ORPHANS:
        problems.extend(f"{what}: {value!r}" for (value,) in conn.execute(query))
    for what, query in _LABEL_INDEX:
        problems.extend(
            f"{what}: session {session_id!r}, label {key!r}"
            for session_id, key in conn.execute(query)
        )
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'session_messages'").fetchone():
        for what, query in _MESSAGES:
            problems.extend(f"{what}: {value!r}" for (value,) in conn.execute(query))
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'tool_results'").fetchone():
        problems.extend(
            f"saved tool result of a run that is not running: {run_id!r}"
            for (run_id,) in conn.execute(_STALE_TOOL_RESULTS)
        )
        for run_id, call_key, data, checksum in conn.execute(
            "SELECT run_id, call_key, data, checksum FROM tool_results"
        ):
            try:
                verified_tool_result(run_id, call_key, data, checksum)
            except CorruptRecordError as e:
                problems.append(str(e))
    types = ", ".join("?" * len(_PAYLOADS))
    lifecycle_records = conn.execute(
        f"SELECT {RECORD_COLUMNS} FROM records WHERE type IN ({types})", tuple(_PAYLOADS)
    )
    # [A2] sealed payloads are decoded by the audit through an opened store, not here.
    sealed = (
        conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'encryption'").fetchone() is not None
        and conn.execute("SELECT 1 FROM encryption").fetchone() is not None
    )
    for row in lifecycle_records:
        try:
            record = decode_record(row)
            if not sealed:
                decode_stored_payload(record, _PAYLOADS[record.type])
        except CorruptRecordError as e:
            problems.append(str(e))
    problems.extend(_usage_problems(conn, sealed))
    problems.extend(search_problems(conn, sealed))
    return problems


_USAGE_RUNS = (
    "SELECT runs.run_id, runs.session_id, coalesce(sum(length(records.payload)), 0), "
    "count(records.pos) FROM runs LEFT JOIN records ON records.run_id = runs.run_id "
    "GROUP BY runs.run_id"
)
_USAGE_COUNTERS = ", ".join(accounting.USAGE_COLUMNS)


def _label_totals(rows: Iterable[Sequence[Any]]) -> dict[tuple[str, str], LabelCount]:
    return {(row[0], row[1]): (int(row[2]), accounting.usage_from_row(row[3:])) for row in rows}


def _usage_problems(conn: sqlite3.Connection, sealed: bool) -> list[str]:
    """[G3] the usage counters against a count of the rows."""
    kept_runs = {
        row[0]: accounting.usage_from_row(row[1:])
        for row in conn.execute(f"SELECT run_id, {_USAGE_COUNTERS} FROM usage_runs")
    }
    kept_sessions = {
        row[0]: accounting.usage_from_row(row[1:])
        for row in conn.execute(f"SELECT session_id, {_USAGE_COUNTERS} FROM usage_sessions")
    }
    usage_records = conn.execute(
        "SELECT run_id, type, payload FROM records WHERE type = ?", (accounting.MODEL_USAGE,)
    )
    return usage_findings(
        conn.execute(_USAGE_RUNS),
        usage_records,
        kept_runs,
        kept_sessions,
        (sid for (sid,) in conn.execute("SELECT id FROM sessions")),
        sealed=sealed,
        session_labels=conn.execute("SELECT session_id, key, value FROM session_labels"),
        kept_labels=_label_totals(conn.execute(USAGE.label_totals_rows)),
    )
