"""[G3] The SQLite schema that keeps the usage counters: triggers and the per-label totals.

What a row adds is decided here, once for this backend, by triggers that run inside the
statement inserting the row (so a write sends no counter statement of its own):

- a new session gets its counter row (zeros); a new run gets its own, counting 1 run;
- a record adds its payload bytes as stored and 1 record to its run's counters, its
  session's, and the totals of each of its session's labels (``usage_labels``: one row
  per label key and value, with the number of sessions carrying it), so
  ``usage_by_label`` grouped by one label reads a row per value;
- tokens are the one part the schema cannot read (payloads may be sealed): a write adds
  them to the run with :attr:`~agentledger.storage.usage_sql.UsageTables.add_tokens`,
  read from the plaintext by :func:`agentledger.storage.accounting.token_rows`.

A new run's counters and the tokens added to a run are rolled up, by triggers on the
run counters, into its session's and its labels'. (A record's own trigger adds it to
all three directly: one trigger program per append, the cheapest here.) A purge deletes the
session's counters (taken off its labels' totals) and its label rows (one session
fewer); the records it deletes change no counter.
"""

from __future__ import annotations

import sqlite3

from agentledger.storage.accounting import USAGE_COLUMNS

__all__ = ["MIGRATION", "TRIGGERS", "backfill_label_totals"]


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
