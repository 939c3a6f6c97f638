"""The SQLite schema as numbered migrations, recorded in ``_agentledger_migrations``.

Each migration and the row recording it are written in one transaction, so a
crash leaves a database at one version or the next, never in between.
:func:`applied` and :func:`pending` only read. A database recording a version
this code does not know (made by a newer agentledger) is refused with a
:class:`~agentledger.errors.SchemaVersionError` before anything is written:
migrating it would be guessing.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentledger.errors import SchemaVersionError, TranscriptError, ValidationError
from agentledger.storage import accounting
from agentledger.storage.integrity import record_checksum, run_seed, tool_result_checksum
from agentledger.storage.sqlite import search as search_schema
from agentledger.storage.sqlite import usage as usage_schema
from agentledger.transcript.codec import decode_messages

__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "MIGRATIONS_TABLE",
    "Migration",
    "applied",
    "behind",
    "check_migrations",
    "migrate",
    "pending",
]

MIGRATIONS_TABLE = "_agentledger_migrations"


@dataclass(frozen=True)
class Migration:
    """One step of the schema: a version, a stable name and its DDL statements."""

    version: int
    """Position in the sequence: 1, 2, ... with no gaps."""
    name: str
    """Stable identity, checked against what a database recorded."""
    statements: tuple[str, ...]
    """DDL run in order inside the migration's transaction."""
    backfill: Callable[[sqlite3.Connection], None] | None = None
    """Computes values for existing rows after the DDL, in the same transaction."""


_BASE_SCHEMA = (
    # Creation order is the INTEGER PRIMARY KEY (kept by upserts and by VACUUM).
    """CREATE TABLE sessions (
        pos INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        status TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        ended_at INTEGER
    ) STRICT""",
    "CREATE TABLE session_tombstones (id TEXT PRIMARY KEY) STRICT, WITHOUT ROWID",
    # Start order is pos; the lifecycle keys are the event keys each change chose [X2].
    """CREATE TABLE runs (
        pos INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL UNIQUE,
        agent_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        parent_run_id TEXT NOT NULL,
        status TEXT NOT NULL,
        start_outcome TEXT NOT NULL,
        started_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        labels TEXT NOT NULL,
        cancellation_reason TEXT NOT NULL,
        successor_run_id TEXT NOT NULL,
        started_key TEXT NOT NULL,
        link_key TEXT NOT NULL,
        cancel_key TEXT NOT NULL,
        suspension_key TEXT NOT NULL,
        terminal_key TEXT NOT NULL,
        last_seq INTEGER NOT NULL
    ) STRICT""",
    "CREATE INDEX runs_by_session ON runs (session_id, pos)",
    """CREATE TABLE checkpoints (
        run_id TEXT PRIMARY KEY,
        id TEXT NOT NULL,
        data BLOB NOT NULL
    ) STRICT""",
    """CREATE TABLE run_tombstones (
        run_id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL
    ) STRICT, WITHOUT ROWID""",
    # pos is the commit order across runs: writers are serialized (BEGIN
    # IMMEDIATE), so a new row's pos is larger than every row committed before.
    # (run_id, seq) is the record's key: seq is its id on the run's log.
    """CREATE TABLE records (
        pos INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        agent_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        turn_id TEXT NOT NULL,
        event_key TEXT NOT NULL,
        type TEXT NOT NULL,
        timestamp INTEGER NOT NULL,
        payload BLOB NOT NULL,
        UNIQUE (run_id, seq),
        UNIQUE (run_id, event_key)
    ) STRICT""",
    "CREATE INDEX records_by_session ON records (session_id, pos)",
)


def _backfill_checksums(conn: sqlite3.Connection) -> None:
    """Checksum every existing record as it is stored now (see :mod:`..integrity`).

    Damage done before this migration cannot be told from intact data; ``agentledger
    check`` still validates what it can (lifecycle payloads, run consistency).
    """
    rows = conn.execute(
        "SELECT pos, run_id, seq, agent_id, session_id, turn_id, event_key, type, "
        "timestamp, payload FROM records"
    ).fetchall()
    sums = []
    for pos, run_id, seq, agent_id, session_id, turn_id, event_key, type_, ms, payload in rows:
        seed = run_seed(run_id, agent_id, session_id)
        sums.append((record_checksum(seed, seq, turn_id, event_key, type_, ms, payload), pos))
    conn.executemany("UPDATE records SET checksum = ? WHERE pos = ?", sums)


def _backfill_tool_result_checksums(conn: sqlite3.Connection) -> None:
    """Checksum every saved tool result as it is stored now (scratch of running runs)."""
    rows = conn.execute("SELECT rowid, run_id, call_key, data FROM tool_results").fetchall()
    sums = [(tool_result_checksum(run_id, key, data), rowid) for rowid, run_id, key, data in rows]
    conn.executemany("UPDATE tool_results SET checksum = ? WHERE rowid = ?", sums)


def _check_transcripts(conn: sqlite3.Connection) -> None:
    """Decode every stored transcript record strictly; list the ones that fail.

    Records written from this version on are checked on write; an empty
    ``unchecked_transcripts`` lets replay trust verified records (see
    ``protocol.VerifiedTranscripts``), a non-empty one keeps it strict.
    """
    rows = conn.execute(
        "SELECT run_id, seq, payload FROM records WHERE type IN "
        "('transcript_messages_seeded', 'transcript_messages_appended')"
    )
    bad = []
    for run_id, seq, payload in rows:
        try:
            decode_messages(payload)
        except TranscriptError:
            bad.append((run_id, seq))
    conn.executemany("INSERT INTO unchecked_transcripts (run_id, seq) VALUES (?, ?)", bad)


# [D6] a label-filtered listing reads one index range per page: each label of a
# session is a row, ordered as the listing is, with the session's status (so a
# status filter is a range too) and its creation time. The session's labels stay
# the truth; these rows are written with it, updated when it ends, deleted by its
# purge, and checked against it. The last statement backfills existing sessions.
_SESSION_LABEL_INDEX = (
    """CREATE TABLE session_labels (
        session_id TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (session_id, key)
    ) STRICT, WITHOUT ROWID""",
    "CREATE INDEX session_labels_newest_first "
    "ON session_labels (key, value, created_at DESC, session_id DESC)",
    "CREATE INDEX session_labels_by_status "
    "ON session_labels (key, value, status, created_at DESC, session_id DESC)",
    "CREATE INDEX sessions_by_status ON sessions (status, created_at DESC, id DESC)",
    "INSERT INTO session_labels (session_id, key, value, status, created_at) "
    "SELECT sessions.id, labels.key, labels.value, sessions.status, sessions.created_at "
    "FROM sessions, json_each(sessions.labels) AS labels",
)

_USAGE_COUNTERS = (
    """CREATE TABLE usage_runs (
        run_id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        records INTEGER NOT NULL,
        runs INTEGER NOT NULL,
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        cached_tokens INTEGER NOT NULL
    ) STRICT, WITHOUT ROWID""",
    "CREATE INDEX usage_runs_by_session ON usage_runs (session_id)",
    """CREATE TABLE usage_sessions (
        session_id TEXT PRIMARY KEY,
        bytes INTEGER NOT NULL,
        records INTEGER NOT NULL,
        runs INTEGER NOT NULL,
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        cached_tokens INTEGER NOT NULL
    ) STRICT, WITHOUT ROWID""",
    # [G2] the records naming where a run's copied history came from, in one index range.
    "CREATE INDEX records_copies ON records (session_id, pos) "
    "WHERE type = 'transcript_history_copied'",
)


def _backfill_usage(conn: sqlite3.Connection) -> None:
    """[G3] Count what every existing run and session holds (the one scan, here).

    Bytes and records are summed in SQL; tokens are read from the ``model_usage``
    records whose stored payload is plaintext (a sealed one adds none: this
    migration holds no keys; ``agentledger check`` says so).
    """
    conn.execute(
        "INSERT INTO usage_runs SELECT runs.run_id, runs.session_id, "
        "coalesce(sum(length(records.payload)), 0), count(records.pos), 1, 0, 0, 0 "
        "FROM runs LEFT JOIN records ON records.run_id = runs.run_id GROUP BY runs.run_id"
    )
    tokens = []
    for run_id, type_, payload in conn.execute(
        "SELECT run_id, type, payload FROM records WHERE type = ?", (accounting.MODEL_USAGE,)
    ):
        counted = accounting.record_tokens(type_, payload)
        if counted is not None:
            tokens.append((*counted, run_id))
    conn.executemany(
        "UPDATE usage_runs SET input_tokens = input_tokens + ?, "
        "output_tokens = output_tokens + ?, cached_tokens = cached_tokens + ? WHERE run_id = ?",
        tokens,
    )
    conn.execute(
        "INSERT INTO usage_sessions SELECT sessions.id, coalesce(sum(u.bytes), 0), "
        "coalesce(sum(u.records), 0), count(u.run_id), coalesce(sum(u.input_tokens), 0), "
        "coalesce(sum(u.output_tokens), 0), coalesce(sum(u.cached_tokens), 0) "
        "FROM sessions LEFT JOIN usage_runs u ON u.session_id = sessions.id GROUP BY sessions.id"
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(version=1, name="base_schema", statements=_BASE_SCHEMA),
    Migration(
        version=2,
        name="runs_by_session_status",
        # Purge asks for a session's running runs; list_runs_by_session filters by status.
        statements=("CREATE INDEX runs_by_session_status ON runs (session_id, status)",),
    ),
    Migration(
        version=3,
        name="session_labels",
        # [D6] labels fixed at creation (JSON text, like runs.labels); list_sessions
        # pages newest first by (created_at, id), which this index serves.
        statements=(
            "ALTER TABLE sessions ADD COLUMN labels TEXT NOT NULL DEFAULT '{}'",
            "CREATE INDEX sessions_newest_first ON sessions (created_at DESC, id DESC)",
        ),
    ),
    Migration(
        version=4,
        name="runs_last_seq_derived",
        # A run's newest id is max(seq) through UNIQUE (run_id, seq): an append
        # writes its record only, not the runs row too [B2].
        statements=("ALTER TABLE runs DROP COLUMN last_seq",),
    ),
    Migration(
        version=5,
        name="record_checksums",
        # [J1] a CRC-32 over each record's identity and bytes, verified on every read.
        statements=("ALTER TABLE records ADD COLUMN checksum INTEGER NOT NULL DEFAULT -1",),
        backfill=_backfill_checksums,
    ),
    Migration(
        version=6,
        name="purge_receipts",
        # [D7] the receipt a purge returned, kept with its tombstone (JSON text);
        # NULL for a tombstone written before receipts: nothing about it is known.
        statements=("ALTER TABLE session_tombstones ADD COLUMN receipt TEXT",),
    ),
    Migration(
        version=7,
        name="encryption_marker",
        # [A2] an encrypted database records its scheme and vault (one row); a
        # plaintext one leaves the table empty.
        statements=(
            "CREATE TABLE encryption (id INTEGER PRIMARY KEY CHECK (id = 1), "
            "scheme TEXT NOT NULL, vault_id TEXT NOT NULL) STRICT",
        ),
    ),
    Migration(
        version=8,
        name="transcripts_checked",
        # [R2] transcript records are decoded strictly on write from now on;
        # older ones that fail are listed, and keep replay strict.
        statements=(
            "CREATE TABLE unchecked_transcripts (run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
            "PRIMARY KEY (run_id, seq)) STRICT, WITHOUT ROWID",
        ),
        backfill=_check_transcripts,
    ),
    Migration(
        version=9,
        name="tool_results",
        # A parallel tool call's saved result, private to its running run: the
        # first save wins (the unique key), the run's suspension or end deletes it.
        statements=(
            "CREATE TABLE tool_results (run_id TEXT NOT NULL, call_key TEXT NOT NULL, "
            "data BLOB NOT NULL, UNIQUE (run_id, call_key)) STRICT",
        ),
    ),
    Migration(
        version=10,
        name="tool_result_checksums",
        # [J1] a CRC-32 over each saved tool result's run, call key and bytes,
        # verified on every read: a damaged one is never a retried call's outcome.
        statements=("ALTER TABLE tool_results ADD COLUMN checksum INTEGER NOT NULL DEFAULT -1",),
        backfill=_backfill_tool_result_checksums,
    ),
    Migration(
        version=11,
        name="history_references",
        # [V4] a session's history references in one short index range: a replay
        # follows its chain from them without reading the rest of the session.
        statements=(
            "CREATE INDEX records_references ON records (session_id) "
            "WHERE type = 'transcript_messages_referenced'",
        ),
    ),
    Migration(
        version=12,
        name="transcript_windows",
        # [V5] a session's references and windows in one short index range: a
        # windowed replay finds where its model input starts without the rest.
        statements=(
            "CREATE INDEX records_windows ON records (session_id) "
            "WHERE type IN ('transcript_messages_referenced', 'transcript_window_applied')",
        ),
    ),
    Migration(
        version=13,
        name="session_label_index",
        statements=_SESSION_LABEL_INDEX,
    ),
    Migration(
        version=14,
        name="start_records",
        # [L10] how many records a start carried, so its retry must carry them all;
        # -1 for runs stored before (their retries are checked record by record).
        statements=("ALTER TABLE runs ADD COLUMN start_records INTEGER NOT NULL DEFAULT -1",),
    ),
    Migration(
        version=15,
        name="session_messages",
        # A session's submitted messages in arrival order (pos), each with the run
        # id of its turn; the waiting ones (not started) in one short index range.
        statements=(
            """CREATE TABLE session_messages (
                run_id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL,
                pos INTEGER NOT NULL,
                turn_id TEXT NOT NULL,
                agent_id TEXT NOT NULL,
                message BLOB NOT NULL,
                if_busy TEXT NOT NULL,
                submitted_at INTEGER NOT NULL,
                requested_after TEXT NOT NULL,
                labels TEXT NOT NULL,
                fate TEXT NOT NULL,
                after_run_id TEXT NOT NULL,
                running_run_id TEXT NOT NULL,
                started INTEGER NOT NULL,
                UNIQUE (session_id, pos)
            ) STRICT""",
            "CREATE INDEX session_messages_waiting ON session_messages (session_id, pos) "
            "WHERE started = 0",
        ),
    ),
    Migration(
        version=16,
        name="usage_counters",
        # [G3] bytes, records, runs and tokens per run and per session, added to by
        # every write in its own transaction; existing databases are counted once here.
        # [G2] and an index of the records naming where copied histories came from.
        statements=_USAGE_COUNTERS,
        backfill=_backfill_usage,
    ),
    Migration(
        version=17,
        name="search_index",
        # [G1] an FTS5 index of the messages' text, written with each record; the
        # records stored before are indexed in batches afterwards (search.build_index).
        statements=search_schema.MIGRATION,
    ),
    Migration(
        version=18,
        name="usage_label_totals",
        # [G3] the usage totals of each label value, and the triggers that count what
        # each inserted row adds and add a run's counters up into its session's and its
        # labels' (see storage/sqlite/usage.py); existing labels are added up once here.
        statements=usage_schema.MIGRATION,
        backfill=usage_schema.backfill_label_totals,
    ),
    Migration(
        version=19,
        name="search_index_batched",
        # [G1] the FTS5 table takes the entries' words in batches, not per transaction.
        statements=search_schema.BATCHED,
    ),
    Migration(
        version=20,
        name="search_record_words",
        # [G1] the index reads the records' own text: one FTS5 row per record, its words
        # written every FLUSH_EVERY records, no row per message; the records stored before
        # are indexed in batches afterwards (search.build_index).
        statements=search_schema.RECORD_WORDS,
    ),
    Migration(
        version=21,
        name="usage_counts_clustered",
        # [G3] a record's bytes and count added up for its run and its session on the
        # record itself, the rest of the counters in one table clustered by session: an
        # append writes no counter row (see storage/sqlite/usage.py).
        statements=usage_schema.CLUSTERED,
        backfill=usage_schema.backfill_cumulative,
    ),
)
"""Every migration, in order. Append only: a shipped migration never changes."""


def check_migrations(migrations: Sequence[Migration]) -> None:
    """Refuse a migration list with gaps, reordering or duplicate names.

    Raises:
        ValueError: naming the offending versions or names.
    """
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(migrations) + 1)):
        raise ValueError(f"migration versions must be 1, 2, ... without gaps: {versions}")
    names = [m.name for m in migrations]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate migration names: {duplicates}")


check_migrations(MIGRATIONS)
LATEST_VERSION = MIGRATIONS[-1].version


def applied(conn: sqlite3.Connection) -> list[tuple[int, str]]:
    """The ``(version, name)`` pairs the database recorded, in order; never writes."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (MIGRATIONS_TABLE,)
    ).fetchone()
    if exists is None:
        return []
    rows = conn.execute(f"SELECT version, name FROM {MIGRATIONS_TABLE} ORDER BY version")
    return [(int(version), str(name)) for version, name in rows]


def _check_known(done: Sequence[tuple[int, str]], migrations: Sequence[Migration]) -> None:
    known = {m.version: m.name for m in migrations}
    unknown = [version for version, _ in done if version not in known]
    if unknown:
        raise SchemaVersionError(current=max(unknown), latest=len(migrations))
    for version, name in done:
        if known[version] != name:
            raise ValidationError(
                field="schema_version",
                expected=f"migration {version} named {known[version]!r}",
                got=name,
            )


def pending(
    conn: sqlite3.Connection, migrations: Sequence[Migration] = MIGRATIONS
) -> list[Migration]:
    """The migrations the database still needs, in order; never writes.

    Raises:
        SchemaVersionError: the database recorded a migration this code does not know.
        ValidationError: a recorded migration has another name than this code's.
    """
    done = applied(conn)
    _check_known(done, migrations)
    versions = {version for version, _ in done}
    return [m for m in migrations if m.version not in versions]


def behind(conn: sqlite3.Connection, path: str) -> SchemaVersionError | None:
    """The refusal for a database whose schema is behind this code's; None if it is current.

    For readers, which never migrate: the error says how many migrations are
    pending and that a writer migrates them.

    Raises:
        SchemaVersionError: a newer agentledger wrote the database.
    """
    missing = pending(conn)
    if not missing:
        return None
    return SchemaVersionError(
        current=missing[0].version - 1,
        latest=LATEST_VERSION,
        pending=[m.version for m in missing],
        where=f"{path}: ",
        advice="; open it with a writer (SQLiteStore.open, agentledger serve or a worker) "
        "to migrate it",
    )


def migrate(
    conn: sqlite3.Connection,
    migrations: Sequence[Migration] = MIGRATIONS,
    upto: int | None = None,
) -> list[Migration]:
    """Apply the pending migrations (up to version ``upto``), each in its own transaction.

    Several processes may open a new database at once: each migration is
    re-checked inside its ``BEGIN IMMEDIATE``, so it is applied exactly once.
    ``conn`` must be in autocommit mode (``isolation_level=None``).

    Returns:
        The migrations this call applied.
    """
    done: list[Migration] = []
    for migration in pending(conn, migrations):
        if upto is not None and migration.version > upto:
            break
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} ("
                "version INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
                "applied_at INTEGER NOT NULL) STRICT"
            )
            if migration in pending(conn, migrations):
                for statement in migration.statements:
                    conn.execute(statement)
                if migration.backfill is not None:
                    migration.backfill(conn)
                conn.execute(
                    f"INSERT INTO {MIGRATIONS_TABLE} (version, name, applied_at) VALUES (?, ?, ?)",
                    (migration.version, migration.name, time.time_ns() // 1_000_000),
                )
                done.append(migration)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return done
