"""Writing a decision's :class:`~agentledger.storage.state.Plan` in its transaction.

Rows the decision saw as absent are INSERTed, rows it read are UPDATEd: a
unique violation therefore means another writer created the row first, and
the operation is retried from scratch rather than overwriting anything.

Records get their per-run id from the decision. Records of a session also
get a per-session position: the session row's ``last_seq`` plus one, two ...,
written back as the new ``last_seq``. That row is locked ``FOR UPDATE`` by
every writer to the session (see :mod:`._reader`) and held to commit, so
positions are handed out in commit order, without gaps: a reader never sees
position ``n + 1`` before ``n``, and the session log pages like a run log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
from psycopg.types.json import Jsonb

from agentledger.storage.accounting import USAGE_COLUMNS, token_rows
from agentledger.storage.integrity import tool_result_checksum
from agentledger.storage.message_rows import MESSAGE_COLUMNS, message_values
from agentledger.storage.postgres import search
from agentledger.storage.postgres import usage as usage_schema
from agentledger.storage.postgres.reader import Loader
from agentledger.storage.postgres.rows import (
    RECORD_COLUMNS,
    RUN_COLUMNS,
    record_params,
    run_params,
)
from agentledger.storage.receipts import encode_receipt
from agentledger.storage.search import count_purged
from agentledger.storage.state import Plan
from agentledger.storage.types import Record
from agentledger.storage.usage_sql import UsageTables

if TYPE_CHECKING:
    from agentledger.storage.encryption import Encryption

__all__ = ["RUN_USAGE", "USAGE", "StaleWrite", "apply_plan", "changed_columns"]


class StaleWrite(Exception):
    """An UPDATE matched no row: the state changed under the decision; retry it."""


_RUN_FIELDS = [c.strip() for c in RUN_COLUMNS.split(",")]
_CHECKPOINT_DATA = _RUN_FIELDS.index("checkpoint_data")
_INSERT_RUN = (
    f"INSERT INTO agentledger_runs ({RUN_COLUMNS}, usage_bytes) "
    f"VALUES ({', '.join(['%s'] * (len(_RUN_FIELDS) + 1))})"
)
_INSERT_SESSION = (
    "INSERT INTO agentledger_sessions (id, status, created_at, ended_at, labels) "
    "VALUES (%s, %s, %s, %s, %s)"
)
_INSERT_LABELS = (
    "INSERT INTO agentledger_session_labels (session_id, key, value, status, created_at) "
    "SELECT %s, key, value, %s, %s FROM jsonb_each_text(%s)"
)
"""[D6] the label index rows of a new session (see migration 11)."""
_UPDATE_LABELS = (
    "UPDATE agentledger_session_labels SET status = %s, created_at = %s WHERE session_id = %s"
)
_RECORD_FIELDS = len(RECORD_COLUMNS.split(",")) + 1
_INSERT_RECORDS = (
    f"INSERT INTO agentledger_records ({RECORD_COLUMNS}, session_seq, search_pos, words) VALUES "
)
_RECORD_VALUES = (
    "(" + ", ".join(["%s"] * _RECORD_FIELDS) + f", {search.POSITION}, %s::tsvector)"
)  # [G1] a record's words and position in the search index, or NULLs
_RECORDS_PER_INSERT = 1000  # well below PostgreSQL's 65,535 parameters per statement
_INSERT_TOOL_RESULT = (
    "INSERT INTO agentledger_tool_results (run_id, call_key, data, checksum) "
    "VALUES (%s, %s, %s, %s)"
)
_UPSERT_MESSAGE = (
    f"INSERT INTO agentledger_session_messages ({MESSAGE_COLUMNS}) "
    f"VALUES ({', '.join(['%s'] * 14)}) "
    "ON CONFLICT (run_id) DO UPDATE SET started = excluded.started, fate = excluded.fate, "
    "after_run_id = excluded.after_run_id"
)
_DELETE_TOOL_RESULTS = "DELETE FROM agentledger_tool_results WHERE run_id = ANY(%s)"
_ALLOCATE = (
    "UPDATE agentledger_sessions SET last_seq = %s, usage_bytes = usage_bytes + %s "
    "WHERE id = %s AND last_seq = %s"
)
"""[G3] a session's new positions and the payload bytes they add (migration 18)."""
_ADD_RUN_BYTES = "UPDATE agentledger_runs SET usage_bytes = usage_bytes + %s WHERE run_id = %s"
USAGE = UsageTables(
    runs="agentledger_usage_runs",
    sessions=usage_schema.SESSION_TOTALS,
    all_sessions="(SELECT id AS session_id FROM agentledger_sessions)",
    labels="agentledger_session_labels",
    label_totals="agentledger_usage_labels",
    mark="%s",
)
"""[G3] the counter tables (migrations 14 and 16; triggers count what rows add), read
through the views adding a session's own row (migration 18)."""
RUN_USAGE = f"SELECT {', '.join(USAGE_COLUMNS)} FROM {usage_schema.RUN_TOTALS} WHERE run_id = %s"
"""One run's counters: its counter row plus its own row's bytes and records."""
_PURGE = (
    "DELETE FROM agentledger_usage_runs WHERE session_id = %(s)s",
    "DELETE FROM agentledger_usage_sessions WHERE session_id = %(s)s",
    "INSERT INTO agentledger_purged_runs (run_id, session_id) "
    "SELECT run_id, session_id FROM agentledger_runs WHERE session_id = %(s)s",
    "DELETE FROM agentledger_records WHERE run_id IN "
    "(SELECT run_id FROM agentledger_runs WHERE session_id = %(s)s)",
    "DELETE FROM agentledger_tool_results WHERE run_id IN "
    "(SELECT run_id FROM agentledger_runs WHERE session_id = %(s)s)",
    "DELETE FROM agentledger_runs WHERE session_id = %(s)s",
    "DELETE FROM agentledger_session_labels WHERE session_id = %(s)s",
    "INSERT INTO agentledger_purged_runs (run_id, session_id) "
    "SELECT run_id, session_id FROM agentledger_session_messages WHERE session_id = %(s)s "
    "ON CONFLICT DO NOTHING",
    "DELETE FROM agentledger_session_messages WHERE session_id = %(s)s",
    "DELETE FROM agentledger_sessions WHERE id = %(s)s",
    "INSERT INTO agentledger_purged_sessions (id, receipt) VALUES (%(s)s, %(receipt)s)",
)


async def _session_positions(
    loader: Loader, plan: Plan[Any]
) -> tuple[list[int | None], dict[str, tuple[int, int]]]:
    """Each record's session position (None if sessionless), and each session's (old, new) end."""
    newest = loader.cache.session_seq
    for record in plan.records:
        if record.session_id and record.session_id not in newest:
            await loader.session(record.session_id)  # every writer locked it already
            if record.session_id not in newest:
                raise StaleWrite(record.session_id)
    ends: dict[str, int] = {}
    positions: list[int | None] = []
    for record in plan.records:
        if record.session_id:
            ends[record.session_id] = ends.get(record.session_id, newest[record.session_id]) + 1
            positions.append(ends[record.session_id])
        else:
            positions.append(None)
    return positions, {sid: (newest[sid], end) for sid, end in ends.items()}


def _one_row(update: str) -> str:
    """``update`` as a statement that fails unless it changed exactly one row.

    The failure (division by zero, seen as :class:`StaleWrite`) aborts the
    transaction in the same round trip, so a pipelined COMMIT after it never
    commits a partial plan; no result has to be awaited before the COMMIT.
    """
    return f"WITH changed AS ({update} RETURNING 1) SELECT 1 / count(*)::int FROM changed"


def _same(value: object) -> object:
    return value


def _plain(value: object) -> object:
    return value.obj if isinstance(value, Jsonb) else value


def changed_columns(new: tuple[object, ...], old: tuple[object, ...]) -> list[int]:
    """Positions (past the key) of the parameters that differ (one object is one value)."""
    return [
        i for i in range(1, len(new)) if new[i] is not old[i] and _plain(new[i]) != _plain(old[i])
    ]


def _stored(plan: Plan[Any], sealer: Encryption | None) -> list[tuple[Record, str | None]]:
    """Each of ``plan``'s records as stored (sealed with ``sealer``), and its search words
    (None if sealed)."""
    if sealer is None:
        return [(record, search.record_words(record)) for record in plan.records]
    return [
        (msgspec.structs.replace(record, payload=sealer.seal_record(record)), None)
        for record in plan.records
    ]


async def apply_plan(loader: Loader, plan: Plan[Any]) -> None:
    """Write ``plan`` (session, runs, records, purge, in that order) in the loader's transaction.

    Statements are only sent, never awaited for a result, so on a connection
    in pipeline mode the whole plan and its COMMIT share one round trip.
    Every UPDATE names the columns that changed, and must match its row or
    the transaction fails (:class:`StaleWrite`, retried): the rows are
    locked, so that never happens unless the locking is wrong, and then
    nothing is overwritten.
    """
    conn, cache = loader.conn, loader.cache
    if plan.session is not None and cache.sessions.get(plan.session.id) is None:
        cache.session_seq[plan.session.id] = 0  # inserted below, its log empty (an import)
    positions, allocations = await _session_positions(loader, plan)
    row = plan.session
    if row is not None:
        before = cache.sessions.get(row.id)
        if before is None:
            insert = (row.id, row.status.value, row.created_at, row.ended_at, Jsonb(row.labels))
            await conn.execute(_INSERT_SESSION, insert)
            if row.labels:
                labels = (row.id, row.status.value, row.created_at, Jsonb(row.labels))
                await conn.execute(_INSERT_LABELS, labels)
        else:
            columns = {
                "status": (row.status.value, before.status.value),
                "created_at": (row.created_at, before.created_at),
                "ended_at": (row.ended_at, before.ended_at),
            }
            sets = {name: new for name, (new, old) in columns.items() if new != old}
            if sets:
                assignments = ", ".join(f"{name} = %s" for name in sets)
                update = f"UPDATE agentledger_sessions SET {assignments} WHERE id = %s"
                await conn.execute(_one_row(update), (*sets.values(), row.id))
                if row.labels and sets.keys() & {"status", "created_at"}:
                    moved = (row.status.value, row.created_at, row.id)
                    await conn.execute(_UPDATE_LABELS, moved)
    sealer = loader.sealer
    stored = _stored(plan, sealer)
    run_bytes: dict[str, int] = {}  # [G3] each run's new payload bytes, as stored
    session_bytes: dict[str, int] = {}
    for record, _ in stored:
        size = len(record.payload)
        run_bytes[record.run_id] = run_bytes.get(record.run_id, 0) + size
        if record.session_id:
            session_bytes[record.session_id] = session_bytes.get(record.session_id, 0) + size
    for run in plan.runs:
        values = run_params(run)
        previous = cache.runs.get(run.run_id)
        changed = None if previous is None else changed_columns(values, run_params(previous))
        if sealer is not None and run.checkpoint is not None:  # compared plaintext, sent sealed
            sealed = list(values)
            sealed[_CHECKPOINT_DATA] = sealer.seal_checkpoint(
                run.session_id, run.run_id, run.checkpoint
            )
            values = tuple(sealed)
        added = run_bytes.pop(run.run_id, 0)
        if changed is None:
            await conn.execute(_INSERT_RUN, (*values, added))
            continue
        if sealer is not None and _CHECKPOINT_DATA - 1 in changed:
            changed = sorted({*changed, _CHECKPOINT_DATA})  # the id is in the sealed data's AAD
        if changed or added:
            assignments = ", ".join(
                [*(f"{_RUN_FIELDS[i]} = %s" for i in changed), "usage_bytes = usage_bytes + %s"]
            )
            update = f"UPDATE agentledger_runs SET {assignments} WHERE run_id = %s"
            update_params = (*(values[i] for i in changed), added, run.run_id)
            await conn.execute(_one_row(update), update_params)
    for run_id, added in run_bytes.items():  # records of a run the plan does not change
        await conn.execute(_one_row(_ADD_RUN_BYTES), (added, run_id))
    if plan.records:
        for session_id, (old, new) in allocations.items():
            added = session_bytes.get(session_id, 0)
            await conn.execute(_one_row(_ALLOCATE), (new, added, session_id, old))
            session = plan.session if plan.session and plan.session.id == session_id else None
            labeled = session if session is not None else cache.sessions.get(session_id)
            if labeled is not None and labeled.labels:  # [G3] fixed at its creation
                counts = {"b": added, "n": new - old, "sid": session_id}
                await conn.execute(usage_schema.ADD_TO_LABELS, counts)
        pairs = list(zip(stored, positions, strict=True))
        for start in range(0, len(pairs), _RECORDS_PER_INSERT):  # an import may hold many
            chunk = pairs[start : start + _RECORDS_PER_INSERT]
            flat: list[object] = []
            for (record, words), position in chunk:
                flat.extend(record_params(record, position))
                flat += (words, words)
            values_sql = ", ".join([_RECORD_VALUES] * len(chunk))
            await conn.execute(_INSERT_RECORDS + values_sql, flat)
        if sealer is not None:
            await search.note_left_out(conn, plan.records)
        for tokens in token_rows(plan.records):  # [G3] the rest is counted by triggers
            await conn.execute(USAGE.add_tokens, tokens)
    for result in plan.tool_results:
        data = result.data
        if sealer is not None:
            data = sealer.seal_tool_result(result.session_id, result.run_id, result.call_key, data)
        checksum = tool_result_checksum(result.run_id, result.call_key, data)
        await conn.execute(_INSERT_TOOL_RESULT, (result.run_id, result.call_key, data, checksum))
    for message in plan.messages:
        await conn.execute(_UPSERT_MESSAGE, message_values(message, _same, sealer))
    ended = plan.ended_runs
    if ended:
        await conn.execute(_DELETE_TOOL_RESULTS, (ended,))
    if plan.purge_session:
        count_purged(plan, await search.count_entries(conn, plan.purge_session))
        assert plan.purge_receipt is not None
        for receipt in (plan.purge_receipt, *plan.cascade):  # [G2] and the copies' holders
            params = {"s": receipt.session_id, "receipt": encode_receipt(receipt)}
            for query in (*search.PURGE, *_PURGE):
                await conn.execute(query, params)
