"""Serving the sync decisions from an async transaction: a cache that misses loudly.

The decisions in :mod:`agentledger.storage.lifecycle` are sync and read
through a :class:`~agentledger.storage.state.StateReader`; a PostgreSQL read
is a coroutine. :class:`CachedReader` answers from a cache and raises
:class:`Missing` for anything it has not loaded; the operation then awaits
:meth:`Loader.load` for that item and reruns the decision, which is pure and
cheap, until it returns a plan. Each item is read once per transaction, so
every rerun sees the same state.

Locking (write transactions, ``READ COMMITTED``):

* Every session a write touches is locked with ``SELECT ... FOR UPDATE``
  before any run of that session, so writers to one session serialize on its
  row (this is what makes per-session record order commit order) and all
  locks are taken in one order: session, then runs, then records.
* A run's session (immutable) is locked first, by a subquery on the run
  (``WHERE id = (SELECT session_id FROM agentledger_runs ...) FOR UPDATE``)
  or after a plain read of the run; then the run is read ``FOR UPDATE``.
* A row that does not exist cannot be locked, so before concluding "absent"
  the loader takes a transaction-level advisory lock on the id
  (``pg_advisory_xact_lock(kind, hashtext(id))``) and reads again: two
  creators of one new session or run serialize there, and the second sees
  the first's committed row.
* Records, tombstones and running-run lists are read after the run or
  session that guards them is locked, so they cannot change under the
  decision: every writer of them holds that same lock.

Read-only operations use the same loader with ``lock=False`` on autocommit
statements, no locks; a read that spans rows is one statement (one snapshot).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

import msgspec
from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from agentledger.storage.derivation import HISTORY_COPIED, derived_copy, summaries_of
from agentledger.storage.integrity import verified_tool_result
from agentledger.storage.message_rows import MESSAGE_COLUMNS, message_from_row
from agentledger.storage.payloads import TRANSCRIPT_WINDOW
from agentledger.storage.postgres.rows import (
    RECORD_COLUMNS,
    RUN_COLUMNS,
    SESSION_COLUMNS,
    SESSION_WIDTH,
    record_from_row,
    run_from_row,
    session_from_row,
    unverified_record,
)
from agentledger.storage.postgres.rows import utc as _utc
from agentledger.storage.receipts import decode_receipt
from agentledger.storage.state import RunRow, SessionRow, StateReader
from agentledger.storage.types import DerivedCopy, PurgeReceipt, Record, SessionMessage

if TYPE_CHECKING:
    from agentledger.storage.encryption import Encryption

__all__ = ["CachedReader", "Key", "Loader", "Missing"]

Kind = Literal[
    "session",
    "session_purged",
    "run",
    "purged_run",
    "record",
    "running",
    "contents",
    "damaged",
    "derived",
    "tool_result",
    "message",
    "pending",
    "latest_message",
    "messages",
]
Key = tuple[Kind, str, str]
"""``(kind, id, event_key)``; the third is the event key of a ``record``, the call key of a
``tool_result``, else ""."""

# Advisory-lock classes (first int4 of the two-key form).
_RUN_LOCK = 1
_SESSION_LOCK = 2

_SELECT_SESSION = f"SELECT {SESSION_COLUMNS}, last_seq FROM agentledger_sessions WHERE id = %s"
# Locks the session of a run without knowing its id first: one statement, no round trip.
_LOCK_SESSION_OF_RUN = (
    f"SELECT {SESSION_COLUMNS}, last_seq FROM agentledger_sessions "
    "WHERE id = (SELECT session_id FROM agentledger_runs WHERE run_id = %s) FOR UPDATE"
)
_SELECT_RUN = f"SELECT {RUN_COLUMNS} FROM agentledger_runs WHERE run_id = %s"
_SELECT_RUN_SESSION = "SELECT session_id FROM agentledger_runs WHERE run_id = %s"
_SELECT_RECORD = (
    f"SELECT {RECORD_COLUMNS} FROM agentledger_records WHERE run_id = %s AND event_key = %s"
)
_SELECT_TOOL_RESULT = (
    "SELECT data, checksum FROM agentledger_tool_results WHERE run_id = %s AND call_key = %s"
)
_SELECT_COPIES = (  # a literal type: the partial index agentledger_records_copies answers it
    f"SELECT {RECORD_COLUMNS} FROM agentledger_records WHERE type = '{HISTORY_COPIED}' "
    "ORDER BY session_id, session_seq"
)
_SELECT_RUN_LOG = f"SELECT {RECORD_COLUMNS} FROM agentledger_records WHERE run_id = %s ORDER BY seq"
_SELECT_SESSION_WINDOWS = (  # [G2] a holder's compaction summaries
    f"SELECT {RECORD_COLUMNS} FROM agentledger_records WHERE session_id = %s "
    f"AND type = '{TRANSCRIPT_WINDOW}' ORDER BY session_seq"
)
_SELECT_SESSION_PURGED = "SELECT receipt FROM agentledger_purged_sessions WHERE id = %s"
_SELECT_CONTENT_RUNS = (
    f"SELECT {RUN_COLUMNS} FROM agentledger_runs WHERE session_id = %s ORDER BY ord"
)
_SELECT_CONTENT_RECORDS = (
    f"SELECT {RECORD_COLUMNS} FROM agentledger_records WHERE session_id = %s ORDER BY session_seq"
)
_SELECT_PURGED_RUN = "SELECT session_id FROM agentledger_purged_runs WHERE run_id = %s"
_SELECT_RUNNING = (
    "SELECT run_id FROM agentledger_runs WHERE session_id = %s AND status = 'running' ORDER BY ord"
)
_SELECT_MESSAGE = f"SELECT {MESSAGE_COLUMNS} FROM agentledger_session_messages WHERE run_id = %s"
_SELECT_PENDING = (
    f"SELECT {MESSAGE_COLUMNS} FROM agentledger_session_messages "
    "WHERE session_id = %s AND started = 0 ORDER BY pos"
)
_SELECT_LATEST_MESSAGE = (
    f"SELECT {MESSAGE_COLUMNS} FROM agentledger_session_messages "
    "WHERE session_id = %s ORDER BY pos DESC LIMIT 1"
)
_SELECT_MESSAGES = (
    f"SELECT {MESSAGE_COLUMNS} FROM agentledger_session_messages WHERE session_id = %s ORDER BY pos"
)
_ADVISORY = "SELECT pg_advisory_xact_lock(%s, hashtext(%s))"


def _prefixed(alias: str, columns: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in columns.split(","))


# One index probe per key, each an equality on both columns of the (run_id, event_key)
# unique index: with ``event_key = ANY(array)`` a plan cached before the table had
# statistics may scan the run's whole log instead, slower as the run grows.
_SELECT_KEYED_RECORDS = (
    f"SELECT {_prefixed('r', RECORD_COLUMNS)} FROM unnest(%s::text[]) AS k(key) "
    f"CROSS JOIN LATERAL (SELECT {RECORD_COLUMNS} FROM agentledger_records "
    "WHERE run_id = %s AND event_key = k.key) r"
)


# Reads without locks fetch a row and its tombstone in one statement.
_READ_RUN = (
    f"SELECT {_prefixed('r', RUN_COLUMNS)}, p.session_id FROM (SELECT %s::text AS id) k "
    "LEFT JOIN agentledger_runs r ON r.run_id = k.id "
    "LEFT JOIN agentledger_purged_runs p ON p.run_id = k.id"
)
_READ_SESSION = (
    f"SELECT {_prefixed('s', SESSION_COLUMNS)}, s.last_seq, t.id IS NOT NULL "
    "FROM (SELECT %s::text AS id) k "
    "LEFT JOIN agentledger_sessions s ON s.id = k.id "
    "LEFT JOIN agentledger_purged_sessions t ON t.id = k.id"
)


class Missing(Exception):
    """The decision asked for ``key``, which is not loaded yet."""

    def __init__(self, key: Key) -> None:
        super().__init__(key)
        self.key = key


class CachedReader(StateReader):
    """A StateReader over what :class:`Loader` has loaded; raises Missing otherwise."""

    def __init__(self) -> None:
        self.sessions: dict[str, SessionRow | None] = {}
        self.purged_sessions: dict[str, bool] = {}
        self.runs: dict[str, RunRow | None] = {}
        self.purged_runs: dict[str, str | None] = {}
        self.records: dict[tuple[str, str], Record | None] = {}
        self.running: dict[str, list[str]] = {}
        self.receipts: dict[str, PurgeReceipt] = {}  # of purged sessions [D7]
        self.contents: dict[str, tuple[list[RunRow], list[Record]]] = {}
        self.damaged: dict[str, list[Record]] = {}
        self.derived: dict[str, list[DerivedCopy]] = {}  # [G2] by source session
        self.tool_results: dict[tuple[str, str], bytes | None] = {}
        self.session_seq: dict[str, int] = {}  # newest position in each loaded session's log
        self.messages: dict[str, SessionMessage | None] = {}  # by run id
        self.pending: dict[str, list[SessionMessage]] = {}
        self.latest_messages: dict[str, SessionMessage | None] = {}
        self.session_message_lists: dict[str, list[SessionMessage]] = {}

    def session(self, session_id: str) -> SessionRow | None:
        try:
            return self.sessions[session_id]
        except KeyError:
            raise Missing(("session", session_id, "")) from None

    def session_purged(self, session_id: str) -> bool:
        try:
            return self.purged_sessions[session_id]
        except KeyError:
            raise Missing(("session_purged", session_id, "")) from None

    def run(self, run_id: str) -> RunRow | None:
        try:
            return self.runs[run_id]
        except KeyError:
            raise Missing(("run", run_id, "")) from None

    def purged_run_session(self, run_id: str) -> str | None:
        try:
            return self.purged_runs[run_id]
        except KeyError:
            raise Missing(("purged_run", run_id, "")) from None

    def record(self, run_id: str, event_key: str) -> Record | None:
        try:
            return self.records[(run_id, event_key)]
        except KeyError:
            raise Missing(("record", run_id, event_key)) from None

    def running_run_ids(self, session_id: str) -> list[str]:
        try:
            return list(self.running[session_id])
        except KeyError:
            raise Missing(("running", session_id, "")) from None

    def purge_receipt(self, session_id: str) -> PurgeReceipt:
        try:
            return self.receipts[session_id]
        except KeyError:
            raise Missing(("session_purged", session_id, "")) from None

    def session_contents(self, session_id: str) -> tuple[list[RunRow], list[Record]]:
        try:
            runs, records = self.contents[session_id]
        except KeyError:
            raise Missing(("contents", session_id, "")) from None
        return list(runs), list(records)

    def tool_result(self, run: RunRow, call_key: str) -> bytes | None:
        try:
            return self.tool_results[(run.run_id, call_key)]
        except KeyError:
            raise Missing(("tool_result", run.run_id, call_key)) from None

    def session_message(self, run_id: str) -> SessionMessage | None:
        try:
            return self.messages[run_id]
        except KeyError:
            raise Missing(("message", run_id, "")) from None

    def pending_messages(self, session_id: str) -> list[SessionMessage]:
        try:
            return list(self.pending[session_id])
        except KeyError:
            raise Missing(("pending", session_id, "")) from None

    def latest_message(self, session_id: str) -> SessionMessage | None:
        try:
            return self.latest_messages[session_id]
        except KeyError:
            raise Missing(("latest_message", session_id, "")) from None

    def session_messages(self, session_id: str) -> list[SessionMessage]:
        try:
            return list(self.session_message_lists[session_id])
        except KeyError:
            raise Missing(("messages", session_id, "")) from None

    def damaged_records(self, run_id: str) -> list[Record]:
        try:
            return list(self.damaged[run_id])
        except KeyError:
            raise Missing(("damaged", run_id, "")) from None

    def derived_copies(self, session_id: str) -> list[DerivedCopy]:
        try:
            return list(self.derived[session_id])
        except KeyError:
            raise Missing(("derived", session_id, "")) from None


class Loader:
    """Loads items into a :class:`CachedReader` from one open transaction.

    With ``lock=True`` (write transactions) it takes the locks described in
    the module docstring; with ``lock=False`` it only reads.
    """

    def __init__(
        self,
        conn: AsyncConnection[TupleRow],
        cache: CachedReader,
        *,
        lock: bool,
        sealer: Encryption | None = None,
    ) -> None:
        self.conn = conn
        self.cache = cache
        self.lock = lock
        self.sealer = sealer
        """Encryption at rest [A2]: what is read is opened here, what is written
        sealed by :func:`~._apply.apply_plan`; None: plaintext."""
        self._for_update = " FOR UPDATE" if lock else ""

    def decode_run(self, row: TupleRow) -> RunRow:
        """A run row, its checkpoint data opened."""
        run = run_from_row(row)
        if self.sealer is None or run.checkpoint is None:
            return run
        opened = self.sealer.open_checkpoint(run.session_id, run.run_id, run.checkpoint)
        return msgspec.structs.replace(run, checkpoint=opened)

    def decode_record(self, row: TupleRow) -> Record:
        """A record row, its payload opened."""
        record = record_from_row(row)
        return record if self.sealer is None else self.sealer.open_record(record)

    async def _one(self, query: str, params: tuple[object, ...]) -> TupleRow | None:
        cur = await self.conn.execute(query, params)
        return await cur.fetchone()

    async def _advisory(self, kind: int, key: str) -> None:
        await self.conn.execute(_ADVISORY, (kind, key))

    def keep_session(self, row: TupleRow) -> SessionRow:
        """Cache a ``SESSION_COLUMNS, last_seq`` row."""
        found = session_from_row(row[:SESSION_WIDTH])
        self.cache.sessions[found.id] = found
        self.cache.session_seq[found.id] = int(row[SESSION_WIDTH])
        return found

    def has(self, key: Key) -> bool:
        """Whether ``key`` is already in the cache."""
        c = self.cache
        kind, ident, event_key = key
        if kind == "record":
            return (ident, event_key) in c.records
        if kind == "tool_result":
            return (ident, event_key) in c.tool_results
        tables: dict[str, dict[str, Any]] = {
            "session": c.sessions,
            "session_purged": c.purged_sessions,
            "run": c.runs,
            "purged_run": c.purged_runs,
            "running": c.running,
            "contents": c.contents,
            "damaged": c.damaged,
            "derived": c.derived,
            "message": c.messages,
            "pending": c.pending,
            "latest_message": c.latest_messages,
            "messages": c.session_message_lists,
        }
        return ident in tables[kind]

    async def load(self, key: Key) -> None:
        """Load ``key`` (and whatever must be locked before it) into the cache."""
        kind, ident, event_key = key
        if kind == "record":
            await self.record(ident, event_key)
        elif kind == "session":
            await self.session(ident)
        elif kind == "session_purged":
            await self.session_purged(ident)
        elif kind == "run":
            await self.run(ident)
        elif kind == "purged_run":
            await self.purged_run(ident)
        elif kind == "contents":
            await self.session_contents(ident)
        elif kind == "damaged":
            await self.damaged(ident)
        elif kind == "derived":
            await self.derived_copies(ident)
        elif kind == "tool_result":
            await self.tool_result(ident, event_key)
        elif kind in ("message", "pending", "latest_message", "messages"):
            await self.messages(kind, ident)
        else:
            await self.running(ident)

    async def prefetch(self, keys: Iterable[Key]) -> None:
        """Load the keys a decision will most likely ask for, before it asks.

        Saves reruns of the decision, and a round trip per run: the run's
        session is locked by a subquery, without first reading its id. What
        one pass cannot settle (an absent session or run, which needs its
        advisory lock) is left for :meth:`load`.
        """
        for key in keys:
            if self.has(key):
                continue
            kind, ident, event_key = key
            if kind == "run" and self.lock:
                row = await self._one(_LOCK_SESSION_OF_RUN, (ident,))
                if row is not None:
                    self.keep_session(row)
                row = await self._one(_SELECT_RUN + " FOR UPDATE", (ident,))
                if row is not None:
                    run = self.decode_run(row)
                    if run.session_id and run.session_id not in self.cache.sessions:
                        # Created between the two statements: lock its session now.
                        await self.session(run.session_id)
                    self.cache.runs[ident] = run
            elif kind == "record" and self.lock:
                if self.cache.runs.get(ident) is not None:  # only once its run is locked
                    await self.record(ident, event_key)
            elif kind == "session" and self.lock:
                row = await self._one(_SELECT_SESSION + " FOR UPDATE", (ident,))
                if row is not None:
                    self.keep_session(row)
            elif kind == "run":
                row = await self._one(_READ_RUN, (ident,))
                assert row is not None
                self.cache.runs[ident] = None if row[0] is None else self.decode_run(row[:-1])
                self.cache.purged_runs[ident] = row[-1]
            elif kind == "session":
                row = await self._one(_READ_SESSION, (ident,))
                assert row is not None
                if row[0] is None:
                    self.cache.sessions[ident] = None
                else:
                    self.keep_session(row[:-1])
                self.cache.purged_sessions[ident] = bool(row[-1])
            elif kind in ("record", "purged_run"):
                await self.load(key)

    async def run_with_records(self, run_id: str, event_keys: list[str]) -> None:
        """Lock a run (its session first) and read its records with ``event_keys``.

        The three statements are sent together: on a connection in pipeline
        mode they cost one round trip (with the transaction's BEGIN). Every
        key is cached, found or not, once the run is found; an absent run is
        left to :meth:`load`, which takes the advisory lock a new id needs.
        """
        if not self.lock or run_id in self.cache.runs:
            for key in event_keys:
                await self.load(("record", run_id, key))
            return
        session_cur = await self.conn.execute(_LOCK_SESSION_OF_RUN, (run_id,))
        run_cur = await self.conn.execute(_SELECT_RUN + " FOR UPDATE", (run_id,))
        records_cur = await self.conn.execute(_SELECT_KEYED_RECORDS, (event_keys, run_id))
        session_row = await session_cur.fetchone()
        run_row = await run_cur.fetchone()
        record_rows = await records_cur.fetchall()
        if session_row is not None:
            self.keep_session(session_row)
        if run_row is None:
            return
        run = self.decode_run(run_row)
        if run.session_id and run.session_id not in self.cache.sessions:
            # Created between the statements: lock its session, then read it all again.
            await self.session(run.session_id)
            await self.run(run_id)
            for key in event_keys:
                await self.record(run_id, key)
            return
        self.cache.runs[run_id] = run
        for key in event_keys:
            self.cache.records[(run_id, key)] = None
        for row in record_rows:
            found = self.decode_record(row)
            self.cache.records[(run_id, found.event_key)] = found

    async def session(self, session_id: str) -> SessionRow | None:
        """The session, locked ``FOR UPDATE`` in write transactions."""
        if session_id in self.cache.sessions:
            return self.cache.sessions[session_id]
        query = _SELECT_SESSION + self._for_update
        row = await self._one(query, (session_id,))
        if row is None and self.lock:
            await self._advisory(_SESSION_LOCK, session_id)
            row = await self._one(query, (session_id,))
        if row is None:
            self.cache.sessions[session_id] = None
            return None
        return self.keep_session(row)

    async def session_purged(self, session_id: str) -> None:
        """Whether the session id is a tombstone (read after the session is locked)."""
        await self.session(session_id)
        row = await self._one(_SELECT_SESSION_PURGED, (session_id,))
        self.cache.purged_sessions[session_id] = row is not None
        if row is not None:
            self.cache.receipts[session_id] = decode_receipt(session_id, row[0])

    async def run(self, run_id: str) -> RunRow | None:
        """The run, locked ``FOR UPDATE`` (after its session) in write transactions."""
        if run_id in self.cache.runs:
            return self.cache.runs[run_id]
        if not self.lock:
            row = await self._one(_SELECT_RUN, (run_id,))
            found = None if row is None else self.decode_run(row)
            self.cache.runs[run_id] = found
            return found
        guarded = False
        while True:
            head = await self._one(_SELECT_RUN_SESSION, (run_id,))
            if head is None:
                if guarded:
                    self.cache.runs[run_id] = None
                    return None
                await self._advisory(_RUN_LOCK, run_id)
                guarded = True
                continue
            if head[0]:
                await self.session(head[0])
            row = await self._one(_SELECT_RUN + " FOR UPDATE", (run_id,))
            if row is not None:
                found = self.decode_run(row)
                self.cache.runs[run_id] = found
                return found
            # Purged between the two reads: look again (now it is absent).

    async def purged_run(self, run_id: str) -> None:
        """The session of a purged run, or None. Tombstones are never removed."""
        row = await self._one(_SELECT_PURGED_RUN, (run_id,))
        self.cache.purged_runs[run_id] = None if row is None else row[0]

    async def record(self, run_id: str, event_key: str) -> None:
        """A run's record by event key (read after the run is locked)."""
        await self.run(run_id)
        row = await self._one(_SELECT_RECORD, (run_id, event_key))
        self.cache.records[(run_id, event_key)] = None if row is None else self.decode_record(row)

    async def tool_result(self, run_id: str, call_key: str) -> None:
        """A call's saved result (read after the run is locked, so saves serialize on it)."""
        run = await self.run(run_id)
        row = await self._one(_SELECT_TOOL_RESULT, (run_id, call_key))
        data = None if row is None else verified_tool_result(run_id, call_key, *row)
        if data is not None and self.sealer is not None and run is not None:
            data = self.sealer.open_tool_result(run.session_id, run_id, call_key, data)
        self.cache.tool_results[(run_id, call_key)] = data

    async def session_contents(self, session_id: str) -> None:
        """The session's runs and records (read after the session is locked) [D7]."""
        await self.session(session_id)
        runs_cur = await self.conn.execute(_SELECT_CONTENT_RUNS, (session_id,))
        runs = [run_from_row(row) for row in await runs_cur.fetchall()]
        records_cur = await self.conn.execute(_SELECT_CONTENT_RECORDS, (session_id,))
        records = [record_from_row(row) for row in await records_cur.fetchall()]
        if self.sealer is not None:
            runs, records = self.sealer.open_contents(runs, records)
        self.cache.contents[session_id] = (runs, records)

    async def derived_copies(self, session_id: str) -> None:
        """[G2] the copies of the session's history other sessions hold (records opened).

        A purge reads them after locking the session; each holding session is then
        locked by the decision's own reads of it, before anything is written.
        """
        cur = await self.conn.execute(_SELECT_COPIES)
        found = []
        for row in await cur.fetchall():
            record = record_from_row(row)
            if self.sealer is not None:
                record = self.sealer.open_record(record)
            copy = derived_copy(record)
            if copy.source.session_id == session_id:
                found.append(copy)
        windows = []
        for holder in dict.fromkeys(c.session_id for c in found):
            cur = await self.conn.execute(_SELECT_SESSION_WINDOWS, (holder,))
            for row in await cur.fetchall():
                record = record_from_row(row)
                windows.append(record if self.sealer is None else self.sealer.open_record(record))
        self.cache.derived[session_id] = summaries_of(found, windows)

    async def damaged(self, run_id: str) -> None:
        """The run's records that fail their checksum (read after the run is locked)."""
        await self.run(run_id)
        cur = await self.conn.execute(_SELECT_RUN_LOG, (run_id,))
        rows = await cur.fetchall()
        self.cache.damaged[run_id] = [
            d for row in rows if (d := unverified_record(row)) is not None
        ]

    async def messages(self, kind: Kind, ident: str) -> None:
        """A session's messages: one by run id, the waiting ones, the newest, or all (those
        of a session read after the session is locked, so they cannot change meanwhile)."""
        cache = self.cache
        if kind == "message":
            row = await self._one(_SELECT_MESSAGE, (ident,))
            cache.messages[ident] = None if row is None else self._message(row)
            return
        await self.session(ident)
        if kind == "latest_message":
            row = await self._one(_SELECT_LATEST_MESSAGE, (ident,))
            cache.latest_messages[ident] = None if row is None else self._message(row)
            return
        query = _SELECT_PENDING if kind == "pending" else _SELECT_MESSAGES
        cur = await self.conn.execute(query, (ident,))
        found = [self._message(row) for row in await cur.fetchall()]
        if kind == "pending":
            cache.pending[ident] = found
        else:
            cache.session_message_lists[ident] = found

    def _message(self, row: TupleRow) -> SessionMessage:
        return message_from_row(row, _utc, self.sealer)

    async def running(self, session_id: str) -> None:
        """The session's running runs (read after the session is locked)."""
        await self.session(session_id)
        cur = await self.conn.execute(_SELECT_RUNNING, (session_id,))
        self.cache.running[session_id] = [row[0] for row in await cur.fetchall()]
