"""Applying a Plan to SQLite inside the transaction that decided it.

The plan says what the rows become; this module only stores it. A run the
decision read is updated in the columns that changed. An append changes only
``last_seq``, which is not stored (it is the run's newest record id), so the
hot path writes its INSERTs and nothing else.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import msgspec

from agentledger.storage.integrity import tool_result_checksum
from agentledger.storage.receipts import encode_receipt
from agentledger.storage.sqlite.reader import SQLiteReader
from agentledger.storage.sqlite.rows import (
    RECORD_COLUMNS,
    RUN_FIELDS,
    encode_labels,
    record_values,
    run_value,
    to_ms,
)
from agentledger.storage.state import Plan, RunRow, SessionRow

__all__ = ["apply_plan"]

_UPSERT_SESSION = (
    "INSERT INTO sessions (id, status, created_at, ended_at, labels) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET status = excluded.status, "
    "created_at = excluded.created_at, ended_at = excluded.ended_at"
)
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
_INSERT_RECORD = f"INSERT INTO records ({RECORD_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_INSERT_TOOL_RESULT = (
    "INSERT INTO tool_results (run_id, call_key, data, checksum) VALUES (?, ?, ?, ?)"
)
_DELETE_TOOL_RESULTS = "DELETE FROM tool_results WHERE run_id = ?"
_CHANGEABLE = RUN_FIELDS[1:]  # run_id is the key
_PURGE = (
    "INSERT INTO run_tombstones (run_id, session_id) "
    "SELECT run_id, session_id FROM runs WHERE session_id = :id",
    "DELETE FROM checkpoints WHERE run_id IN (SELECT run_id FROM runs WHERE session_id = :id)",
    "DELETE FROM records WHERE run_id IN (SELECT run_id FROM runs WHERE session_id = :id)",
    "DELETE FROM tool_results WHERE run_id IN (SELECT run_id FROM runs WHERE session_id = :id)",
    "DELETE FROM runs WHERE session_id = :id",
    "DELETE FROM sessions WHERE id = :id",
    "INSERT INTO session_tombstones (id, receipt) VALUES (:id, :receipt)",
)


def apply_plan(conn: sqlite3.Connection, reader: SQLiteReader, plan: Plan[Any]) -> None:
    """Write ``plan`` in the open transaction, in the order the plan gives."""
    if plan.session is not None:
        _put_session(conn, plan.session)
    for row in plan.runs:
        _put_run(conn, reader, row)
    records = plan.records
    sealer = reader.sealer
    if sealer is not None:
        records = [
            msgspec.structs.replace(record, payload=sealer.seal_record(record))
            for record in records
        ]
    if len(records) > 2:  # a batch: executemany saves about a third per row
        conn.executemany(_INSERT_RECORD, [record_values(record) for record in records])
    else:  # one or two: execute is cheaper than executemany
        for record in records:
            conn.execute(_INSERT_RECORD, record_values(record))
    for result in plan.tool_results:
        data = result.data
        if sealer is not None:
            data = sealer.seal_tool_result(result.session_id, result.run_id, result.call_key, data)
        checksum = tool_result_checksum(result.run_id, result.call_key, data)
        conn.execute(_INSERT_TOOL_RESULT, (result.run_id, result.call_key, data, checksum))
    ended = plan.ended_runs
    if ended:
        conn.executemany(_DELETE_TOOL_RESULTS, [(run_id,) for run_id in ended])
    if plan.purge_session:
        assert plan.purge_receipt is not None
        params = {"id": plan.purge_session, "receipt": encode_receipt(plan.purge_receipt)}
        for statement in _PURGE:
            conn.execute(statement, params)


def _put_session(conn: sqlite3.Connection, row: SessionRow) -> None:
    ended_at = None if row.ended_at is None else to_ms(row.ended_at)
    values = (row.id, str(row.status), to_ms(row.created_at), ended_at, encode_labels(row.labels))
    conn.execute(_UPSERT_SESSION, values)


def _put_run(conn: sqlite3.Connection, reader: SQLiteReader, row: RunRow) -> None:
    before = reader.runs_read.get(row.run_id)
    if before is not None and row == msgspec.structs.replace(before, last_seq=row.last_seq):
        reader.runs_read[row.run_id] = row  # an append: last_seq is not stored
        return
    if before is None:
        conn.execute(_UPSERT_RUN, [run_value(name, getattr(row, name)) for name in RUN_FIELDS])
    else:
        changed = [name for name in _CHANGEABLE if getattr(row, name) != getattr(before, name)]
        if changed:
            assignments = ", ".join(f"{name} = ?" for name in changed)
            values = [run_value(name, getattr(row, name)) for name in changed]
            conn.execute(f"UPDATE runs SET {assignments} WHERE run_id = ?", [*values, row.run_id])
    if row.checkpoint != (before.checkpoint if before is not None else None):
        if row.checkpoint is None:
            conn.execute(_DELETE_CHECKPOINT, (row.run_id,))
        else:
            data = row.checkpoint.data
            if reader.sealer is not None:
                data = reader.sealer.seal_checkpoint(row.session_id, row.run_id, row.checkpoint)
            conn.execute(_UPSERT_CHECKPOINT, (row.run_id, row.checkpoint.id, data))
    reader.runs_read[row.run_id] = row
