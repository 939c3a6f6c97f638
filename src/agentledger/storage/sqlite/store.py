"""SQLiteStore: the embedded default backend, one SQLite file shared by processes.

Every lifecycle method is one operation in a ``BEGIN IMMEDIATE``
transaction: the shared decision reads through :class:`SQLiteReader` and its
plan is applied before ``COMMIT``, so a refused or crashed operation writes
nothing. Operations waiting for the writer share one transaction and one
commit [B2], a failed one undoing only its own writes (:mod:`.group`). Writers in all
processes are serialized by SQLite's write lock, which is what makes races
across processes resolve to exactly one winner [X5].
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import types
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from agentledger.errors import StoreClosedError, ValidationError
from agentledger.storage import lifecycle
from agentledger.storage import operations as ops
from agentledger.storage import requests as req
from agentledger.storage.accounting import (
    LabelUsage,
    UsageTotals,
    check_usage_query,
    usage_from_row,
)
from agentledger.storage.derivation import DerivedCopy
from agentledger.storage.encryption.deferral import KeyNeeded, deferring_vault_reads
from agentledger.storage.listing import session_query
from agentledger.storage.operations import AdminOperations, Operation
from agentledger.storage.search import SearchPage, search_query
from agentledger.storage.sqlite import search
from agentledger.storage.sqlite.apply import USAGE
from agentledger.storage.sqlite.connection import (
    DEFAULT_BUSY_TIMEOUT,
    OPEN_ERRORS,
    Durability,
    check_busy_timeout,
    check_durability,
    check_path,
    connect,
    map_error,
    map_open_error,
)
from agentledger.storage.sqlite.group import QUEUE, GroupWriter
from agentledger.storage.sqlite.inline_reads import MAX_BYTES, MAX_RECORDS, Declined, InlineReads
from agentledger.storage.sqlite.opening import check_read_only_encryption, open_writer
from agentledger.storage.sqlite.reader import RowCache, SQLiteReader
from agentledger.storage.sqlite.readonly import (
    check_existing_path,
    connect_read_only,
    open_checked,
)
from agentledger.storage.sqlite.threads import ConnectionThreads
from agentledger.storage.sqlite.writes import WriteOperation, run_appends
from agentledger.storage.state import Plan, StateReader
from agentledger.storage.types import (
    Checkpoint,
    Page,
    Record,
    RunMeta,
    RunStatus,
    SessionPage,
    SessionStatus,
    TranscriptSegment,
)
from agentledger.storage.usage_sql import label_rows
from agentledger.storage.validation import (
    DEFAULT_LIMITS,
    DEFAULT_MAX_CHECKPOINT_BYTES,
    DEFAULT_MAX_PAYLOAD_BYTES,
    SizeLimits,
    check_statuses,
    require_id,
)

if TYPE_CHECKING:
    from agentledger.storage.encryption import Encryption

__all__ = ["SQLiteStore", "default_path"]

R = TypeVar("R")
Req = TypeVar("Req")
Resp = TypeVar("Resp")

_READERS = 4
"""Reader threads per handle: reads run in parallel with each other and with writes."""


def default_path() -> str:
    """Where the CLI and demo keep their database: ``$AGENTLEDGER_DB`` or ``./agentledger.db``.

    One environment variable moves every tool to another file without flags.
    """
    return os.environ.get("AGENTLEDGER_DB") or os.path.join(".", "agentledger.db")


_SMALL_RECORDS = 16
_SMALL_BYTES = 64 * 1024


def _small(records: object) -> bool:
    """Whether an append is small enough to run on the caller's thread (see GroupWriter).

    Anything else, malformed input included, goes to the writer thread, whose
    operation refuses it.
    """
    if not isinstance(records, list | tuple) or len(records) > _SMALL_RECORDS:
        return False
    size = 0
    for record in records:
        payload = record.payload if isinstance(record, Record) else None
        if not isinstance(payload, bytes):
            return False
        size += len(payload)
    return size <= _SMALL_BYTES


_BOUNDLESS = frozenset({ops.END_SESSION, ops.PURGE_SESSION, ops.IMPORT_SESSION})
"""Writes whose rows are not bounded by their request (every run of a session)."""


def _light(request: object) -> bool:
    """Whether a write request other than an append is small enough to run on the
    caller's thread (see GroupWriter): records, checkpoint and bytes within the
    bounds of :func:`_small`, looking one level into the request."""
    records = 0
    size = 0
    for name in getattr(request, "__struct_fields__", ()):
        value = getattr(request, name)
        if isinstance(value, Record):
            records += 1
            value = value.payload
        elif isinstance(value, Checkpoint):
            value = value.data
        elif isinstance(value, tuple | list):
            if not _small(value):
                return False
            records += len(value)
            size += sum(len(r.payload) for r in value)
            continue
        if isinstance(value, bytes):
            size += len(value)
    return records <= _SMALL_RECORDS and size <= _SMALL_BYTES


def _small_page(limit: object) -> bool:
    """Whether a run page may be read on the caller's thread (its bytes are bounded
    where it is read); anything else, a bad limit included, goes to a reader thread."""
    return isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit <= MAX_RECORDS


def _check_inline(inline: object) -> None:
    if not isinstance(inline, bool):
        raise ValidationError(field="inline", expected="True or False", got=inline)


@types.coroutine
def _one_turn() -> Generator[None, None, None]:
    """Let the event loop run one turn (what ``asyncio.sleep(0)`` does, without its
    coroutine around the yield)."""
    yield


def _rollback(conn: sqlite3.Connection) -> None:
    """End a failed transaction without hiding the error that failed it."""
    if conn.in_transaction:
        # If even ROLLBACK fails, SQLite rolls back on its own; the first error is the one.
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _read_job(
    read: Callable[[SQLiteReader], R],
    *,
    one_statement: bool = False,
    sealer: Encryption | None = None,
    max_bytes: int | None = None,
) -> Callable[[sqlite3.Connection], R]:
    """One whole read in one read transaction, so all its statements see one snapshot.

    A read that is ``one_statement`` (apart from the lookups that explain an
    error) needs no transaction: a statement always reads one snapshot.
    ``max_bytes`` bounds what it fetches (see :class:`SQLiteReader`).
    """

    def job(conn: sqlite3.Connection) -> R:
        if one_statement:
            return read(SQLiteReader(conn, sealer=sealer, max_bytes=max_bytes))
        conn.execute("BEGIN")
        try:
            return read(SQLiteReader(conn, sealer=sealer, max_bytes=max_bytes))
        finally:
            _rollback(conn)

    return job


class SQLiteStore(AdminOperations):
    """A complete ``Store`` and ``SessionAdmin`` in one SQLite file (WAL mode).

    Open it with :meth:`open` (or :meth:`open_read_only`, for inspection that must
    never write); close it with :meth:`close` or ``async with``.
    Any number of handles, in any number of processes, may share the file:
    writes run in ``BEGIN IMMEDIATE`` transactions, and a writer that cannot
    get the lock within ``busy_timeout`` seconds gets a
    :class:`~agentledger.errors.TransientError` (retry it).

    Each operation leaves the event loop once: writes run on this handle's
    writer thread, in call order, the ones waiting together sharing one
    transaction and one commit (group commit: a failed one undoes only its own writes,
    none answered before the commit); reads run on its reader threads, each
    with its own connection, and never wait for a writer. Small operations
    run on the caller's thread instead, when they would wait for nothing
    (tens of microseconds, less than the hop to a thread costs):

    - the small writes one event loop makes in one turn (an append of up to
      16 records and 64 KiB, a start, a terminal, a saved tool result: any
      write but ending, purging or importing a session, within those
      bounds), when the writer is idle, the file's write lock is free and,
      encrypted, their data keys are in memory: one group, committed (with
      its fsync at ``"full"``) at the end of that turn on the loop's thread,
      each caller yielding once, so concurrent tasks still share a commit.
      Only while commits are fast (at most half of the last 8 took over
      1 ms): on a disk that syncs slowly the writer thread commits and the
      loop runs meanwhile (but for one group in 16, which measures again). They never
      wait for the lock, read the vault or run a checkpoint there;
    - at ``"normal"`` durability, where a commit does not wait for the disk,
      such a small append runs at once, without yielding;
    - a small read (``load_run``, ``load_session``, ``load_session_status``,
      ``load_tool_result``, a ``list_run_records`` page of at most 100
      records, ``verified_transcript_payloads`` of a run of at most 100
      records), on a connection of its own, if what it fetches is at most
      256 KiB, no other thread's loop is reading on that connection, no data
      key must be read from the vault, and SQLite does not ask it to wait
      (see :mod:`.inline_reads`), without yielding.

    ``open(..., inline=False)`` turns all three off: every operation then
    leaves the event loop.

    Durability:
        ``"full"`` (default, ``synchronous=FULL``): a commit is on disk when
        the call returns. ``"normal"`` (``synchronous=NORMAL``): commits are
        not flushed to disk one by one. A crash of the process loses nothing,
        but a power loss or operating-system crash can lose the last
        transactions that had returned; the database is never corrupted, it
        comes back as of an earlier commit. Choose it only if the caller can
        redo those last operations (activities are retried [X1]).

    Errors at open:
        :class:`~agentledger.errors.ValidationError` with ``field="path"`` for
        a directory, a missing parent directory, a read-only file (one with no
        write permission bit, even as root) or a file that is not an SQLite
        database; :class:`~agentledger.errors.SchemaVersionError` (a
        ``ValidationError`` on ``schema_version``) for a database made by a
        newer agentledger. Nothing is written to the file in these cases.
        An older schema is migrated (see :mod:`.schema`).
    """

    def __init__(
        self,
        *,
        path: str,
        writer: GroupWriter[RowCache] | None,
        readers: ConnectionThreads,
        inline_reads: InlineReads | None = None,
        encryption: Encryption | None = None,
        limits: SizeLimits = DEFAULT_LIMITS,
        transcripts_verified: bool = False,
        direct: bool = False,
    ) -> None:
        """Use :meth:`open`; this only assembles an opened store."""
        self.path = path
        """The database file."""
        self.encryption = encryption
        """Encryption at rest [A2], or None for a plaintext database."""
        self.limits = limits
        """The payload and checkpoint caps this handle enforces on writes."""
        self._transcripts_verified = transcripts_verified
        self._writer = writer
        """None for a handle opened with :meth:`open_read_only`."""
        self._direct = direct
        """A small append may run on the caller's thread without yielding (``normal``)."""
        self._readers = readers
        self._inline_reads = inline_reads
        """None when ``inline`` is off: every read goes to ``_readers``."""
        self._closed = False

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        encryption: Encryption | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        max_checkpoint_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES,
        durability: Durability = "full",
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        inline: bool = True,
    ) -> SQLiteStore:
        """Open (creating or migrating) the database at ``path``.

        Args:
            path: the database file; created if missing (its directory must exist).
            encryption: seal payloads and checkpoints at rest [A2]; required for a
                database created with it, refused for a plaintext one holding data.
            max_payload_bytes: largest record payload a write may carry (16 MiB).
            max_checkpoint_bytes: largest suspension checkpoint (64 MiB).
            durability: ``"full"`` or ``"normal"``; see the class docstring.
            busy_timeout: seconds to wait for another writer before TransientError.
            inline: let small writes and small reads that would wait for nothing
                run on the caller's thread (see the class docstring); False sends
                every operation to the handle's threads.

        Raises:
            ValidationError: a bad argument, path, file or schema version, or an
                ``encryption`` that does not fit the database.
            CorruptRecordError: a damaged file (its schema unreadable), naming it.
            TransientError: the database stayed locked for ``busy_timeout``.
        """
        synchronous = check_durability(durability)
        timeout = check_busy_timeout(busy_timeout)
        _check_inline(inline)
        limits = SizeLimits(
            max_payload_bytes=max_payload_bytes, max_checkpoint_bytes=max_checkpoint_bytes
        )
        name = check_path(path)
        conn, verified = await asyncio.to_thread(
            open_writer, name, timeout, synchronous, encryption
        )

        def open_reader(busy_timeout: float = timeout) -> sqlite3.Connection:
            return connect(name, busy_timeout=busy_timeout, synchronous=synchronous, read_only=True)

        inline_reads = None
        if inline:
            try:  # the caller's-thread reader never waits: busy timeout 0
                opened = await asyncio.to_thread(open_reader, 0.0)
                inline_reads = InlineReads(opened, encrypted=encryption is not None)
            except BaseException as e:
                conn.close()
                if isinstance(e, OPEN_ERRORS):
                    raise map_open_error(e, name) from e
                raise

        rows = RowCache()  # used by whoever holds the writer's lock
        writer = GroupWriter(
            lambda: conn,
            begin=rows.validate,
            lost=RowCache.clear,
            name=f"agentledger-sqlite-writer:{name}",
            busy_timeout=timeout,
            inline=inline,
            open_checkpointer=open_reader,  # a checkpoint needs no write access
            here_context=None if encryption is None else deferring_vault_reads,
            requeue=() if encryption is None else (KeyNeeded,),
            batch=run_appends,
            # [G1] the words of the records still waiting, every FLUSH_EVERY records
            before_commit=None if encryption is not None else search.flush_due,
        )
        readers = ConnectionThreads(
            open_reader, count=_READERS, name=f"agentledger-sqlite-reader:{name}"
        )
        return cls(
            path=name,
            writer=writer,
            readers=readers,
            inline_reads=inline_reads,
            encryption=encryption,
            limits=limits,
            transcripts_verified=verified,
            direct=inline and synchronous == "NORMAL",
        )

    @classmethod
    async def open_read_only(
        cls,
        path: str | os.PathLike[str],
        *,
        encryption: Encryption | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        inline: bool = True,
    ) -> SQLiteStore:
        """Open an existing database for reads only; nothing is ever written to the file.

        The file may be read-only. Every write method raises ``ValidationError``
        (``field="store"``). ``inline`` is as for :meth:`open`: a small read that
        would wait for nothing runs on the caller's thread.

        Raises:
            ValidationError: no such file, not an agentledger database (a 0-byte
                or foreign file is refused unchanged), or a schema version other
                than this code's.
            CorruptRecordError: a damaged file (its schema unreadable), naming it.
        """
        timeout = check_busy_timeout(busy_timeout)
        _check_inline(inline)
        name = check_existing_path(path)
        probe = await asyncio.to_thread(open_checked, name, busy_timeout=timeout)
        try:
            await asyncio.to_thread(check_read_only_encryption, probe, encryption)
        except OPEN_ERRORS as e:  # a schema damaged where the marker's table is described
            raise map_open_error(e, name) from e
        finally:
            probe.close()  # refusals surface here, from open; readers connect on first use
        inline_reads = None
        if inline:  # checked by the probe: a connection that never waits
            try:
                opened = await asyncio.to_thread(connect_read_only, name, busy_timeout=0.0)
            except OPEN_ERRORS as e:
                raise map_open_error(e, name) from e
            inline_reads = InlineReads(opened, encrypted=encryption is not None)

        def open_reader() -> sqlite3.Connection:
            return open_checked(name, busy_timeout=timeout)

        readers = ConnectionThreads(
            open_reader, count=_READERS, name=f"agentledger-sqlite-reader:{name}"
        )
        return cls(
            path=name,
            writer=None,
            readers=readers,
            inline_reads=inline_reads,
            encryption=encryption,
        )

    async def close(self) -> None:
        """Finish queued writes and close every connection; closing twice is a no-op."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            self._writer.flush(asyncio.get_running_loop())  # writes submitted this turn
        if self._inline_reads is not None:
            self._inline_reads.close()  # waits only for a read running on another loop
        await asyncio.to_thread(self._readers.stop)
        if self._writer is not None:
            # Last, and alone: the last connection to close copies the WAL into the
            # database file and removes it, unless another one is still open. The
            # reader threads close theirs at the same time, so each of them may
            # find the others open; the writer's, closed after them, does not.
            await asyncio.to_thread(self._writer.stop)

    async def __aenter__(self) -> SQLiteStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<SQLiteStore {self.path!r} {state}>"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(backend="sqlite")

    async def _write(
        self,
        operation: str,
        decide: Callable[[StateReader], Plan[R]],
        *,
        insert_first: bool = False,
        appended: Sequence[object] | None = None,
        here: bool = False,
    ) -> R:
        """Run ``decide`` on the writer; ``here``: its work is bounded, so it may run on the
        caller's thread (see GroupWriter), and if it is an append (``appended``, its
        records) at ``normal`` durability, without yielding."""
        writer = self._writer
        if writer is None or self._closed:
            self._check_open()
            raise ValidationError(
                field="store", expected="a store opened for writing", got="read-only"
            )
        op = WriteOperation(decide, insert_first=insert_first, sealer=self.encryption)
        try:
            if here and appended is not None and self._direct:
                result = writer.run_inline(op)
                if result is not QUEUE:
                    return result
            future = writer.submit(op, here=here)
            if here:
                # One turn: the end of the turn that submitted it (scheduled before this
                # task's next step) runs it here if it may, and then the answer is ready
                # without a second turn to wake this task from a future.
                try:
                    await _one_turn()
                except BaseException:
                    future.cancel()  # the operation still runs; nobody reads its answer
                    raise
            return await future
        except sqlite3.Error as e:
            raise map_error(e, operation) from e

    async def _read(
        self,
        operation: str,
        read: Callable[[SQLiteReader], R],
        *,
        one_statement: bool = False,
        small: bool = False,
    ) -> R:
        """Run ``read`` on a reader thread; a ``small`` one (bounded: one row, or a
        page of at most MAX_RECORDS) first tries the caller's thread (see :mod:`.inline_reads`)."""
        self._check_open()
        sealer = self.encryption
        try:
            if small and self._inline_reads is not None:
                job = _read_job(
                    read, one_statement=one_statement, sealer=sealer, max_bytes=MAX_BYTES
                )
                try:
                    return self._inline_reads.run(job)
                except Declined:
                    pass  # it would wait, or fetch too much: a reader thread runs it
            return await self._readers.submit(
                _read_job(read, one_statement=one_statement, sealer=sealer)
            )
        except sqlite3.Error as e:
            raise map_error(e, operation) from e

    async def perform(self, op: Operation[Req, Resp], request: Req, /) -> Resp:
        """Run ``op``: a write's decision on the writer (an append perhaps on the caller's
        thread), a read on a reader thread, or on the caller's thread if bounded."""
        plan = op.plan
        if plan is not None:
            limits = self.limits
            appended = op.appended
            if appended is not None:
                records = appended(request)
                return await self._write(
                    op.name,
                    lambda r: plan(r, request, limits),
                    insert_first=True,
                    appended=records,
                    here=_small(records),
                )
            return await self._write(
                op.name,
                lambda r: plan(r, request, limits),
                here=op not in _BOUNDLESS and _light(request),
            )
        read = op.read
        if read is not None:
            return await self._read(
                op.name,
                lambda r: read(r, request),
                one_statement=op.one_statement,
                small=op.bounded,
            )
        return cast(Resp, await _READS[op](self, request))

    @property
    def transcripts_verified(self) -> bool:
        """[R2] replay may skip re-checking this store's transcripts (see
        :class:`~agentledger.storage.protocol.VerifiedTranscripts`): False for a
        read-only handle and for a database holding transcripts from before the
        write check that fail it."""
        return self._transcripts_verified

    async def verified_transcript_payloads(self, run_id: str, /) -> list[bytes]:
        """[R2] a run's transcript payloads in log order, its whole log checked as a listing."""
        return await self._read(
            "verified_transcript_payloads",
            lambda r: r.transcript_payloads(run_id),
            one_statement=True,
            small=True,  # a log of at most MAX_RECORDS records; longer ones decline
        )

    # Encryption at rest [A2] -------------------------------------------------

    async def erase_session_keys(self, session_id: str, /) -> bool:
        """Destroy the session's data key (crypto-erasure); False if it was erased before.

        Afterwards the session's records and checkpoints raise
        :class:`~agentledger.errors.SessionKeyErasedError` here, in every backup of
        the database file and in archives made before; other sessions read intact.
        """
        encryption = self._require_encryption()
        erased = await asyncio.to_thread(encryption.erase_session_keys, session_id)
        if self._writer is not None:  # forget decoded checkpoints of the writer's row cache
            await self._writer.submit(lambda conn, cache, shared: cache.clear())
        return erased

    async def rotate_keys(self) -> int:
        """Rewrap every data key under the keyring's current key; records are not rewritten."""
        encryption = self._require_encryption()
        return await asyncio.to_thread(encryption.rotate_keys)

    def _require_encryption(self) -> Encryption:
        self._check_open()
        if self.encryption is None:
            raise ValidationError(
                field="encryption", expected="a store opened with encryption", got=None
            )
        return self.encryption


# Reads a StateReader cannot answer: one function per operation, each its own query.


async def _run_page(store: SQLiteStore, q: req.RunPageQuery) -> Page:
    return await store._read(
        "list_run_records",
        lambda r: r.run_page(q.run_id, q.cursor, q.limit),
        one_statement=True,
        small=_small_page(q.limit),
    )


async def _transcript_chain(store: SQLiteStore, q: req.ChainQuery) -> tuple[TranscriptSegment, ...]:
    return await store._read(
        "load_transcript_chain", lambda r: r.transcript_chain(q.run_id, windowed=q.windowed)
    )


async def _session_page(store: SQLiteStore, q: req.SessionPageQuery) -> Page:
    return await store._read(
        "list_session_run_records", lambda r: r.session_page(q.session_id, q.cursor, q.limit)
    )


async def _session_runs(store: SQLiteStore, q: req.RunsBySessionQuery) -> list[RunMeta]:
    wanted = check_statuses(q.statuses, RunStatus)
    return await store._read("list_runs_by_session", lambda r: r.session_runs(q.session_id, wanted))


async def _sessions(store: SQLiteStore, q: req.SessionsQuery) -> SessionPage:
    statuses = cast(Iterable[SessionStatus], q.statuses)
    query = session_query(statuses, {} if q.labels is None else q.labels, q.cursor, q.limit)
    return await store._read("list_sessions", lambda r: r.session_list(query))


async def _session_usage(store: SQLiteStore, q: req.SessionRef) -> UsageTotals:
    def read(r: SQLiteReader) -> UsageTotals:
        rows = r.usage_rows(USAGE.session_row, (q.session_id,))
        if rows:
            return usage_from_row(rows[0])
        lifecycle.require_session(r, q.session_id)
        return UsageTotals()

    return await store._read("load_session_usage", read, one_statement=True, small=True)


async def _run_usage(store: SQLiteStore, q: req.RunRef) -> UsageTotals:
    def read(r: SQLiteReader) -> UsageTotals:
        rows = r.usage_rows(USAGE.run_row, (q.run_id,))
        if rows:
            return usage_from_row(rows[0])
        lifecycle.require_run(r, q.run_id)
        return UsageTotals()

    return await store._read("load_run_usage", read, one_statement=True, small=True)


async def _usage_by_label(store: SQLiteStore, q: req.UsageQuery) -> list[LabelUsage]:
    wanted = check_usage_query(q.key, q.labels)
    sql, params = USAGE.by_label(q.key, wanted)
    return await store._read(
        "usage_by_label",
        lambda r: label_rows(q.key, r.usage_rows(sql, params)),
        one_statement=True,
    )


async def _derived_copies(store: SQLiteStore, q: req.SessionRef) -> list[DerivedCopy]:
    require_id("session_id", q.session_id)
    return await store._read(
        "list_derived_copies", lambda r: r.derived_copies(q.session_id), one_statement=True
    )


async def _search(store: SQLiteStore, q: req.SearchRequest) -> SearchPage:
    query = search_query(q.text, q.labels, q.session_id, q.cursor, q.limit)
    return await store._read("search", lambda r: r.search(query))


_READS: dict[Operation[Any, Any], Callable[[SQLiteStore, Any], Awaitable[object]]] = {
    ops.LIST_RUN_RECORDS: _run_page,
    ops.LOAD_TRANSCRIPT_CHAIN: _transcript_chain,
    ops.LIST_SESSION_RUN_RECORDS: _session_page,
    ops.LIST_RUNS_BY_SESSION: _session_runs,
    ops.LIST_SESSIONS: _sessions,
    ops.LOAD_SESSION_USAGE: _session_usage,
    ops.LOAD_RUN_USAGE: _run_usage,
    ops.USAGE_BY_LABEL: _usage_by_label,
    ops.LIST_DERIVED_COPIES: _derived_copies,
    ops.SEARCH: _search,
}
