"""[G3] The SQLite schema that keeps the usage counters: triggers, the per-label totals,
and (from schema migration 21) the counters a record carries.

Since migration 21 a lone append writes no counter row: every page a commit writes is
written to the log and synced again at ``synchronous=FULL``, and a counter row in a
table of its own was one more page per append. So:

- a record carries its run's and its session's payload bytes (as stored), and its
  session's record count, up to and including it (:data:`CUMULATIVE`; a run's count is
  its newest id), computed by the record's own INSERT from the newest record of each
  (:func:`insert_record`): the record's page holds them;
- the rest of a run's and a session's counters (runs, tokens, and the bytes and records
  of databases counted before migration 21) are rows of one table, ``usage_counts``,
  clustered by session (a session's own row has run id ``''``): a run's row and its
  session's are one page;
- ``usage_runs`` and ``usage_sessions`` are views adding the two up: a run's or a
  session's usage is one row plus its newest record, read through the indexes the
  records already have;
- the totals of each label (``usage_labels``: one row per label key and value, with the
  number of sessions carrying it, so ``usage_by_label`` grouped by one label reads a
  row per value) are added to by triggers: a record's (for a session with labels), a
  new run's, tokens added to a session's row; a session's own counter row deleted (a
  purge, before its records) takes the session off its labels' totals;
- tokens are the one part the schema cannot read (payloads may be sealed): a write adds
  them to its run's row and its session's with :data:`ADD_TOKENS`, read from the
  plaintext by :func:`token_rows`.

Migrations 16 and 18 kept the run and session counters in tables of their own, added
to by a record's trigger (:data:`TRIGGERS`); migration 21 moves them (see
:data:`CLUSTERED`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from agentledger.storage.accounting import MODEL_USAGE, USAGE_COLUMNS, record_tokens
from agentledger.storage.types import Record

__all__ = [
    "ADD_TOKENS",
    "CLUSTERED",
    "CLUSTERED_TRIGGERS",
    "CUMULATIVE",
    "MIGRATION",
    "TRIGGERS",
    "backfill_cumulative",
    "backfill_label_totals",
    "insert_record",
    "token_rows",
]


def _adds(table: str, sign: str, new: str, old: str | None) -> str:
    """``SET`` clauses adding (``sign`` "+") or taking off ("-") a counter row's values."""

    def change(c: str) -> str:
        return f"{new}.{c}" if old is None else f"({new}.{c} - {old}.{c})"

    return ", ".join(f"{c} = {table}.{c} {sign} {change(c)}" for c in USAGE_COLUMNS)


_OF_SESSION = (
    "(key, value) IN (SELECT key, value FROM session_labels WHERE session_id = {}.session_id)"
)


def _roll_up(new: str, old: str | None) -> str:
    return (
        f"UPDATE usage_sessions SET {_adds('usage_sessions', '+', new, old)} "
        f"WHERE session_id = {new}.session_id; "
        f"UPDATE usage_labels SET {_adds('usage_labels', '+', new, old)} "
        f"WHERE {_OF_SESSION.format(new)};"
    )


_COUNTERS = ", ".join(USAGE_COLUMNS)
_EMPTY = " AND ".join(f"{c} = 0" for c in ("sessions", *USAGE_COLUMNS))

_RECORD_ADDS = "bytes = {t}.bytes + length(NEW.payload), records = {t}.records + 1"

TRIGGERS = {
    # counting: what a new row adds (a record: to its run, its session and its labels)
    "usage_count_session": "AFTER INSERT ON sessions BEGIN "
    "INSERT OR IGNORE INTO usage_sessions VALUES (NEW.id, 0, 0, 0, 0, 0, 0); END",
    "usage_count_run": "AFTER INSERT ON runs BEGIN "
    "INSERT INTO usage_runs VALUES (NEW.run_id, NEW.session_id, 0, 0, 1, 0, 0, 0); END",
    "usage_count_record": "AFTER INSERT ON records BEGIN "
    f"UPDATE usage_runs SET {_RECORD_ADDS.format(t='usage_runs')} WHERE run_id = NEW.run_id; "
    f"UPDATE usage_sessions SET {_RECORD_ADDS.format(t='usage_sessions')} "
    "WHERE session_id = NEW.session_id; "
    f"UPDATE usage_labels SET {_RECORD_ADDS.format(t='usage_labels')} "
    f"WHERE {_OF_SESSION.format('NEW')}; END",
    # rolling up: a new run's counters, and the tokens a write adds to a run, into its
    # session's and its session's labels'
    "usage_run_added": "AFTER INSERT ON usage_runs WHEN NEW.session_id <> '' BEGIN "
    + _roll_up("NEW", None)
    + " END",
    "usage_run_changed": "AFTER UPDATE OF input_tokens, output_tokens, cached_tokens "
    "ON usage_runs WHEN NEW.session_id <> '' BEGIN " + _roll_up("NEW", "OLD") + " END",
    "usage_session_gone": "AFTER DELETE ON usage_sessions BEGIN "
    f"UPDATE usage_labels SET {_adds('usage_labels', '-', 'OLD', None)} "
    f"WHERE {_OF_SESSION.format('OLD')}; END",
    "usage_label_added": "AFTER INSERT ON session_labels BEGIN "
    f"INSERT INTO usage_labels (key, value, sessions, {_COUNTERS}) "
    f"SELECT NEW.key, NEW.value, 1, {', '.join(f'coalesce(u.{c}, 0)' for c in USAGE_COLUMNS)} "
    "FROM (SELECT NEW.session_id AS session_id) s "
    "LEFT JOIN usage_sessions u ON u.session_id = s.session_id WHERE true "
    "ON CONFLICT (key, value) DO UPDATE SET sessions = usage_labels.sessions + 1, "
    + ", ".join(f"{c} = usage_labels.{c} + excluded.{c}" for c in USAGE_COLUMNS)
    + "; END",
    "usage_label_gone": "AFTER DELETE ON session_labels BEGIN "
    "UPDATE usage_labels SET sessions = sessions - 1 WHERE key = OLD.key AND value = OLD.value; "
    f"DELETE FROM usage_labels WHERE key = OLD.key AND value = OLD.value AND {_EMPTY}; END",
}
"""Each trigger's name and body (``CREATE TRIGGER name body``)."""

MIGRATION = (
    f"""CREATE TABLE usage_labels (
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        sessions INTEGER NOT NULL,
        {", ".join(f"{c} INTEGER NOT NULL" for c in USAGE_COLUMNS)},
        PRIMARY KEY (key, value)
    ) STRICT, WITHOUT ROWID""",
    *(f"CREATE TRIGGER {name} {body}" for name, body in TRIGGERS.items()),
)
"""Schema migration 18: the per-label totals and the counting triggers."""


def backfill_label_totals(conn: sqlite3.Connection) -> None:
    """Give every session a counter row, and add up the sessions of each label (one scan)."""
    conn.execute(
        f"INSERT OR IGNORE INTO usage_sessions (session_id, {_COUNTERS}) "
        "SELECT id, 0, 0, 0, 0, 0, 0 FROM sessions"
    )
    sums = ", ".join(f"coalesce(sum(u.{c}), 0)" for c in USAGE_COLUMNS)
    conn.execute(
        f"INSERT INTO usage_labels (key, value, sessions, {_COUNTERS}) "
        f"SELECT l.key, l.value, count(*), {sums} FROM session_labels l "
        "LEFT JOIN usage_sessions u ON u.session_id = l.session_id GROUP BY l.key, l.value"
    )


# Schema migration 21 -------------------------------------------------------------

CUMULATIVE = ("run_bytes", "session_bytes", "session_records")
"""The columns of ``records`` (migration 21) holding, on each record, the payload bytes
of its run and of its session, and the records of its session, up to and including it
(see :func:`insert_record`). A run's records are its newest ``seq``: a run's ids are 1,
2, ... without gaps."""

_NEWEST_OF_RUN = "(SELECT {c} FROM records WHERE run_id = {run} ORDER BY seq DESC LIMIT 1)"
_NEWEST_OF_SESSION = (
    "(SELECT {c} FROM records WHERE session_id = {session} ORDER BY pos DESC LIMIT 1)"
)


def _newest(column: str, of: str) -> str:
    """``column`` of the newest record of a run (``of`` names its id) or of a session."""
    if column.startswith("run_") or column == "seq":
        return "coalesce(" + _NEWEST_OF_RUN.format(c=column, run=of) + ", 0)"
    return "coalesce(" + _NEWEST_OF_SESSION.format(c=column, session=of) + ", 0)"


def insert_record(columns: str) -> str:
    """The INSERT of one record: ``columns`` (ten, the payload ninth) as ``?1`` to
    ``?10``, and the counters it carries, each the newest record's plus this one's (a
    run's records are inserted in ``seq`` order, a session's in ``pos`` order: each is
    the newest when inserted)."""
    run, session, payload = "?1", "?4", "length(?9)"
    return (
        f"INSERT INTO records ({columns}, {', '.join(CUMULATIVE)}) VALUES ("
        + ", ".join(f"?{i}" for i in range(1, 11))
        + f", {payload} + {_newest('run_bytes', run)}, "
        f"{payload} + {_newest('session_bytes', session)}, "
        f"1 + {_newest('session_records', session)})"
    )


_OF_SESSION_ROW = "WHERE session_id = {0}.session_id AND run_id = ''"


def _session_totals(row: str) -> dict[str, str]:
    """Each counter of a session as an expression of its ``usage_counts`` row ``row``."""
    totals = {c: f"{row}.{c}" for c in USAGE_COLUMNS}
    totals["bytes"] += " + " + _newest("session_bytes", f"{row}.session_id")
    totals["records"] += " + " + _newest("session_records", f"{row}.session_id")
    return totals


CLUSTERED_TRIGGERS = {
    "usage_count_session": "AFTER INSERT ON sessions BEGIN "
    "INSERT OR IGNORE INTO usage_counts VALUES (NEW.id, '', 0, 0, 0, 0, 0, 0); END",
    # a new run counts 1 run, into its session's and its labels' too
    "usage_count_run": "AFTER INSERT ON runs BEGIN "
    "INSERT INTO usage_counts VALUES (NEW.session_id, NEW.run_id, 0, 0, 1, 0, 0, 0); "
    f"UPDATE usage_counts SET runs = runs + 1 {_OF_SESSION_ROW.format('NEW')}; "
    f"UPDATE usage_labels SET runs = runs + 1 WHERE {_OF_SESSION.format('NEW')}; END",
    # a record's bytes and count are on the record itself, for its run and its session;
    # the labels' totals are added to here (the WHEN only skips an UPDATE of no row)
    "usage_count_record": "AFTER INSERT ON records WHEN EXISTS "
    "(SELECT 1 FROM session_labels WHERE session_id = NEW.session_id) BEGIN "
    f"UPDATE usage_labels SET {_RECORD_ADDS.format(t='usage_labels')} "
    f"WHERE {_OF_SESSION.format('NEW')}; END",
    # tokens are added to a run's row and its session's in one statement (ADD_TOKENS);
    # a session's change is added into its labels' totals
    "usage_session_changed": "AFTER UPDATE OF input_tokens, output_tokens, cached_tokens "
    "ON usage_counts WHEN NEW.run_id = '' BEGIN "
    f"UPDATE usage_labels SET {_adds('usage_labels', '+', 'NEW', 'OLD')} "
    f"WHERE {_OF_SESSION.format('NEW')}; END",
    # a purge deletes a session's counters before its records: its totals are still whole
    "usage_session_gone": "AFTER DELETE ON usage_counts WHEN OLD.run_id = '' BEGIN "
    "UPDATE usage_labels SET "
    + ", ".join(
        f"{c} = usage_labels.{c} - ({total})" for c, total in _session_totals("OLD").items()
    )
    + f" WHERE {_OF_SESSION.format('OLD')}; END",
    # a label's totals start from its session's (read through the usage_sessions view)
    "usage_label_added": TRIGGERS["usage_label_added"],
    "usage_label_gone": TRIGGERS["usage_label_gone"],
}
"""Migration 21's triggers: each trigger's name and body (``CREATE TRIGGER name body``)."""

ADD_TOKENS = (
    "UPDATE usage_counts SET input_tokens = input_tokens + ?, "
    "output_tokens = output_tokens + ?, cached_tokens = cached_tokens + ? "
    "WHERE session_id = ? AND run_id IN (?, '')"
)
"""Add a run's tokens to its row and its session's: ``(input, output, cached, session_id,
run_id)``; the trigger adds the session's change to its labels'."""

_RUN_TOTALS = {c: f"c.{c}" for c in USAGE_COLUMNS} | {
    "bytes": "c.bytes + " + _newest("run_bytes", "c.run_id"),
    "records": "c.records + " + _newest("seq", "c.run_id"),
}

CLUSTERED = (
    f"""CREATE TABLE usage_counts (
        session_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        {", ".join(f"{c} INTEGER NOT NULL" for c in USAGE_COLUMNS)},
        PRIMARY KEY (session_id, run_id)
    ) STRICT, WITHOUT ROWID""",
    # a run's row found by its id alone (and each run's one row): the run usage read
    "CREATE UNIQUE INDEX usage_counts_by_run ON usage_counts (run_id) WHERE run_id <> ''",
    f"INSERT INTO usage_counts SELECT session_id, '', {_COUNTERS} FROM usage_sessions",
    f"INSERT INTO usage_counts SELECT session_id, run_id, {_COUNTERS} FROM usage_runs",
    *(f"DROP TRIGGER {name}" for name in TRIGGERS),
    "DROP TABLE usage_runs",
    "DROP TABLE usage_sessions",
    *(f"ALTER TABLE records ADD COLUMN {c} INTEGER NOT NULL DEFAULT 0" for c in CUMULATIVE),
    "CREATE VIEW usage_runs AS SELECT c.run_id, c.session_id, "
    + ", ".join(f"{total} AS {c}" for c, total in _RUN_TOTALS.items())
    + " FROM usage_counts c WHERE c.run_id <> ''",
    "CREATE VIEW usage_sessions AS SELECT c.session_id, "
    + ", ".join(f"{total} AS {c}" for c, total in _session_totals("c").items())
    + " FROM usage_counts c WHERE c.run_id = ''",
    *(f"CREATE TRIGGER {name} {body}" for name, body in CLUSTERED_TRIGGERS.items()),
)
"""Schema migration 21: the run and session counters in one table clustered by session,
their bytes and records on the records themselves (so an append writes no counter row),
views adding the two up in the old tables' place, and the triggers."""


def backfill_cumulative(conn: sqlite3.Connection) -> None:
    """Write each stored record's counters (one pass), and take what the newest records
    now hold off the moved counter rows, so every total stays what it was."""
    conn.execute(
        "WITH c AS (SELECT pos, "
        "sum(length(payload)) OVER (PARTITION BY run_id ORDER BY seq) AS rb, "
        "sum(length(payload)) OVER (PARTITION BY session_id ORDER BY pos) AS sb, "
        "count(*) OVER (PARTITION BY session_id ORDER BY pos) AS sr FROM records) "
        "UPDATE records SET run_bytes = c.rb, session_bytes = c.sb, "
        "session_records = c.sr FROM c WHERE records.pos = c.pos"
    )
    conn.execute(
        "UPDATE usage_counts SET "
        f"bytes = bytes - {_newest('run_bytes', 'usage_counts.run_id')}, "
        f"records = records - {_newest('seq', 'usage_counts.run_id')} "
        "WHERE run_id <> ''"
    )
    conn.execute(
        "UPDATE usage_counts SET "
        f"bytes = bytes - {_newest('session_bytes', 'usage_counts.session_id')}, "
        f"records = records - {_newest('session_records', 'usage_counts.session_id')} "
        "WHERE run_id = ''"
    )


def token_rows(records: Iterable[Record]) -> list[tuple[int, int, int, str, str]]:
    """:data:`ADD_TOKENS` rows for the records of ``records`` reporting tokens, read from
    the plaintext before sealing (most writes hold no ``model_usage`` record: none)."""
    rows = []
    for record in records:
        if record.type == MODEL_USAGE:
            tokens = record_tokens(MODEL_USAGE, record.payload)
            if tokens is not None and any(tokens):
                rows.append((*tokens, record.session_id, record.run_id))
    return rows
