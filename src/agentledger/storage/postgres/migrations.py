"""The PostgreSQL schema as named, versioned migrations recorded in ``_agentledger_migrations``.

Each migration and its row are written in one transaction, under a
transaction-level advisory lock, so concurrent openers never race: the second
waits, then finds the migration applied. :func:`applied` and :func:`pending`
only read. A database whose schema is newer than this code is refused with a
:class:`~agentledger.errors.SchemaVersionError` rather than used half-understood.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from agentledger.errors import SchemaVersionError, TranscriptError, ValidationError
from agentledger.storage import accounting
from agentledger.storage.integrity import record_checksum, run_seed, tool_result_checksum
from agentledger.storage.postgres import search as search_schema
from agentledger.storage.postgres import usage as usage_schema
from agentledger.storage.postgres.rows import micros
from agentledger.transcript.codec import decode_messages

__all__ = [
    "MIGRATIONS",
    "MIGRATIONS_TABLE",
    "SCHEMA_VERSION",
    "AppliedMigration",
    "Migration",
    "applied",
    "migrate",
    "pending",
]

MIGRATIONS_TABLE = "_agentledger_migrations"

# One advisory-lock key (single bigint form) for schema changes; row locks use the
# two-int4 form, which PostgreSQL keeps in a separate key space.
_MIGRATION_LOCK = 0x61676C6D  # "aglm"


@dataclass(frozen=True)
class Migration:
    """One schema step: applied once, in order, with its row in the same transaction."""

    version: int
    """Position in the sequence, from 1; the schema version once applied."""
    name: str
    """What the step does, recorded beside the version."""
    sql: str
    """The statements, run as one script inside the migration's transaction."""
    backfill: Callable[[AsyncConnection[TupleRow]], Awaitable[None]] | None = None
    """Computes values for existing rows after ``sql``, in the same transaction."""


@dataclass(frozen=True)
class AppliedMigration:
    """A row of ``_agentledger_migrations``."""

    version: int
    """The migration's version."""
    name: str
    """The name recorded when it was applied."""
    applied_at: datetime
    """When it was applied (server time, UTC)."""


_INITIAL = """
CREATE TABLE agentledger_sessions (
    id          text PRIMARY KEY,
    ord         bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    status      text NOT NULL CHECK (status IN ('active', 'ended')),
    created_at  timestamptz NOT NULL,
    ended_at    timestamptz,
    last_seq    bigint NOT NULL DEFAULT 0
);
CREATE TABLE agentledger_purged_sessions (
    id          text PRIMARY KEY
);
CREATE TABLE agentledger_runs (
    run_id              text PRIMARY KEY,
    ord                 bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    agent_id            text NOT NULL,
    session_id          text NOT NULL,
    parent_run_id       text NOT NULL,
    status              text NOT NULL
        CHECK (status IN ('running', 'suspended', 'completed', 'failed', 'canceled')),
    start_outcome       text NOT NULL CHECK (start_outcome IN ('proceed', 'stop')),
    started_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    labels              jsonb NOT NULL,
    cancellation_reason text NOT NULL,
    successor_run_id    text NOT NULL,
    started_key         text NOT NULL,
    link_key            text NOT NULL,
    cancel_key          text NOT NULL,
    suspension_key      text NOT NULL,
    terminal_key        text NOT NULL,
    checkpoint_id       text,
    checkpoint_data     bytea,
    last_seq            bigint NOT NULL,
    CHECK ((checkpoint_id IS NULL) = (checkpoint_data IS NULL))
);
CREATE INDEX agentledger_runs_by_session ON agentledger_runs (session_id, ord)
    WHERE session_id <> '';
CREATE TABLE agentledger_purged_runs (
    run_id      text PRIMARY KEY,
    session_id  text NOT NULL
);
CREATE TABLE agentledger_records (
    run_id      text NOT NULL REFERENCES agentledger_runs (run_id),
    seq         bigint NOT NULL,
    event_key   text NOT NULL,
    agent_id    text NOT NULL,
    session_id  text NOT NULL,
    session_seq bigint,
    turn_id     text NOT NULL,
    type        text NOT NULL,
    ts          timestamptz NOT NULL,
    payload     bytea NOT NULL,
    PRIMARY KEY (run_id, seq),
    UNIQUE (run_id, event_key),
    CHECK ((session_id = '') = (session_seq IS NULL))
);
CREATE UNIQUE INDEX agentledger_records_by_session
    ON agentledger_records (session_id, session_seq) WHERE session_seq IS NOT NULL;
"""

# [D6] labels fixed at creation; list_sessions pages newest first by (created_at, id),
# ids compared byte-wise (COLLATE "C") as every backend does, and filters by
# label containment (@>), which the GIN index serves.
_SESSION_LABELS = """
ALTER TABLE agentledger_sessions
    ADD COLUMN labels jsonb NOT NULL DEFAULT '{}'::jsonb
    CHECK (jsonb_typeof(labels) = 'object');
CREATE INDEX agentledger_sessions_newest_first
    ON agentledger_sessions (created_at DESC, id COLLATE "C" DESC);
CREATE INDEX agentledger_sessions_by_labels
    ON agentledger_sessions USING gin (labels jsonb_path_ops);
"""

# [J1] a CRC-32 over each record's identity and bytes, verified on every read.
_RECORD_CHECKSUMS = """
ALTER TABLE agentledger_records ADD COLUMN checksum bigint NOT NULL DEFAULT -1;
"""


async def _backfill_checksums(conn: AsyncConnection[TupleRow]) -> None:
    """Checksum every existing record as it is stored now (see :mod:`..integrity`)."""
    cur = await conn.execute(
        "SELECT run_id, seq, agent_id, session_id, turn_id, event_key, type, ts, payload "
        "FROM agentledger_records"
    )
    run_ids: list[str] = []
    seqs: list[int] = []
    sums: list[int] = []
    for (
        run_id,
        seq,
        agent_id,
        session_id,
        turn_id,
        event_key,
        type_,
        ts,
        payload,
    ) in await cur.fetchall():
        seed = run_seed(run_id, agent_id, session_id)
        run_ids.append(run_id)
        seqs.append(seq)
        sums.append(
            record_checksum(seed, seq, turn_id, event_key, type_, micros(ts), bytes(payload))
        )
    await conn.execute(
        "UPDATE agentledger_records r SET checksum = v.checksum "
        "FROM unnest(%s::text[], %s::bigint[], %s::bigint[]) AS v(run_id, seq, checksum) "
        "WHERE r.run_id = v.run_id AND r.seq = v.seq",
        (run_ids, seqs, sums),
    )


# [D7] the receipt a purge returned, kept with its tombstone (JSON text); NULL
# for a tombstone written before receipts: nothing about it is known.
_PURGE_RECEIPTS = """
ALTER TABLE agentledger_purged_sessions ADD COLUMN receipt text;
"""

# [A2] an encrypted database records its scheme and vault (one row); plaintext, none.
_ENCRYPTION_MARKER = """
CREATE TABLE agentledger_encryption (
    id       integer PRIMARY KEY CHECK (id = 1),
    scheme   text NOT NULL,
    vault_id text NOT NULL
);
"""

# [R2] transcript records are decoded strictly on write from now on; older
# ones that fail are listed here, and keep replay strict.
_UNCHECKED_TRANSCRIPTS = """
CREATE TABLE agentledger_unchecked_transcripts (
    run_id text NOT NULL,
    seq bigint NOT NULL,
    PRIMARY KEY (run_id, seq)
);
"""


async def _check_transcripts(conn: AsyncConnection[TupleRow]) -> None:
    """Decode every stored transcript record strictly; list the ones that fail."""
    cur = await conn.execute(
        "SELECT run_id, seq, payload FROM agentledger_records WHERE type IN "
        "('transcript_messages_seeded', 'transcript_messages_appended')"
    )
    bad: list[tuple[str, int]] = []
    for run_id, seq, payload in await cur.fetchall():
        try:
            decode_messages(bytes(payload))
        except TranscriptError:
            bad.append((run_id, seq))
    if bad:
        async with conn.cursor() as insert:
            await insert.executemany(
                "INSERT INTO agentledger_unchecked_transcripts (run_id, seq) VALUES (%s, %s)", bad
            )


async def transcripts_checked(conn: AsyncConnection[TupleRow]) -> bool:
    """Whether every stored transcript record passed the strict decode (no unchecked ones)."""
    cur = await conn.execute("SELECT EXISTS (SELECT 1 FROM agentledger_unchecked_transcripts)")
    row = await cur.fetchone()
    return row is not None and not row[0]


# A parallel tool call's saved result, private to its running run: the first
# save wins (the key), the run's suspension or end deletes it.
_TOOL_RESULTS = """
CREATE TABLE agentledger_tool_results (
    run_id   text NOT NULL REFERENCES agentledger_runs (run_id),
    call_key text NOT NULL,
    data     bytea NOT NULL,
    PRIMARY KEY (run_id, call_key)
);
"""


# [J1] a CRC-32 over each saved tool result's run, call key and stored bytes,
# verified on every read: a damaged one is never a retried call's outcome.
_TOOL_RESULT_CHECKSUMS = """
ALTER TABLE agentledger_tool_results ADD COLUMN checksum bigint NOT NULL DEFAULT -1;
"""


async def _backfill_tool_result_checksums(conn: AsyncConnection[TupleRow]) -> None:
    """Checksum every saved tool result as it is stored now (scratch of running runs)."""
    cur = await conn.execute("SELECT run_id, call_key, data FROM agentledger_tool_results")
    rows = await cur.fetchall()
    if not rows:
        return
    await conn.execute(
        "UPDATE agentledger_tool_results t SET checksum = v.checksum "
        "FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS v(run_id, call_key, checksum) "
        "WHERE t.run_id = v.run_id AND t.call_key = v.call_key",
        (
            [run_id for run_id, _, _ in rows],
            [key for _, key, _ in rows],
            [tool_result_checksum(run_id, key, bytes(data)) for run_id, key, data in rows],
        ),
    )


# [V4] a session's history references in one short index range: a replay follows
# its chain from them without reading the rest of the session.
_HISTORY_REFERENCES = """
CREATE INDEX agentledger_records_references ON agentledger_records (session_id)
    WHERE type = 'transcript_messages_referenced';
"""

# [V5] a session's references and windows in one short index range: a windowed
# replay finds where its model input starts without reading the rest.
_TRANSCRIPT_WINDOWS = """
CREATE INDEX agentledger_records_windows ON agentledger_records (session_id, session_seq)
    WHERE type IN ('transcript_messages_referenced', 'transcript_window_applied');
"""

# [D6] a label-filtered listing reads one index range per page: each label of a
# session is a row, ordered as the listing is, with the session's status (so a
# status filter is a range too) and its creation time. The session's labels stay
# the truth; these rows are written with it, updated when it ends, deleted by its
# purge, and checked against it. The GIN index, which a page could not read in
# order, goes; existing sessions are backfilled.
_SESSION_LABEL_INDEX = """
CREATE TABLE agentledger_session_labels (
    session_id  text NOT NULL,
    key         text NOT NULL,
    value       text NOT NULL,
    status      text NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (session_id, key)
);
CREATE INDEX agentledger_session_labels_newest_first
    ON agentledger_session_labels (key, value, created_at DESC, session_id COLLATE "C" DESC);
CREATE INDEX agentledger_session_labels_by_status
    ON agentledger_session_labels
    (key, value, status, created_at DESC, session_id COLLATE "C" DESC);
CREATE INDEX agentledger_sessions_by_status
    ON agentledger_sessions (status, created_at DESC, id COLLATE "C" DESC);
DROP INDEX agentledger_sessions_by_labels;
INSERT INTO agentledger_session_labels (session_id, key, value, status, created_at)
    SELECT s.id, l.key, l.value, s.status, s.created_at
    FROM agentledger_sessions s, jsonb_each_text(s.labels) l;
"""

# [L10] how many records a start carried, so its retry must carry them all;
# -1 for runs stored before (their retries are checked record by record).
_START_RECORDS = """
ALTER TABLE agentledger_runs ADD COLUMN start_records integer NOT NULL DEFAULT -1;
"""

# A session's submitted messages in arrival order (pos), each with the run id of its
# turn; the waiting ones (not started) in one short index range.
_SESSION_MESSAGES = """
CREATE TABLE agentledger_session_messages (
    run_id          text PRIMARY KEY,
    session_id      text NOT NULL,
    pos             bigint NOT NULL,
    turn_id         text NOT NULL,
    agent_id        text NOT NULL,
    message         bytea NOT NULL,
    if_busy         text NOT NULL,
    submitted_at    timestamptz NOT NULL,
    requested_after text NOT NULL,
    labels          text NOT NULL,
    fate            text NOT NULL,
    after_run_id    text NOT NULL,
    running_run_id  text NOT NULL,
    started         integer NOT NULL,
    UNIQUE (session_id, pos)
);
CREATE INDEX agentledger_session_messages_waiting
    ON agentledger_session_messages (session_id, pos) WHERE started = 0;
"""
# [G3] bytes, records, runs and tokens per run and per session, added to by every
# write in its own transaction; existing databases are counted once (see the backfill).
_USAGE_COUNTERS = """
CREATE TABLE agentledger_usage_runs (
    run_id        text PRIMARY KEY,
    session_id    text NOT NULL,
    bytes         bigint NOT NULL,
    records       bigint NOT NULL,
    runs          bigint NOT NULL,
    input_tokens  bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cached_tokens bigint NOT NULL
);
CREATE INDEX agentledger_usage_runs_by_session ON agentledger_usage_runs (session_id);
-- the records naming where a run's copied history came from, in one index range.
CREATE INDEX agentledger_records_copies ON agentledger_records (session_id, session_seq)
    WHERE type = 'transcript_history_copied';
CREATE TABLE agentledger_usage_sessions (
    session_id    text PRIMARY KEY,
    bytes         bigint NOT NULL,
    records       bigint NOT NULL,
    runs          bigint NOT NULL,
    input_tokens  bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cached_tokens bigint NOT NULL
);
"""


async def _backfill_usage(conn: AsyncConnection[TupleRow]) -> None:
    """[G3] Count what every existing run and session holds (the one scan, here).

    Bytes and records are summed in SQL; tokens are read from the ``model_usage``
    records whose stored payload is plaintext (a sealed one adds none: a migration
    holds no keys; ``agentledger check`` says so).
    """
    await conn.execute(
        "INSERT INTO agentledger_usage_runs SELECT r.run_id, r.session_id, "
        "coalesce(sum(octet_length(x.payload)), 0), count(x.run_id), 1, 0, 0, 0 "
        "FROM agentledger_runs r LEFT JOIN agentledger_records x ON x.run_id = r.run_id "
        "GROUP BY r.run_id, r.session_id"
    )
    cur = await conn.execute(
        "SELECT run_id, type, payload FROM agentledger_records WHERE type = %s",
        (accounting.MODEL_USAGE,),
    )
    tokens = []
    for run_id, type_, payload in await cur.fetchall():
        counted = accounting.record_tokens(type_, bytes(payload))
        if counted is not None:
            tokens.append((*counted, run_id))
    if tokens:
        async with conn.cursor() as many:
            await many.executemany(
                "UPDATE agentledger_usage_runs SET input_tokens = input_tokens + %s, "
                "output_tokens = output_tokens + %s, cached_tokens = cached_tokens + %s "
                "WHERE run_id = %s",
                tokens,
            )
    await conn.execute(
        "INSERT INTO agentledger_usage_sessions SELECT s.id, coalesce(sum(u.bytes), 0), "
        "coalesce(sum(u.records), 0), count(u.run_id), coalesce(sum(u.input_tokens), 0), "
        "coalesce(sum(u.output_tokens), 0), coalesce(sum(u.cached_tokens), 0) "
        "FROM agentledger_sessions s LEFT JOIN agentledger_usage_runs u ON u.session_id = s.id "
        "GROUP BY s.id"
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", _INITIAL),
    Migration(2, "session labels", _SESSION_LABELS),
    Migration(3, "record checksums", _RECORD_CHECKSUMS, _backfill_checksums),
    Migration(4, "purge receipts", _PURGE_RECEIPTS),
    Migration(5, "encryption marker", _ENCRYPTION_MARKER),
    Migration(6, "transcripts checked", _UNCHECKED_TRANSCRIPTS, _check_transcripts),
    Migration(7, "tool results", _TOOL_RESULTS),
    Migration(8, "tool result checksums", _TOOL_RESULT_CHECKSUMS, _backfill_tool_result_checksums),
    Migration(9, "history references", _HISTORY_REFERENCES),
    Migration(10, "transcript windows", _TRANSCRIPT_WINDOWS),
    Migration(11, "session label index", _SESSION_LABEL_INDEX),
    Migration(12, "start records", _START_RECORDS),
    Migration(13, "session messages", _SESSION_MESSAGES),
    Migration(14, "usage counters", _USAGE_COUNTERS, _backfill_usage),
    # [G1] the search index, written with each record; older records are indexed
    # afterwards in resumable batches (search.build_index).
    Migration(15, "search index", search_schema.MIGRATION),
    # [G3] the usage totals of each label value (in shards), and the triggers that count
    # what each inserted row adds and add a run's counters up into its session's and its
    # labels' (see storage/postgres/usage.py); existing labels are added up once here.
    Migration(16, "usage label totals", usage_schema.MIGRATION, usage_schema.backfill_label_totals),
    # [G1] the search index moved onto the records' rows: an append writes no row of its
    # own, one words column and one position per record (see storage/postgres/search.py).
    Migration(17, "search index on records", search_schema.MIGRATION_17),
    # [G3] a run's and a session's bytes and records on their own rows, which an append
    # updates anyway: an append writes no counter row (see storage/postgres/usage.py).
    Migration(18, "usage on run and session rows", usage_schema.MIGRATION_18),
)
"""Every migration this code knows, in order."""

SCHEMA_VERSION = MIGRATIONS[-1].version
"""The schema version this code reads and writes."""

_Conn = AsyncConnection[TupleRow]


async def _table_exists(conn: _Conn) -> bool:
    cur = await conn.execute("SELECT to_regclass(%s) IS NOT NULL", (MIGRATIONS_TABLE,))
    row = await cur.fetchone()
    return bool(row and row[0])


async def applied(conn: _Conn) -> list[AppliedMigration]:
    """The migrations recorded in the database, oldest first. Never writes."""
    if not await _table_exists(conn):
        return []
    cur = await conn.execute(
        f"SELECT version, name, applied_at FROM {MIGRATIONS_TABLE} ORDER BY version"
    )
    return [AppliedMigration(v, n, at) for v, n, at in await cur.fetchall()]


def _check_known(done: list[AppliedMigration]) -> None:
    """Refuse a database written by newer (or different) code."""
    known = {m.version: m for m in MIGRATIONS}
    unknown = [row.version for row in done if row.version not in known]
    if unknown:
        raise SchemaVersionError(current=max(unknown), latest=SCHEMA_VERSION)
    for row in done:
        ours = known[row.version]
        if ours.name != row.name:
            raise ValidationError(
                field="schema_version",
                expected=f"migration {row.version} named {ours.name!r}",
                got=row.name,
            )


async def pending(conn: _Conn) -> list[Migration]:
    """The migrations not yet applied, in order. Never writes.

    Raises:
        SchemaVersionError: the database was migrated by newer code.
        ValidationError: a recorded migration has another name than this code's.
    """
    done = await applied(conn)
    _check_known(done)
    versions = {row.version for row in done}
    return [m for m in MIGRATIONS if m.version not in versions]


async def migrate(conn: _Conn, upto: int | None = None) -> list[int]:
    """Apply every pending migration (up to version ``upto``), each with its row in one transaction.

    ``conn`` must be in autocommit mode (no transaction open). Returns the
    versions this call applied (empty when another opener got there first).
    """
    if not await pending(conn):  # the usual case: read only, no lock
        return []
    done: list[int] = []
    while True:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            todo = await pending(conn)
            if not todo or (upto is not None and todo[0].version > upto):
                return done
            step = todo[0]
            await conn.execute(step.sql)
            if step.backfill is not None:
                await step.backfill(conn)
            await conn.execute(
                f"INSERT INTO {MIGRATIONS_TABLE} (version, name) VALUES (%s, %s)",
                (step.version, step.name),
            )
        done.append(step.version)
