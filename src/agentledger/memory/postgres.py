"""PostgresMemory: product memory in PostgreSQL (agentledger's ``[postgres]`` extra).

Its table (``agentledger_memory_events``) is its own, so it can share a
database with :class:`~agentledger.storage.postgres.PostgresStore` or live in
another. Payloads are kept as the exact JSON bytes (``bytea``), so numbers
such as ``1e400`` read back as written. Appends to one run are serialised by
a transaction-scoped advisory lock, so workers in many processes can feed it.

One instance is safe to share between threads and event loops, as
:class:`~agentledger.memory.SQLiteMemory` is: it holds a small pool of
blocking connections and runs each operation on a worker thread, so no
connection or lock belongs to any one event loop.

Import it from here (``from agentledger.memory.postgres import PostgresMemory``):
``agentledger.memory`` itself never needs psycopg.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

try:
    import psycopg
    from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout
except ImportError as e:  # pragma: no cover - depends on the environment
    from agentledger._extras import needs_extra

    raise needs_extra("agentledger.memory.postgres", "postgres", e) from e

import msgspec

from agentledger.errors import RecordConflictError, TransientError, ValidationError
from agentledger.memory.types import ErasedEvent, MemoryEvent, Snapshot, check_last, tail_unchanged
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
    # [G2] the session an event was derived from ('' for none; a table from before
    # sources gets the column, and its events have none)
    "ALTER TABLE agentledger_memory_events"
    " ADD COLUMN IF NOT EXISTS source_session text NOT NULL DEFAULT ''",
    "CREATE INDEX IF NOT EXISTS agentledger_memory_events_source"
    " ON agentledger_memory_events (source_session) WHERE source_session <> ''",
)
_DELETE_DERIVED = (
    "DELETE FROM agentledger_memory_events WHERE source_session = %s"
    " RETURNING agent_id, run_id, seq, key"
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
_T = TypeVar("_T")


class PostgresMemory:
    """A product-memory ``ProductMemory`` in PostgreSQL; open with :meth:`open`.

    Each append, pop and delete is one transaction holding the run's advisory
    lock, so writers in many processes are serialised per run. One instance
    may be shared by threads, each running its own event loop: operations run
    on worker threads over a pool of blocking connections (``max_connections``).
    Connection trouble is a :class:`~agentledger.errors.TransientError`.
    """

    def __init__(self, pool: ConnectionPool[Any]) -> None:
        """Use :meth:`open`."""
        self._pool = pool
        self._closed = False

    @classmethod
    async def open(cls, dsn: str, *, max_connections: int = 4) -> PostgresMemory:
        """Connect to ``dsn`` and create the table if it is missing.

        Raises:
            ValidationError: ``max_connections`` is not an int >= 1.
            TransientError: the server cannot be reached.
        """
        if type(max_connections) is not int or max_connections < 1:
            raise ValidationError(
                field="max_connections", expected="an int >= 1", got=max_connections
            )

        def connect() -> ConnectionPool[Any]:
            with psycopg.connect(dsn) as conn, conn.transaction():
                # Concurrent CREATE TABLE IF NOT EXISTS can still collide in the
                # catalog (a unique violation): openers take turns.
                conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (_SCHEMA_LOCK,)
                )
                for statement in _SCHEMA:
                    conn.execute(statement)
            pool: ConnectionPool[Any] = ConnectionPool(
                dsn, min_size=1, max_size=max_connections, open=False
            )
            pool.open()
            return pool

        try:
            return cls(await asyncio.to_thread(connect))
        except psycopg.OperationalError as e:
            raise TransientError(str(e), operation="open") from e

    async def close(self) -> None:
        """Close every connection; later calls are refused."""
        self._closed = True
        await asyncio.to_thread(self._pool.close)

    async def _run(self, operation: str, work: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """``work`` in one transaction on a pooled connection, on a worker thread."""
        if self._closed:
            raise ValidationError(field="memory", expected="an open PostgresMemory", got="closed")

        def in_transaction() -> _T:
            with self._pool.connection() as conn, conn.transaction():
                return work(conn)

        try:
            return await asyncio.to_thread(in_transaction)
        except PoolClosed as e:
            raise ValidationError(
                field="memory", expected="an open PostgresMemory", got="closed"
            ) from e
        except (psycopg.OperationalError, PoolTimeout) as e:
            raise TransientError(str(e), operation=operation) from e

    async def append_events(self, agent_id: str, run_id: str, /, *events: MemoryEvent) -> None:
        def append(conn: psycopg.Connection[Any]) -> None:
            _lock_run(conn, agent_id, run_id)
            _append(conn, agent_id, run_id, events)

        await self._run("append_events", append)

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

        See `~agentledger.memory.InMemoryMemory.replace_tail`: one transaction,
        under the run's lock (then the archive run's).
        """
        expected, pruned = tuple(replaced), tuple(expired)

        def replace(conn: psycopg.Connection[Any]) -> bool:
            _lock_run(conn, agent_id, run_id)
            rows = conn.execute(
                "SELECT key, payload FROM agentledger_memory_events"
                " WHERE agent_id = %s AND run_id = %s ORDER BY seq DESC LIMIT %s",
                (agent_id, run_id, len(expected) + whole),
            ).fetchall()[::-1]
            first = conn.execute(
                "SELECT key FROM agentledger_memory_events"
                " WHERE agent_id = %s AND run_id = %s ORDER BY seq LIMIT %s",
                (agent_id, run_id, len(pruned)),
            ).fetchall()
            latest, earliest = [row[0] for row in rows], [row[0] for row in first]
            if not tail_unchanged(latest, earliest, expected, pruned):
                return False
            conn.execute(
                "DELETE FROM agentledger_memory_events"
                " WHERE agent_id = %s AND run_id = %s AND key = ANY(%s)",
                (agent_id, run_id, [*pruned, *expected]),
            )
            if archive is not None:
                _lock_run(conn, agent_id, archive)
                kept = tuple(_DECODER.decode(bytes(row[1])) for row in rows)
                _append(conn, agent_id, archive, (*kept, *provenance))
            _append(conn, agent_id, run_id, tuple(events))
            return True

        return await self._run("replace_tail", replace)

    async def load_run(self, agent_id: str, run_id: str, /, *, last: int | None = None) -> Snapshot:
        check_last(last)

        def load(conn: psycopg.Connection[Any]) -> list[Any]:
            if last is None:
                return conn.execute(
                    "SELECT payload FROM agentledger_memory_events"
                    " WHERE agent_id = %s AND run_id = %s ORDER BY seq",
                    (agent_id, run_id),
                ).fetchall()
            return conn.execute(
                "SELECT payload FROM agentledger_memory_events"
                " WHERE agent_id = %s AND run_id = %s ORDER BY seq DESC LIMIT %s",
                (agent_id, run_id, last),
            ).fetchall()[::-1]

        rows = await self._run("load_run", load)
        events = tuple(_DECODER.decode(bytes(row[0])) for row in rows)
        return Snapshot(agent_id=agent_id, run_id=run_id, events=events)

    async def _delete(self, sql: str, agent_id: str, run_id: str, operation: str) -> list[Any]:
        """Run one DELETE ... RETURNING under the run's advisory lock."""

        def delete(conn: psycopg.Connection[Any]) -> list[Any]:
            _lock_run(conn, agent_id, run_id)
            return conn.execute(sql, {"agent": agent_id, "run": run_id}).fetchall()

        return await self._run(operation, delete)

    async def pop_event(self, agent_id: str, run_id: str, /) -> MemoryEvent | None:
        rows = await self._delete(_POP, agent_id, run_id, "pop_event")
        return _DECODER.decode(bytes(rows[0][0])) if rows else None

    async def delete_run(self, agent_id: str, run_id: str, /) -> int:
        return len(await self._delete(_DELETE, agent_id, run_id, "delete_run"))

    async def delete_derived(self, session_id: str, /) -> list[ErasedEvent]:
        """[G2] Delete every event whose ``source`` is in ``session_id``, in one transaction;
        each, by agent, run and append order."""

        def delete(conn: psycopg.Connection[Any]) -> list[Any]:
            return conn.execute(_DELETE_DERIVED, (session_id,)).fetchall()

        rows = await self._run("delete_derived", delete)
        return [ErasedEvent(agent_id=a, run_id=r, key=k) for a, r, _, k in sorted(rows)]


def _lock_run(conn: psycopg.Connection[Any], agent_id: str, run_id: str) -> None:
    """Take the run's advisory lock for the rest of the transaction."""
    conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"{agent_id}\x1f{run_id}",)
    )


def _append(
    conn: psycopg.Connection[Any], agent_id: str, run_id: str, events: tuple[MemoryEvent, ...]
) -> None:
    """Insert the events not stored yet after the run's last seq (the run's lock is held)."""
    row = conn.execute(
        "SELECT COALESCE(MAX(seq), 0) FROM agentledger_memory_events"
        " WHERE agent_id = %s AND run_id = %s",
        (agent_id, run_id),
    ).fetchone()
    seq = int(row[0]) if row else 0
    for event in events:
        payload = _ENCODER.encode(event)
        source = event.source.session_id if event.source is not None else ""
        stored = conn.execute(
            "SELECT payload FROM agentledger_memory_events"
            " WHERE agent_id = %s AND run_id = %s AND key = %s",
            (agent_id, run_id, event.key),
        ).fetchone()
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
        conn.execute(
            "INSERT INTO agentledger_memory_events"
            " (agent_id, run_id, seq, key, type, payload, source_session)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (agent_id, run_id, seq, event.key, event.__struct_config__.tag, payload, source),
        )
