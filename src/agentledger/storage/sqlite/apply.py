"""Applying a Plan to SQLite inside the transaction that decided it.

The plan says what the rows become; this module only stores it. A run the
decision read is updated in the columns that changed. An append changes only
``last_seq``, which is not stored (it is the run's newest record id), so the
hot path writes its INSERTs and nothing else.

The plan's statements are all built before the first one runs, so a plan
that fails while being built (sealing, say) has written nothing, and a plan
of one statement needs no savepoint to be undone alone: SQLite undoes a
failed statement by itself.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import msgspec

from agentledger.storage.integrity import tool_result_checksum
from agentledger.storage.message_rows import MESSAGE_COLUMNS, message_values
from agentledger.storage.receipts import encode_receipt
from agentledger.storage.search import count_purged
from agentledger.storage.sqlite import search
from agentledger.storage.sqlite.reader import SQLiteReader
from agentledger.storage.sqlite.rows import (
    RECORD_COLUMNS,
    RUN_FIELDS,
    encode_labels,
    record_values,
    run_value,
    to_ms,
)
from agentledger.storage.sqlite.usage import ADD_TOKENS, insert_record, token_rows
from agentledger.storage.state import Plan, RunRow, SessionRow
from agentledger.storage.usage_sql import UsageTables

__all__ = ["ADD_TOKENS", "INSERT_RECORD", "USAGE", "apply_plan", "plan_statements"]

_UPSERT_SESSION = (
    "INSERT INTO sessions (id, status, created_at, ended_at, labels) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET status = excluded.status, "
    "created_at = excluded.created_at, ended_at = excluded.ended_at"
)
_UPSERT_LABELS = (
    "INSERT INTO session_labels (session_id, key, value, status, created_at) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id, key) DO UPDATE SET "
    "value = excluded.value, status = excluded.status, created_at = excluded.created_at"
)
"""[D6] the label index rows of a session, written with its row (see schema migration 13)."""
_UPSERT_RUN = (
    f"INSERT INTO runs ({', '.join(RUN_FIELDS)}) VALUES ({', '.join('?' * len(RUN_FIELDS))}) "
    "ON CONFLICT (run_id) DO UPDATE SET "
    + ", ".join(f"{name} = excluded.{name}" for name in RUN_FIELDS[1:])
)
_UPSERT_CHECKPOINT = (
    "INSERT INTO checkpoints (run_id, id, data) VALUES (?, ?, ?) "
    "ON CONFLICT (run_id) DO UPDATE SET id = excluded.id, data = excluded.data"
)
_DELETE_CHECKPOINT = "DELETE FROM checkpoints WHERE run_id = ?"
INSERT_RECORD = insert_record(RECORD_COLUMNS)
"""One record, with its run's and its session's counters (schema migration 21)."""
_INSERT_TOOL_RESULT = (
    "INSERT INTO tool_results (run_id, call_key, data, checksum) VALUES (?, ?, ?, ?)"
)
_DELETE_TOOL_RESULTS = "DELETE FROM tool_results WHERE run_id = ?"
_UPSERT_MESSAGE = (
    f"INSERT INTO session_messages ({MESSAGE_COLUMNS}) VALUES ({', '.join('?' * 14)}) "
    "ON CONFLICT (run_id) DO UPDATE SET started = excluded.started, fate = excluded.fate, "
    "after_run_id = excluded.after_run_id"
)
_CHANGEABLE = RUN_FIELDS[1:]  # run_id is the key


USAGE = UsageTables(
    runs="usage_runs",
    sessions="usage_sessions",
    all_sessions="(SELECT id AS session_id FROM sessions)",
    labels="session_labels",
    label_totals="usage_labels",
    mark="?",
)
"""[G3] the counters, read through the views of ``usage_counts`` (schema migration 21;
triggers count what rows add). A write adds tokens with :data:`ADD_TOKENS`."""
_PURGE = (
    # first its runs' counters and its own, while its records still hold their part of
    # them (the trigger takes the session's whole totals off its labels')
    "DELETE FROM usage_counts WHERE session_id = :id",
    "INSERT INTO run_tombstones (run_id, session_id) "
    "SELECT run_id, session_id FROM runs WHERE session_id = :id",
    "DELETE FROM checkpoints WHERE run_id IN (SELECT run_id FROM runs WHERE session_id = :id)",
    "DELETE FROM records WHERE run_id IN (SELECT run_id FROM runs WHERE session_id = :id)",
    "DELETE FROM tool_results WHERE run_id IN (SELECT run_id FROM runs WHERE session_id = :id)",
    "DELETE FROM runs WHERE session_id = :id",
    "DELETE FROM session_labels WHERE session_id = :id",
    "INSERT OR IGNORE INTO run_tombstones (run_id, session_id) "
    "SELECT run_id, session_id FROM session_messages WHERE session_id = :id",
    "DELETE FROM session_messages WHERE session_id = :id",
    "DELETE FROM sessions WHERE id = :id",
    "INSERT INTO session_tombstones (id, receipt) VALUES (:id, :receipt)",
)


_Statement = tuple[str, Any, bool]
"""SQL, its parameters, and whether they are many rows (``executemany``)."""


def apply_plan(
    conn: sqlite3.Connection, reader: SQLiteReader, plan: Plan[Any], *, undoable: bool = False
) -> None:
    """Write ``plan`` in the open transaction, in the order the plan gives.

    ``undoable``: the transaction holds other writes, so if this fails it must
    leave none of its own: a plan of more than one statement then runs under a
    savepoint, rolled back on failure (one statement is undone by SQLite).
    """
    statements = plan_statements(reader, plan)
    if len(statements) == 1 and not statements[0][2]:  # one statement: an append
        conn.execute(statements[0][0], statements[0][1])
        return
    if not undoable or not statements:
        _execute(conn, statements)
        return
    conn.execute("SAVEPOINT plan")
    try:
        _execute(conn, statements)
    except BaseException:
        if conn.in_transaction:  # else SQLite rolled the whole transaction back
            conn.execute("ROLLBACK TO plan")
            conn.execute("RELEASE plan")
        raise
    conn.execute("RELEASE plan")


def _execute(conn: sqlite3.Connection, statements: Sequence[_Statement]) -> None:
    for sql, params, many in statements:
        if many and len(params) == 1:  # execute is cheaper than executemany for one row
            conn.execute(sql, params[0])
        elif many:
            conn.executemany(sql, params)
        else:
            conn.execute(sql, params)


def plan_statements(reader: SQLiteReader, plan: Plan[Any]) -> list[_Statement]:
    """The statements that store ``plan``, in order; notes its runs in ``reader``."""
    statements: list[_Statement] = []
    if plan.session is not None:
        statements.append((_UPSERT_SESSION, _session_values(plan.session), False))
        if plan.session.labels:
            statements.append((_UPSERT_LABELS, _label_values(plan.session), True))
    for row in plan.runs:
        _put_run(statements, reader, row)
    records = plan.records
    sealer = reader.sealer
    indexing = search.index_statements(records, sealed=sealer is not None) if records else []
    if sealer is not None:
        records = [
            msgspec.structs.replace(record, payload=sealer.seal_record(record))
            for record in records
        ]
    tokens = token_rows(plan.records) if records else None  # [G3] the rest: the triggers
    if len(records) > 2:  # a batch: executemany saves about a third per row
        statements.append((INSERT_RECORD, [record_values(record) for record in records], True))
    else:  # one or two: execute is cheaper than executemany
        for record in records:
            statements.append((INSERT_RECORD, record_values(record), False))
    if tokens:
        statements.append((ADD_TOKENS, tokens, True))
    statements += indexing
    for result in plan.tool_results:
        data = result.data
        if sealer is not None:
            data = sealer.seal_tool_result(result.session_id, result.run_id, result.call_key, data)
        checksum = tool_result_checksum(result.run_id, result.call_key, data)
        statements.append(
            (_INSERT_TOOL_RESULT, (result.run_id, result.call_key, data, checksum), False)
        )
    for message in plan.messages:
        statements.append((_UPSERT_MESSAGE, message_values(message, to_ms, sealer), False))
    ended = plan.ended_runs
    if ended:
        statements.append((_DELETE_TOOL_RESULTS, [(run_id,) for run_id in ended], True))
    if plan.purge_session:
        assert plan.purge_receipt is not None
        purged = [plan.purge_session, *(receipt.session_id for receipt in plan.cascade)]
        removed, unindex = reader.search_purge(purged)  # [G2] and the copies' holders
        count_purged(plan, removed)
        statements += unindex  # the words, recomputed from the records still there
        for receipt in (plan.purge_receipt, *plan.cascade):
            params = {"id": receipt.session_id, "receipt": encode_receipt(receipt)}
            statements.extend(
                (statement, {"id": receipt.session_id}, False) for statement in search.PURGE
            )
            statements.extend((statement, params, False) for statement in _PURGE)
        statements.extend((statement, {}, False) for statement in search.AFTER_PURGE)
    return statements


def _session_values(row: SessionRow) -> tuple[object, ...]:
    ended_at = None if row.ended_at is None else to_ms(row.ended_at)
    return (row.id, str(row.status), to_ms(row.created_at), ended_at, encode_labels(row.labels))


def _label_values(row: SessionRow) -> list[tuple[object, ...]]:
    status, created_at = str(row.status), to_ms(row.created_at)
    return [(row.id, key, value, status, created_at) for key, value in row.labels.items()]


def _put_run(statements: list[_Statement], reader: SQLiteReader, row: RunRow) -> None:
    before = reader.runs_read.get(row.run_id)
    reader.runs_read[row.run_id] = row
    if before is not None and row == msgspec.structs.replace(before, last_seq=row.last_seq):
        return  # an append: last_seq is not stored
    if before is None:
        values = [run_value(name, getattr(row, name)) for name in RUN_FIELDS]
        statements.append((_UPSERT_RUN, values, False))
    else:
        changed = [name for name in _CHANGEABLE if getattr(row, name) != getattr(before, name)]
        if changed:
            assignments = ", ".join(f"{name} = ?" for name in changed)
            values = [run_value(name, getattr(row, name)) for name in changed]
            sql = f"UPDATE runs SET {assignments} WHERE run_id = ?"
            statements.append((sql, [*values, row.run_id], False))
    if row.checkpoint != (before.checkpoint if before is not None else None):
        if row.checkpoint is None:
            statements.append((_DELETE_CHECKPOINT, (row.run_id,), False))
        else:
            data = row.checkpoint.data
            if reader.sealer is not None:
                data = reader.sealer.seal_checkpoint(row.session_id, row.run_id, row.checkpoint)
            statements.append((_UPSERT_CHECKPOINT, (row.run_id, row.checkpoint.id, data), False))
