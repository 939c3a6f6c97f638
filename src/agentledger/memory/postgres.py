"""PostgresMemory: product memory in PostgreSQL (``pip install 'agentledger[postgres]'``).

Its table (``agentledger_memory_events``) is its own, so it can share a
database with :class:`~agentledger.storage.postgres.PostgresStore` or live in
another. Payloads are kept as the exact JSON bytes (``bytea``), so numbers
such as ``1e400`` read back as written. Appends to one run are serialised by
a transaction-scoped advisory lock, so workers in many processes can feed it.

Import it from here (``from agentledger.memory.postgres import PostgresMemory``):
``agentledger.memory`` itself never needs psycopg.
"""

from __future__ import annotations

from typing import Any

try:
    import psycopg
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "agentledger.memory.postgres needs psycopg 3: pip install 'agentledger[postgres]'"
    ) from e

import asyncio

import msgspec

from agentledger.errors import RecordConflictError, TransientError
from agentledger.memory.types import MemoryEvent, Snapshot, check_last
from agentledger.transcript import JsonNumber

__all__ = ["PostgresMemory"]

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS agentledger_memory_events (
        agent_id text NOT NULL,
        run_id text NOT NULL,
        seq bigint NOT NULL,
        key text NOT NULL,
        type text NOT NULL,
        payload bytea NOT NULL,
        PRIMARY KEY (agent_id, run_id, key),
        UNIQUE (agent_id, run_id, seq)
    )""",
)


_POP = (
    "DELETE FROM agentledger_memory_events"
    " WHERE agent_id = %(agent)s AND run_id = %(run)s AND seq = ("
    " SELECT MAX(seq) FROM agentledger_memory_events"
    " WHERE agent_id = %(agent)s AND run_id = %(run)s) RETURNING payload"
)
_DELETE = (
    "DELETE FROM agentledger_memory_events"
    " WHERE agent_id = %(agent)s AND run_id = %(run)s RETURNING seq"
)


_SCHEMA_LOCK = "agentledger_memory_events schema"


def _enc_hook(value: Any) -> Any:
    if isinstance(value, JsonNumber):
        return msgspec.Raw(value.literal.encode("ascii"))
    raise TypeError(f"not JSON: {type(value).__name__}")


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook, decimal_format="number")
_DECODER = msgspec.json.Decoder(MemoryEvent, float_hook=JsonNumber)


class PostgresMemory:
    """A product-memory ``MemoryStore`` in PostgreSQL; open with :meth:`open`.

    Each append, pop and delete is one transaction holding the run's advisory
    lock, so writers in many processes (each with its own ``PostgresMemory``)
    are serialised per run. One instance is one connection, used from one event
    loop; threads each open their own.
    Connection trouble is a :class:`~agentledger.errors.TransientError`.
    """

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Use :meth:`open`."""
        self._conn = conn
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, dsn: str) -> PostgresMemory:
        """Connect to ``dsn`` and create the table if it is missing."""
        try:
            conn = await psycopg.AsyncConnection.connect(dsn)
            async with conn.transaction():
                # Concurrent CREATE TABLE IF NOT EXISTS can still collide in the
                # catalog (a unique violation): openers take turns.
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (_SCHEMA_LOCK,)
                )
                for statement in _SCHEMA:
                    await conn.execute(statement)
        except psycopg.OperationalError as e:
            raise TransientError(str(e), operation="open") from e
        return cls(conn)

    async def close(self) -> None:
        """Close the connection."""
        await self._conn.close()

    async def append_events(self, agent_id: str, run_id: str, /, *events: MemoryEvent) -> None:
        try:
            async with self._lock, self._conn.transaction():
                await self._append(agent_id, run_id, events)
        except psycopg.OperationalError as e:
            raise TransientError(str(e), operation="append_events") from e

    async def _lock_run(self, agent_id: str, run_id: str) -> None:
        """Take the run's advisory lock for the rest of the transaction."""
        await self._conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"{agent_id}\x1f{run_id}",)
        )

    async def _append(self, agent_id: str, run_id: str, events: tuple[MemoryEvent, ...]) -> None:
        conn = self._conn
        await self._lock_run(agent_id, run_id)
        cursor = await conn.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM agentledger_memory_events"
            " WHERE agent_id = %s AND run_id = %s",
            (agent_id, run_id),
        )
        row = await cursor.fetchone()
        seq = int(row[0]) if row else 0
        for event in events:
            payload = _ENCODER.encode(event)
            found = await conn.execute(
                "SELECT payload FROM agentledger_memory_events"
                " WHERE agent_id = %s AND run_id = %s AND key = %s",
                (agent_id, run_id, event.key),
            )
            stored = await found.fetchone()
            if stored is not None:
                if _DECODER.decode(bytes(stored[0])) != event:
                    raise RecordConflictError(
                        run_id=run_id,
                        field=f"memory event {event.key}",
                        expected=bytes(stored[0]).decode(),
                        got=payload.decode(),
                    )
                continue
            seq += 1
            await conn.execute(
                "INSERT INTO agentledger_memory_events"
                " (agent_id, run_id, seq, key, type, payload) VALUES (%s, %s, %s, %s, %s, %s)",
                (agent_id, run_id, seq, event.key, event.__struct_config__.tag, payload),
            )

    async def load_run(self, agent_id: str, run_id: str, /, *, last: int | None = None) -> Snapshot:
        check_last(last)
        try:
            async with self._lock:
                if last is None:
                    cursor = await self._conn.execute(
                        "SELECT payload FROM agentledger_memory_events"
                        " WHERE agent_id = %s AND run_id = %s ORDER BY seq",
                        (agent_id, run_id),
                    )
                    rows = await cursor.fetchall()
                else:
                    cursor = await self._conn.execute(
                        "SELECT payload FROM agentledger_memory_events"
                        " WHERE agent_id = %s AND run_id = %s ORDER BY seq DESC LIMIT %s",
                        (agent_id, run_id, last),
                    )
                    rows = (await cursor.fetchall())[::-1]
                await self._conn.rollback()
        except psycopg.OperationalError as e:
            raise TransientError(str(e), operation="load_run") from e
        events = tuple(_DECODER.decode(bytes(row[0])) for row in rows)
        return Snapshot(agent_id=agent_id, run_id=run_id, events=events)

    async def _delete(self, sql: str, agent_id: str, run_id: str, operation: str) -> list[Any]:
        """Run one DELETE ... RETURNING under the run's advisory lock."""
        try:
            async with self._lock, self._conn.transaction():
                await self._lock_run(agent_id, run_id)
                cursor = await self._conn.execute(sql, {"agent": agent_id, "run": run_id})
                return await cursor.fetchall()
        except psycopg.OperationalError as e:
            raise TransientError(str(e), operation=operation) from e

    async def pop_event(self, agent_id: str, run_id: str, /) -> MemoryEvent | None:
        rows = await self._delete(_POP, agent_id, run_id, "pop_event")
        return _DECODER.decode(bytes(rows[0][0])) if rows else None

    async def delete_run(self, agent_id: str, run_id: str, /) -> int:
        return len(await self._delete(_DELETE, agent_id, run_id, "delete_run"))
