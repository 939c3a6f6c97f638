"""SQLiteMemory: product memory in an SQLite file (standard library ``sqlite3``).

Its table is its own (``agentledger_memory_events``, STRICT), so it can share
a file with :class:`~agentledger.storage.sqlite.SQLiteStore` or live in
another; either way the product, not the runtime, owns retention and deletion.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any

import msgspec

from agentledger.errors import RecordConflictError, TransientError
from agentledger.memory.types import ErasedEvent, MemoryEvent, Snapshot, check_last, tail_unchanged
from agentledger.storage.sqlite.connection import map_open_error
from agentledger.storage.sqlite.opening import enable_wal
from agentledger.transcript import JsonNumber

__all__ = ["SQLiteMemory"]

_BUSY_TIMEOUT = 30.0
"""Seconds a statement waits for another connection's lock on the file."""
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS agentledger_memory_events (
        agent_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        key TEXT NOT NULL,
        type TEXT NOT NULL,
        payload BLOB NOT NULL,
        source_session TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (agent_id, run_id, key)
    ) STRICT""",
    """CREATE UNIQUE INDEX IF NOT EXISTS agentledger_memory_events_order
        ON agentledger_memory_events (agent_id, run_id, seq)""",
)
_SOURCE_COLUMN = (  # [G2] added to a table from before sources (its events have none)
    "ALTER TABLE agentledger_memory_events ADD COLUMN source_session TEXT NOT NULL DEFAULT ''"
)
_SOURCE_INDEX = (
    "CREATE INDEX IF NOT EXISTS agentledger_memory_events_source"
    " ON agentledger_memory_events (source_session) WHERE source_session != ''"
)
_DELETE_DERIVED = (
    "DELETE FROM agentledger_memory_events WHERE source_session = ?"
    " RETURNING agent_id, run_id, seq, key"
)


_POP = (
    "DELETE FROM agentledger_memory_events WHERE agent_id = ?1 AND run_id = ?2 AND seq = ("
    " SELECT MAX(seq) FROM agentledger_memory_events WHERE agent_id = ?1 AND run_id = ?2)"
    " RETURNING payload"
)
_DELETE = "DELETE FROM agentledger_memory_events WHERE agent_id = ? AND run_id = ? RETURNING seq"


def _enc_hook(value: Any) -> Any:
    if isinstance(value, JsonNumber):
        return msgspec.Raw(value.literal.encode("ascii"))
    raise TypeError(f"not JSON: {type(value).__name__}")


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook, decimal_format="number")
_DECODER = msgspec.json.Decoder(MemoryEvent, float_hook=JsonNumber)


class SQLiteMemory:
    """A product-memory ``ProductMemory`` in one SQLite file.

    Open with :meth:`open`, close with :meth:`close`. Each append, pop and
    delete is one ``BEGIN IMMEDIATE`` transaction, so writers in other threads
    and processes (each with its own ``SQLiteMemory`` on the file, or threads
    sharing one) are serialised by SQLite itself.
    """

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        """Use :meth:`open`."""
        self.path = path
        self._conn = conn
        self._lock = threading.Lock()

    @classmethod
    async def open(cls, path: str | os.PathLike[str]) -> SQLiteMemory:
        """Open (creating its table if needed) the memory at ``path``."""
        name = os.fspath(path)

        def connect() -> sqlite3.Connection:
            try:
                conn = sqlite3.connect(
                    name, isolation_level=None, check_same_thread=False, timeout=_BUSY_TIMEOUT
                )
            except sqlite3.Error as e:
                raise map_open_error(e, name) from e
            try:
                # Another process opening the same new file may hold it for a moment.
                enable_wal(conn, _BUSY_TIMEOUT)
                for statement in _SCHEMA:
                    conn.execute(statement)
                columns = {
                    row[1] for row in conn.execute("PRAGMA table_info(agentledger_memory_events)")
                }
                if "source_session" not in columns:
                    conn.execute(_SOURCE_COLUMN)
                conn.execute(_SOURCE_INDEX)
            except sqlite3.Error as e:
                conn.close()
                raise map_open_error(e, name) from e
            return conn

        return cls(await asyncio.to_thread(connect), name)

    async def close(self) -> None:
        """Close the connection."""
        await asyncio.to_thread(self._conn.close)

    def _append(self, agent_id: str, run_id: str, events: tuple[MemoryEvent, ...]) -> None:
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                _insert(conn, agent_id, run_id, events)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def _replace(
        self,
        agent_id: str,
        run_id: str,
        replaced: tuple[str, ...],
        events: tuple[MemoryEvent, ...],
        whole: bool,
        archive: str | None,
        provenance: tuple[MemoryEvent, ...],
        expired: tuple[str, ...],
    ) -> bool:
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                rows = conn.execute(
                    "SELECT key, payload FROM agentledger_memory_events"
                    " WHERE agent_id = ? AND run_id = ? ORDER BY seq DESC LIMIT ?",
                    (agent_id, run_id, len(replaced) + whole),
                ).fetchall()[::-1]
                first = conn.execute(
                    "SELECT key FROM agentledger_memory_events"
                    " WHERE agent_id = ? AND run_id = ? ORDER BY seq LIMIT ?",
                    (agent_id, run_id, len(expired)),
                ).fetchall()
                latest, earliest = [row[0] for row in rows], [row[0] for row in first]
                if not tail_unchanged(latest, earliest, replaced, expired):
                    conn.execute("ROLLBACK")
                    return False
                conn.executemany(
                    "DELETE FROM agentledger_memory_events"
                    " WHERE agent_id = ? AND run_id = ? AND key = ?",
                    [(agent_id, run_id, key) for key in (*expired, *replaced)],
                )
                if archive is not None:
                    kept = tuple(_DECODER.decode(row[1]) for row in rows)
                    _insert(conn, agent_id, archive, (*kept, *provenance))
                _insert(conn, agent_id, run_id, events)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return True

    async def append_events(self, agent_id: str, run_id: str, /, *events: MemoryEvent) -> None:
        try:
            await asyncio.to_thread(self._append, agent_id, run_id, events)
        except sqlite3.OperationalError as e:
            raise TransientError(str(e), operation="append_events") from e

    async def replace_tail(
        self,
        agent_id: str,
        run_id: str,
        /,
        replaced: Sequence[str],
        events: Sequence[MemoryEvent],
        *,
        whole: bool = False,
        archive: str | None = None,
        provenance: Sequence[MemoryEvent] = (),
        expired: Sequence[str] = (),
    ) -> bool:
        """Replace the run's latest events, if they are still ``replaced``, by ``events``.

        See `~agentledger.memory.InMemoryMemory.replace_tail`: one transaction.
        """
        try:
            return await asyncio.to_thread(
                self._replace,
                agent_id,
                run_id,
                tuple(replaced),
                tuple(events),
                whole,
                archive,
                tuple(provenance),
                tuple(expired),
            )
        except sqlite3.OperationalError as e:
            raise TransientError(str(e), operation="replace_tail") from e

    def _load(self, agent_id: str, run_id: str, last: int | None) -> Snapshot:
        with self._lock:
            if last is None:
                rows = self._conn.execute(
                    "SELECT payload FROM agentledger_memory_events"
                    " WHERE agent_id = ? AND run_id = ? ORDER BY seq",
                    (agent_id, run_id),
                ).fetchall()
            else:
                rows = self._conn.execute(
                    "SELECT payload FROM agentledger_memory_events"
                    " WHERE agent_id = ? AND run_id = ? ORDER BY seq DESC LIMIT ?",
                    (agent_id, run_id, last),
                ).fetchall()[::-1]
        events = tuple(_DECODER.decode(row[0]) for row in rows)
        return Snapshot(agent_id=agent_id, run_id=run_id, events=events)

    async def load_run(self, agent_id: str, run_id: str, /, *, last: int | None = None) -> Snapshot:
        check_last(last)
        try:
            return await asyncio.to_thread(self._load, agent_id, run_id, last)
        except sqlite3.OperationalError as e:
            raise TransientError(str(e), operation="load_run") from e

    def _write(self, sql: str, agent_id: str, run_id: str) -> list[Any]:
        """Run one DELETE ... RETURNING in its own immediate transaction."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                rows = conn.execute(sql, (agent_id, run_id)).fetchall()
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return rows

    async def pop_event(self, agent_id: str, run_id: str, /) -> MemoryEvent | None:
        try:
            rows = await asyncio.to_thread(self._write, _POP, agent_id, run_id)
        except sqlite3.OperationalError as e:
            raise TransientError(str(e), operation="pop_event") from e
        return _DECODER.decode(rows[0][0]) if rows else None

    async def delete_run(self, agent_id: str, run_id: str, /) -> int:
        try:
            rows = await asyncio.to_thread(self._write, _DELETE, agent_id, run_id)
        except sqlite3.OperationalError as e:
            raise TransientError(str(e), operation="delete_run") from e
        return len(rows)

    async def delete_derived(self, session_id: str, /) -> list[ErasedEvent]:
        """[G2] Delete every event whose ``source`` is in ``session_id``, in one transaction;
        each, by agent, run and append order."""

        def delete() -> list[Any]:
            with self._lock:
                conn = self._conn
                conn.execute("BEGIN IMMEDIATE")
                try:
                    rows = conn.execute(_DELETE_DERIVED, (session_id,)).fetchall()
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            return rows

        try:
            rows = await asyncio.to_thread(delete)
        except sqlite3.OperationalError as e:
            raise TransientError(str(e), operation="delete_derived") from e
        return [ErasedEvent(agent_id=a, run_id=r, key=k) for a, r, _, k in sorted(rows)]


def _insert(
    conn: sqlite3.Connection, agent_id: str, run_id: str, events: tuple[MemoryEvent, ...]
) -> None:
    """Insert the events not stored yet after the run's last seq (in a write transaction)."""
    (seq,) = conn.execute(
        "SELECT COALESCE(MAX(seq), 0) FROM agentledger_memory_events"
        " WHERE agent_id = ? AND run_id = ?",
        (agent_id, run_id),
    ).fetchone()
    for event in events:
        payload = _ENCODER.encode(event)
        row = conn.execute(
            "SELECT payload FROM agentledger_memory_events"
            " WHERE agent_id = ? AND run_id = ? AND key = ?",
            (agent_id, run_id, event.key),
        ).fetchone()
        if row is not None:
            if _DECODER.decode(row[0]) != event:
                raise RecordConflictError(
                    run_id=run_id,
                    field=f"memory event {event.key}",
                    expected=bytes(row[0]).decode(),
                    got=payload.decode(),
                )
            continue
        seq += 1
        conn.execute(
            "INSERT INTO agentledger_memory_events"
            " (agent_id, run_id, seq, key, type, payload, source_session)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                agent_id,
                run_id,
                seq,
                event.key,
                event.__struct_config__.tag,
                payload,
                _source(event),
            ),
        )


def _source(event: MemoryEvent) -> str:
    """[G2] The session the event was derived from ("" for none)."""
    return event.source.session_id if event.source is not None else ""
