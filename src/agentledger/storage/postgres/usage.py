"""[G3] The PostgreSQL schema that keeps the usage counters: triggers and per-label totals.

What a row adds is decided here, once for this backend, by triggers that run in the
statement inserting the row (so a write sends no counter statement of its own):

- a new session gets its counter row (zeros); a new run gets its own, counting 1 run;
- a record adds its payload bytes as stored and 1 record to its run's counters, its
  session's and the totals of each of its session's labels (a row-level trigger: one
  per statement, over a transition table, costs more for the one-record append);
- tokens are the one part the schema cannot read (payloads may be sealed): a write adds
  them to the run with :attr:`~agentledger.storage.usage_sql.UsageTables.add_tokens`,
  read from the plaintext by :func:`agentledger.storage.accounting.token_rows`.

A new run's counters and the tokens added to a run are rolled up, by triggers on the
run counters, into its session's and its labels'. A label's totals are kept
in up to 64 shard rows (``agentledger_usage_labels``, the shard from a hash of the
session id), so writers to different sessions of one tenant rarely wait for one row's
lock until their commits; a read adds a label's shards up. A purge deletes the
session's counters (taken off its labels' totals) and its label rows (one session
fewer); the records it deletes change no counter.

Since migration 18 an append writes no counter row: the rows it updates anyway carry
its bytes and records. A run's records are its ``last_seq`` (its ids are 1, 2, ...
without gaps) and its payload bytes its ``usage_bytes``; a session's records are its
``last_seq`` (its positions are 1, 2, ... without gaps) and its bytes its
``usage_bytes``; both are updated by the append's own statement (the run row for its
new ``last_seq``, the session row for its new position). The counter rows keep the
rest (runs, tokens, and what was counted before migration 18), and the views
``agentledger_usage_run_totals`` and ``agentledger_usage_session_totals`` add the two
up. A write adds its records to its session's labels' totals itself
(:data:`ADD_TO_LABELS`, only for a session with labels): no trigger runs per record.
"""

from __future__ import annotations

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from agentledger.storage.accounting import USAGE_COLUMNS

__all__ = [
    "ADD_TO_LABELS",
    "MIGRATION",
    "MIGRATION_18",
    "RUN_TOTALS",
    "SESSION_TOTALS",
    "SHARDS",
    "SHARD_FUNCTION",
    "TRIGGERS",
    "backfill_label_totals",
]

SHARDS = 64
"""Rows a label value's totals are spread over (a power of two)."""

_COUNTERS = ", ".join(USAGE_COLUMNS)
SHARD_FUNCTION = _SHARD = "agentledger_usage_shard"
"""The SQL function giving a session id's shard."""
_OF_SESSION = (
    "(key, value) IN (SELECT key, value FROM agentledger_session_labels "
    "WHERE session_id = {r}.session_id) AND shard = " + _SHARD + "({r}.session_id)"
)
_EMPTY = " AND ".join(f"{c} = 0" for c in ("sessions", *USAGE_COLUMNS))


def _adds(sign: str, change: str) -> str:
    return ", ".join(f"{c} = {c} {sign} {change.format(c=c)}" for c in USAGE_COLUMNS)


_RECORD_ADDS = "bytes = bytes + octet_length(NEW.payload), records = records + 1"

_FUNCTIONS = {
    # counting: what new rows add
    "agentledger_usage_count_session": (
        "AFTER INSERT ON agentledger_sessions FOR EACH ROW",
        f"INSERT INTO agentledger_usage_sessions (session_id, {_COUNTERS}) "
        "VALUES (NEW.id, 0, 0, 0, 0, 0, 0) ON CONFLICT DO NOTHING;",
    ),
    "agentledger_usage_count_run": (
        "AFTER INSERT ON agentledger_runs FOR EACH ROW",
        f"INSERT INTO agentledger_usage_runs (run_id, session_id, {_COUNTERS}) "
        "VALUES (NEW.run_id, NEW.session_id, 0, 0, 1, 0, 0, 0);",
    ),
    "agentledger_usage_count_record": (
        "AFTER INSERT ON agentledger_records FOR EACH ROW",
        f"UPDATE agentledger_usage_runs SET {_RECORD_ADDS} WHERE run_id = NEW.run_id; "
        "IF NEW.session_id <> '' THEN "
        f"UPDATE agentledger_usage_sessions SET {_RECORD_ADDS} "
        "WHERE session_id = NEW.session_id; "
        f"UPDATE agentledger_usage_labels SET {_RECORD_ADDS} "
        f"WHERE {_OF_SESSION.format(r='NEW')}; END IF;",
    ),
    # rolling up: a new run's counters, and the tokens a write adds to a run, into its
    # session's and its session's labels'
    "agentledger_usage_run_added": (
        "AFTER INSERT ON agentledger_usage_runs FOR EACH ROW WHEN (NEW.session_id <> '')",
        f"UPDATE agentledger_usage_sessions SET {_adds('+', 'NEW.{c}')} "
        "WHERE session_id = NEW.session_id; "
        f"UPDATE agentledger_usage_labels SET {_adds('+', 'NEW.{c}')} "
        f"WHERE {_OF_SESSION.format(r='NEW')};",
    ),
    "agentledger_usage_run_changed": (
        "AFTER UPDATE OF input_tokens, output_tokens, cached_tokens ON agentledger_usage_runs "
        "FOR EACH ROW WHEN (NEW.session_id <> '')",
        f"UPDATE agentledger_usage_sessions SET {_adds('+', '(NEW.{c} - OLD.{c})')} "
        "WHERE session_id = NEW.session_id; "
        f"UPDATE agentledger_usage_labels SET {_adds('+', '(NEW.{c} - OLD.{c})')} "
        f"WHERE {_OF_SESSION.format(r='NEW')};",
    ),
    "agentledger_usage_session_gone": (
        "AFTER DELETE ON agentledger_usage_sessions FOR EACH ROW",
        f"UPDATE agentledger_usage_labels SET {_adds('-', 'OLD.{c}')} "
        f"WHERE {_OF_SESSION.format(r='OLD')};",
    ),
    "agentledger_usage_label_added": (
        "AFTER INSERT ON agentledger_session_labels FOR EACH ROW",
        f"INSERT INTO agentledger_usage_labels AS l (key, value, shard, sessions, {_COUNTERS}) "
        f"SELECT NEW.key, NEW.value, {_SHARD}(NEW.session_id), 1, "
        + ", ".join(f"coalesce(u.{c}, 0)" for c in USAGE_COLUMNS)
        + " FROM (SELECT NEW.session_id AS session_id) s "
        "LEFT JOIN agentledger_usage_sessions u ON u.session_id = s.session_id "
        "ON CONFLICT (key, value, shard) DO UPDATE SET sessions = l.sessions + 1, "
        + ", ".join(f"{c} = l.{c} + excluded.{c}" for c in USAGE_COLUMNS)
        + ";",
    ),
    "agentledger_usage_label_gone": (
        "AFTER DELETE ON agentledger_session_labels FOR EACH ROW",
        "UPDATE agentledger_usage_labels SET sessions = sessions - 1 WHERE key = OLD.key "
        f"AND value = OLD.value AND shard = {_SHARD}(OLD.session_id); "
        "DELETE FROM agentledger_usage_labels WHERE key = OLD.key AND value = OLD.value "
        f"AND shard = {_SHARD}(OLD.session_id) AND {_EMPTY};",
    ),
}

TRIGGERS = {name: when for name, (when, _) in _FUNCTIONS.items()}
"""Each trigger's name (its function's too) and when it fires."""

MIGRATION = f"""
CREATE TABLE agentledger_usage_labels (
    key      text NOT NULL,
    value    text NOT NULL,
    shard    integer NOT NULL,
    sessions bigint NOT NULL,
    {", ".join(f"{c} bigint NOT NULL" for c in USAGE_COLUMNS)},
    PRIMARY KEY (key, value, shard)
);
CREATE FUNCTION {_SHARD}(session_id text) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT hashtext(session_id) & {SHARDS - 1} $$;
""" + "".join(
    f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ "
    f"BEGIN {body} RETURN NULL; END $$;\n"
    f"CREATE TRIGGER {name} {when} EXECUTE FUNCTION {name}();\n"
    for name, (when, body) in _FUNCTIONS.items()
)
"""Migration 16: the per-label totals and the counting triggers."""


async def backfill_label_totals(conn: AsyncConnection[TupleRow]) -> None:
    """Give every session a counter row, and add up the sessions of each label (one scan)."""
    await conn.execute(
        f"INSERT INTO agentledger_usage_sessions (session_id, {_COUNTERS}) "
        "SELECT id, 0, 0, 0, 0, 0, 0 FROM agentledger_sessions ON CONFLICT DO NOTHING"
    )
    sums = ", ".join(f"coalesce(sum(u.{c}), 0)" for c in USAGE_COLUMNS)
    await conn.execute(
        f"INSERT INTO agentledger_usage_labels (key, value, shard, sessions, {_COUNTERS}) "
        f"SELECT l.key, l.value, {_SHARD}(l.session_id), count(*), {sums} "
        "FROM agentledger_session_labels l "
        "LEFT JOIN agentledger_usage_sessions u ON u.session_id = l.session_id "
        f"GROUP BY l.key, l.value, {_SHARD}(l.session_id)"
    )


# Migration 18 ----------------------------------------------------------------------

ADD_TO_LABELS = (
    "UPDATE agentledger_usage_labels SET bytes = bytes + %(b)s, records = records + %(n)s "
    "WHERE (key, value) IN (SELECT key, value FROM agentledger_session_labels "
    f"WHERE session_id = %(sid)s) AND shard = {_SHARD}(%(sid)s)"
)
"""Add a write's records (``n`` of them, ``b`` payload bytes as stored) to the totals of
the labels of their session ``sid``: sent only for a session with labels (they are fixed
at its creation), so a session without labels costs its appends nothing."""
RUN_TOTALS = "agentledger_usage_run_totals"
"""The view of each run's counters: its counter row plus its row's records and bytes."""
SESSION_TOTALS = "agentledger_usage_session_totals"
"""The view of each session's counters: its counter row plus its row's records and bytes."""


def _totals(view: str, counters: str, rows: str, key: str, row_key: str, *extra: str) -> str:
    columns = [
        f"u.{key}",
        *extra,
        "u.bytes + coalesce(o.usage_bytes, 0) AS bytes",
        "u.records + coalesce(o.last_seq, 0) AS records",
        *(f"u.{c}" for c in USAGE_COLUMNS[2:]),
    ]
    return (
        f"CREATE VIEW {view} AS SELECT {', '.join(columns)} FROM {counters} u "
        f"LEFT JOIN {rows} o ON o.{row_key} = u.{key};\n"
    )


def _function(name: str, body: str) -> str:
    return (
        f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN {body} RETURN NULL; END $$;\n"
    )


_SESSION_NOW = "(SELECT {c} FROM agentledger_sessions WHERE id = OLD.session_id)"
_GONE = {
    c: f"OLD.{c}"
    + (
        f" + coalesce({_SESSION_NOW.format(c=row)}, 0)"
        if (row := {"bytes": "usage_bytes", "records": "last_seq"}.get(c))
        else ""
    )
    for c in USAGE_COLUMNS
}

MIGRATION_18 = (
    "ALTER TABLE agentledger_runs ADD COLUMN usage_bytes bigint NOT NULL DEFAULT 0;\n"
    "ALTER TABLE agentledger_sessions ADD COLUMN usage_bytes bigint NOT NULL DEFAULT 0;\n"
    # what the rows' last_seq will count from now on is taken off the counter rows
    "UPDATE agentledger_usage_runs u SET records = u.records - r.last_seq "
    "FROM agentledger_runs r WHERE r.run_id = u.run_id AND r.last_seq <> 0;\n"
    "UPDATE agentledger_usage_sessions u SET records = u.records - s.last_seq "
    "FROM agentledger_sessions s WHERE s.id = u.session_id AND s.last_seq <> 0;\n"
    + _totals(
        RUN_TOTALS, "agentledger_usage_runs", "agentledger_runs", "run_id", "run_id", "u.session_id"
    )
    + _totals(
        SESSION_TOTALS, "agentledger_usage_sessions", "agentledger_sessions", "session_id", "id"
    )
    # a write adds its records to its session's labels' totals itself (ADD_TO_LABELS)
    + "DROP TRIGGER agentledger_usage_count_record ON agentledger_records;\n"
    + "DROP FUNCTION agentledger_usage_count_record();\n"
    # a purge deletes a session's counter row before its session row: its totals still whole
    + _function(
        "agentledger_usage_session_gone",
        "UPDATE agentledger_usage_labels SET "
        + ", ".join(f"{c} = {c} - ({total})" for c, total in _GONE.items())
        + f" WHERE {_OF_SESSION.format(r='OLD')};",
    )
    + _function(
        "agentledger_usage_label_added",
        f"INSERT INTO agentledger_usage_labels AS l (key, value, shard, sessions, {_COUNTERS}) "
        f"SELECT NEW.key, NEW.value, {_SHARD}(NEW.session_id), 1, "
        + ", ".join(f"coalesce(u.{c}, 0)" for c in USAGE_COLUMNS)
        + " FROM (SELECT NEW.session_id AS session_id) s "
        f"LEFT JOIN {SESSION_TOTALS} u ON u.session_id = s.session_id "
        "ON CONFLICT (key, value, shard) DO UPDATE SET sessions = l.sessions + 1, "
        + ", ".join(f"{c} = l.{c} + excluded.{c}" for c in USAGE_COLUMNS)
        + ";",
    )
)
"""Migration 18: a run's and a session's bytes and records on their own rows (which an
append updates anyway), the views adding them to the counter rows, and the triggers
that no longer count them."""
