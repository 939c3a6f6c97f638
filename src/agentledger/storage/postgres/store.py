"""PostgresStore: the production backend, shared by many workers on many hosts.

Every operation is one transaction on a pooled connection. A write runs the
shared decision from :mod:`agentledger.storage.lifecycle` against a
:class:`._reader.CachedReader`; each cache miss is loaded (and locked, see
:mod:`._reader`) and the decision rerun, then the plan is applied in the same
transaction (:mod:`._apply`). Concurrency failures are retried with the
decision rerun on fresh state (:mod:`._retry`). An append to a run this
handle wrote last is decided on what it remembers and written by one
statement that checks that memory still holds (:mod:`._one_statement`) [B3].
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import warnings
from collections.abc import Awaitable, Callable, Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

import psycopg
from psycopg import AsyncConnection, conninfo, pq
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout, TooManyRequests

from agentledger.errors import SchemaVersionError, StoreClosedError, ValidationError
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
from agentledger.storage.encryption.binding import bind
from agentledger.storage.encryption.deferral import KeyNeeded, deferring_vault_reads
from agentledger.storage.listing import session_query
from agentledger.storage.operations import AdminOperations, Operation, Touch
from agentledger.storage.postgres import migrations as _migrations
from agentledger.storage.postgres.apply import RUN_USAGE, USAGE, apply_plan
from agentledger.storage.postgres.one_statement import (
    RACED,
    Guess,
    Known,
    KnownRuns,
    Remembered,
    Statement,
    guess,
    guess_statement,
    healthy,
    learn,
    send_statements,
    written,
)
from agentledger.storage.postgres.pages import chain_reader, page_reader, transcript_reader
from agentledger.storage.postgres.pages import decide as _decide
from agentledger.storage.postgres.reader import CachedReader, Key, Loader
from agentledger.storage.postgres.retry import MAX_ATTEMPTS, backoff, is_retryable, transient
from agentledger.storage.postgres.rows import (
    RUN_COLUMNS,
    SESSION_COLUMNS,
    SESSION_WIDTH,
    run_from_row,
    session_from_row,
)
from agentledger.storage.postgres.search import build_index, search_reader
from agentledger.storage.postgres.session_commits import SessionCommits
from agentledger.storage.postgres.session_list import session_list
from agentledger.storage.search import SearchPage, search_query
from agentledger.storage.state import Plan, StateReader
from agentledger.storage.types import (
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

__all__ = ["PostgresStore"]

R = TypeVar("R")
Req = TypeVar("Req")
Resp = TypeVar("Resp")
if TYPE_CHECKING:
    from agentledger.storage.encryption import Encryption

Conn = AsyncConnection[TupleRow]

_POOL_ERRORS = (PoolClosed, PoolTimeout, TooManyRequests)
_MAX_KEY_LOADS = 8
"""Keys one operation loads off the loop before it reads the vault inline (a vault that
keeps changing under it would otherwise restart it without end)."""
_XID = "SELECT pg_current_xact_id()::xid::text"  # the xmin of every row this transaction wrote


def _prefixed(alias: str, columns: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in columns.split(","))


_SESSION_WITH_RUNS = (
    f"SELECT {_prefixed('s', SESSION_COLUMNS)}, {_prefixed('r', RUN_COLUMNS)} "
    "FROM agentledger_sessions s LEFT JOIN agentledger_runs r ON r.session_id = s.id "
    "WHERE s.id = %s ORDER BY r.ord"
)


def _keys(
    touched: Sequence[Touch], *, appends: bool = False
) -> tuple[list[Key], tuple[str, list[str]] | None]:
    """What a checked request names, as keys to load before deciding: the sessions and
    runs, and its records (one: a key; more, or an append's: the run and their event keys,
    read together)."""
    prefetch: list[Key] = [
        (touch.kind, touch.id, "")
        for touch in touched
        if (touch.kind == "session" or touch.kind == "run") and touch.id
    ]
    records = [touch for touch in touched if touch.kind == "record"]
    if len(records) == 1 and not appends:
        prefetch.append(("record", records[0].id, records[0].event_key))
    elif records:
        return prefetch, (records[0].id, list(dict.fromkeys(r.event_key for r in records)))
    return prefetch, None


async def _abandon(conn: Conn) -> None:
    """Roll back whatever transaction a failed operation left open on ``conn``."""
    if conn.closed or conn.info.transaction_status == pq.TransactionStatus.IDLE:
        return
    with contextlib.suppress(psycopg.Error):
        await conn.execute("ROLLBACK")


def _check_pool_sizes(min_size: object, max_size: object) -> tuple[int, int]:
    for field, value in (("min_size", min_size), ("max_size", max_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValidationError(field=field, expected="a non-negative integer", got=value)
    assert isinstance(min_size, int)
    assert isinstance(max_size, int)
    if max_size < 1 or max_size < min_size:
        raise ValidationError(field="max_size", expected=f">= max(1, {min_size})", got=max_size)
    return min_size, max_size


_ENCRYPTION = "SELECT scheme, vault_id FROM agentledger_encryption WHERE id = 1"
_HAS_DATA = (
    "SELECT EXISTS (SELECT 1 FROM agentledger_records) "
    "OR EXISTS (SELECT 1 FROM agentledger_runs WHERE checkpoint_id IS NOT NULL)"
)
_RECORD_ENCRYPTION = (
    "INSERT INTO agentledger_encryption (id, scheme, vault_id) VALUES (1, %s, %s) "
    "ON CONFLICT (id) DO NOTHING"
)


async def _prepare(
    dsn: str, extra: dict[str, Any], migrate: bool, encryption: Encryption | None
) -> bool:
    """Check the server and the schema on a connection of its own; apply migrations.

    Returns whether every stored transcript record passed the strict decode.
    """
    async with await AsyncConnection.connect(dsn, **extra) as conn:
        if migrate:
            await _migrations.migrate(conn)
        else:
            todo = await _migrations.pending(conn)
            if todo:
                raise SchemaVersionError(
                    current=todo[0].version - 1,
                    latest=_migrations.SCHEMA_VERSION,
                    pending=[m.version for m in todo],
                )
        await _bind_encryption(conn, encryption)
        if migrate:
            await build_index(conn)  # the records stored before the search index [G1]
        return await _migrations.transcripts_checked(conn)


async def _bind_encryption(conn: AsyncConnection[TupleRow], encryption: Encryption | None) -> None:
    """[A2] check the database's encryption marker against ``encryption``; record a new one."""
    async with conn.transaction():
        row = await (await conn.execute(_ENCRYPTION)).fetchone()
        recorded = None if row is None else (str(row[0]), str(row[1]))
        has_data = await (await conn.execute(_HAS_DATA)).fetchone()
        assert has_data is not None
        marker = await asyncio.to_thread(bind, encryption, recorded, has_data=bool(has_data[0]))
        if marker is not None:
            await conn.execute(_RECORD_ENCRYPTION, marker)
    if marker is not None:  # a racing opener may have recorded another vault first
        row = await (await conn.execute(_ENCRYPTION)).fetchone()
        assert row is not None
        await asyncio.to_thread(bind, encryption, (str(row[0]), str(row[1])), has_data=True)


class PostgresStore(AdminOperations):
    """A ``Store`` and ``SessionAdmin`` on a PostgreSQL database, via a connection pool.

    Open it with :meth:`open` (which applies pending migrations) and close it
    with :meth:`close`, or use it as an async context manager. Any number of
    stores, in any number of processes and hosts, may share one database.
    """

    def __init__(
        self,
        *legacy: Any,
        pool: AsyncConnectionPool[Conn] | None = None,
        encryption: Encryption | None = None,
        limits: SizeLimits = DEFAULT_LIMITS,
        transcripts_verified: bool = False,
    ) -> None:
        """Use :meth:`open`; this only assembles an opened store around its open ``pool``.

        ``PostgresStore(pool, encryption)`` (positional) still works for one release,
        with a ``DeprecationWarning``: pass them by keyword.
        """
        if legacy:
            warnings.warn(
                "PostgresStore(pool, encryption) is deprecated: pass pool= and encryption= "
                "by keyword, or open the store with PostgresStore.open(dsn, ...)",
                DeprecationWarning,
                stacklevel=2,
            )
            if len(legacy) > 2 or pool is not None or (len(legacy) == 2 and encryption is not None):
                raise ValidationError(
                    field="pool",
                    expected="one pool and at most one encryption, each given once",
                    got=f"{len(legacy)} positional arguments",
                )
            pool = legacy[0]
            encryption = legacy[1] if len(legacy) == 2 else encryption
        if pool is None:
            raise ValidationError(field="pool", expected="an open connection pool", got=None)
        self._pool = pool
        self.encryption = encryption
        """Encryption at rest [A2], or None for a plaintext database."""
        self._closed = False
        self.limits = limits
        """The payload and checkpoint caps this handle enforces on writes."""
        self._transcripts_verified = transcripts_verified
        self._known = KnownRuns()
        """The runs this handle wrote last, for appends in one statement [B3]."""
        self._commits: SessionCommits[Statement, TupleRow | None] = SessionCommits(self._send)
        """Appends in one statement to one session, grouped while one is in flight."""

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        encryption: Encryption | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        max_checkpoint_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES,
        min_size: int = 1,
        max_size: int = 10,
        pool_timeout: float = 30.0,
        migrate: bool = True,
    ) -> PostgresStore:
        """Connect, bring the schema up to date and open the pool.

        Args:
            dsn: a libpq connection string or ``postgresql://`` URI.
            encryption: seal payloads and checkpoints at rest [A2]; required for a
                database created with it, refused for a plaintext one holding data.
            max_payload_bytes: largest record payload a write may carry (16 MiB).
            max_checkpoint_bytes: largest suspension checkpoint (64 MiB).
            min_size: connections the pool keeps open.
            max_size: most connections the pool opens at once.
            pool_timeout: seconds to wait for a connection (on open and per operation).
            migrate: apply pending migrations; with False a database that needs
                them is refused (for deployments that migrate separately).

        Raises:
            SchemaVersionError: the database was written by a newer agentledger,
                or (with ``migrate=False``) it needs migrating.
            ValidationError: a malformed ``dsn``, pool size or cap, or a migration
                history that is not this code's (``schema_version``).
            TransientError: the server cannot be reached or refuses the connection.
        """
        if not isinstance(dsn, str):
            raise ValidationError(field="dsn", expected="a connection string", got=type(dsn))
        min_size, max_size = _check_pool_sizes(min_size, max_size)
        limits = SizeLimits(
            max_payload_bytes=max_payload_bytes, max_checkpoint_bytes=max_checkpoint_bytes
        )
        try:
            params = conninfo.conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as e:
            raise ValidationError(
                field="dsn", expected="a libpq connection string or URI", got=str(e)
            ) from e
        extra: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in params:
            extra["connect_timeout"] = max(1, round(pool_timeout))
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            kwargs=extra,
            timeout=pool_timeout,
            name="agentledger",
            open=False,
        )
        await pool.open(wait=False)  # connects in the background while we migrate
        try:
            verified = await _prepare(dsn, extra, migrate, encryption)
            await pool.wait(timeout=pool_timeout)
        except BaseException as e:
            await pool.close()
            if isinstance(e, psycopg.Error | PoolTimeout):
                raise transient(e, "open") from e
            raise
        return cls(pool=pool, encryption=encryption, limits=limits, transcripts_verified=verified)

    async def close(self) -> None:
        """Close every pooled connection. Idempotent; later calls fail with StoreClosedError."""
        if not self._closed:
            self._closed = True
            await self._pool.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # Transactions ------------------------------------------------------------

    async def _write(
        self,
        operation: str,
        decide: Callable[[StateReader], Plan[R]],
        prefetch: Sequence[Key],
        appends: tuple[str, list[str]] | None = None,
        *,
        remember: bool = False,
        session: str = "",
    ) -> R:
        """One locking transaction: load, decide, apply; retried on concurrency failures.

        The connection is in pipeline mode: statements are sent without
        waiting, and only reading a result waits. An append to a running run
        (``appends``: its run id and event keys) costs two round trips: BEGIN
        and the locking reads, then the writes and COMMIT. With ``remember``
        the runs written are kept, with their new row versions, so the next
        append to them can be one statement (:mod:`._one_statement`). A write of
        ``session`` waits for the session's line (see :class:`.SessionCommits`), so
        this handle's transactions of one session are answered in commit order.
        """
        self._check_open(operation)
        attempt = loads = 0
        while True:
            attempt += 1
            sent = [False]  # set once writes or the commit were sent
            try:
                with self._deferring(loads):
                    if session:
                        plan, loader, xid = await self._commits.alone(
                            session,
                            functools.partial(
                                self._transaction, decide, prefetch, appends, remember, sent
                            ),
                        )
                    else:
                        plan, loader, xid = await self._transaction(
                            decide, prefetch, appends, remember, sent
                        )
                self._note_runs(plan, loader.cache, None if xid is None else str(xid[0]))
                return plan.result
            except KeyNeeded as needed:  # rolled back: load the key off the loop, run it again
                attempt, loads = attempt - 1, loads + 1
                await self._load_key(needed)
                continue
            except Exception as e:
                if not self._retry(e, sent[0], attempt, operation):
                    raise
            await backoff(attempt)

    async def _transaction(
        self,
        decide: Callable[[StateReader], Plan[R]],
        prefetch: Sequence[Key],
        appends: tuple[str, list[str]] | None,
        remember: bool,
        sent: list[bool],
    ) -> tuple[Plan[R], Loader, Any]:
        """One attempt of :meth:`_write`: its plan, loader and the runs' new row version."""
        async with self._pool.connection() as conn:
            try:
                async with conn.pipeline():
                    # BEGIN and COMMIT are statements of the pipeline, not a
                    # psycopg transaction block, which would wait for each.
                    await conn.execute("BEGIN")
                    loader = Loader(conn, CachedReader(), lock=True, sealer=self.encryption)
                    if appends is not None:
                        await loader.run_with_records(*appends)
                    await loader.prefetch(prefetch)
                    plan = await _decide(loader, decide)
                    version = None
                    if plan.writes:
                        sent[0] = True
                        await apply_plan(loader, plan)
                        if remember and plan.runs:
                            version = await conn.execute(_XID)
                    await conn.execute("COMMIT")
                # Read after the pipeline's end, which fetched it with COMMIT's reply.
                xid = None if version is None else await version.fetchone()
            except BaseException:
                await _abandon(conn)
                raise
        return plan, loader, xid

    def _session_of(self, touched: Sequence[Touch], request: object) -> str:
        """The one session a write names (as a session, a run this handle knows, or its
        records' session), whose line it waits for; "" for none or several."""
        sessions = {t.id for t in touched if t.kind == "session" and t.id}
        for t in touched:
            known = self._known.get(t.id) if t.kind == "run" and t.id else None
            if known is not None and known.session is not None:
                sessions.add(known.session.id)
        records = getattr(request, "records", ())
        if isinstance(records, list | tuple):
            sessions.update(r.session_id for r in records if isinstance(r, Record) and r.session_id)
        return sessions.pop() if len(sessions) == 1 else ""

    def _note_runs(self, plan: Plan[Any], cache: CachedReader, version: str | None) -> None:
        """Remember the runs ``plan`` wrote at ``version`` (forget them if None)."""
        for run in plan.runs:
            session = cache.sessions.get(run.session_id) if run.session_id else None
            if plan.session is not None and plan.session.id == run.session_id:
                session = plan.session
            if version is None or (run.session_id and session is None):
                self._known.drop(run.run_id)
            else:
                self._known.put(Known(run, version, session))

    async def _append(
        self, op: Operation[Req, Resp], request: Req, decide: Callable[[StateReader], Plan[Resp]]
    ) -> Resp:
        """[B3] an append in one statement, on the run as this handle knows it or reads it.

        A run this handle wrote last costs one round trip; another, two (one
        read, one write). The decision runs once on what the handle remembers,
        so it checks the request before any id of it is read; anything the
        statement cannot settle goes to :meth:`_write`, which decides again
        under locks.
        """
        operation = op.name
        reader = Remembered(self._known.get)
        found = guess(reader, decide)
        run_id = reader.asked  # checked by the decision before it asked
        if run_id is not None:
            writing = False
            version = None
            try:
                with self._deferring(0):
                    if reader.known is None:
                        found = await self._learn(run_id, decide)
                    if found is not None:
                        statement = guess_statement(found, self.encryption)
                        writing = True
                        session = found.known.session
                        if session is None:
                            answer = (await self._send([statement]))[0]
                        else:
                            answer = await self._commits.run(session.id, statement)
                        version = written(answer, found)
            except KeyNeeded:  # sealed before anything was sent: the locking path loads it
                found = None
            except RACED:  # the run changed under the statement: it wrote nothing
                found = None
                self._known.drop(run_id)
            except Exception as e:
                self._known.drop(run_id)
                if not self._retry(e, writing, 1, operation):
                    raise
            else:
                if found is not None and version is not None:
                    self._known.put(Known(found.plan.runs[0], version, found.known.session))
                    return cast(Resp, found.plan.result)
                self._known.drop(run_id)
        op.check(request, self.limits)  # a refusal, before anything is read
        touched = op.touches(request)
        _, appends = _keys(touched, appends=True)
        return await self._write(
            operation,
            decide,
            (),
            appends,
            remember=True,
            session=self._session_of(touched, request),
        )

    async def _learn(
        self, run_id: str, decide: Callable[[StateReader], Plan[Resp]]
    ) -> Guess | None:
        """The decision on ``run_id`` as the database holds it now, if one statement can
        write it (see :func:`.one_statement.guess`)."""
        async with self._pool.connection() as conn:
            known = await learn(conn, run_id)
        return None if known is None else guess(Remembered(lambda _: known), decide)

    async def _send(self, statements: list[Statement]) -> list[TupleRow | None]:
        """Run appends' statements on one pooled connection (see ``send_statements``);
        on a connection the server closed meanwhile, none (each answers None)."""
        async with self._pool.connection() as conn:
            if not healthy(conn):
                await conn.close()  # the pool replaces it; the locking path retries
                return [None] * len(statements)
            try:
                return await send_statements(conn, statements)
            except BaseException:
                await _abandon(conn)
                raise

    async def _read(
        self, operation: str, read: Callable[[Loader], Awaitable[R]], prefetch: Sequence[Key]
    ) -> R:
        """A read without locks or transaction (autocommit statements); retried if cut off.

        Every read that must be consistent across rows (a log page and its
        owner, a session and its runs) is one statement, so one snapshot,
        without paying for a transaction.
        """
        self._check_open(operation)
        attempt = loads = 0
        while True:
            attempt += 1
            try:
                with self._deferring(loads):
                    async with self._pool.connection() as conn:
                        loader = Loader(conn, CachedReader(), lock=False, sealer=self.encryption)
                        await loader.prefetch(prefetch)
                        return await read(loader)
            except KeyNeeded as needed:
                attempt, loads = attempt - 1, loads + 1
                await self._load_key(needed)
                continue
            except Exception as e:
                if not self._retry(e, False, attempt, operation):
                    raise
            await backoff(attempt)

    def _deferring(self, loads: int) -> contextlib.AbstractContextManager[None]:
        """[A2] Vault reads off the event loop (see ``encryption.deferral``), unless this
        operation already loaded keys ``_MAX_KEY_LOADS`` times: then inline, so it ends."""
        if self.encryption is None or loads >= _MAX_KEY_LOADS:
            return contextlib.nullcontext()
        return deferring_vault_reads()

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise StoreClosedError(backend="postgres", operation=operation)

    async def _load_key(self, needed: KeyNeeded) -> None:
        assert self.encryption is not None
        await self.encryption.load_key(needed)

    def _retry(self, error: Exception, writing: bool, attempt: int, operation: str) -> bool:
        """True to try again; False to re-raise ``error`` unchanged; else raises TransientError.

        A connection failure is retried only while nothing was written (``writing``
        is False): once writes or the commit were sent, the outcome is unknown and
        the caller must retry the command itself.
        """
        if self._closed:  # closed before or during the call: no retry can help
            raise StoreClosedError(backend="postgres", operation=operation) from None
        if isinstance(error, PoolClosed):
            raise transient(PoolClosed(), operation) from error
        if isinstance(error, _POOL_ERRORS):
            raise transient(error, operation) from error
        if not isinstance(error, psycopg.Error) and not is_retryable(error):
            return False  # a contract error from the decision, or a bug: unchanged
        lost = isinstance(error, psycopg.OperationalError) and not is_retryable(error)
        if attempt < MAX_ATTEMPTS and (is_retryable(error) or (lost and not writing)):
            return True
        raise transient(error, operation) from error

    async def _load(
        self, operation: str, read: Callable[[StateReader], R], prefetch: Sequence[Key]
    ) -> R:
        async def run(loader: Loader) -> R:
            return await _decide(loader, read)

        return await self._read(operation, run, prefetch)

    async def perform(self, op: Operation[Req, Resp], request: Req, /) -> Resp:
        """Run ``op``: a write in one locking transaction, its request checked first (its ids
        are read only once valid); an append perhaps in one statement, decided first on
        the run this handle remembers; or a read."""
        self._check_open(op.name)
        plan = op.plan
        if plan is not None:
            limits = self.limits

            def decide(r: StateReader) -> Plan[Resp]:
                return plan(r, request, limits)

            if op.appended is not None:  # the decision checks it, on what this handle knows
                return await self._append(op, request, decide)
            op.check(request, limits)
            touched = op.touches(request)
            prefetch, appends = _keys(touched)
            return await self._write(
                op.name,
                decide,
                prefetch,
                appends,
                remember=op.starts,
                session=self._session_of(touched, request),
            )
        read = op.read
        if read is not None:
            op.check(request, self.limits)
            prefetch, _ = _keys(op.touches(request))
            return await self._load(op.name, lambda r: read(r, request), prefetch)
        return cast(Resp, await _READS[op](self, request))

    @property
    def transcripts_verified(self) -> bool:
        """[R2] replay may skip re-checking this store's transcripts (see
        :class:`~agentledger.storage.protocol.VerifiedTranscripts`): False for a
        database holding transcripts from before the write check that fail them."""
        return self._transcripts_verified

    async def verified_transcript_payloads(self, run_id: str, /) -> list[bytes]:
        """[R2] a run's transcript payloads in log order, its whole log checked as a listing."""

        def require(r: StateReader) -> int:
            return lifecycle.require_run(r, run_id).last_seq

        return await self._read(
            "verified_transcript_payloads", transcript_reader(run_id, require), ()
        )

    # Encryption at rest [A2] -------------------------------------------------

    async def erase_session_keys(self, session_id: str, /) -> bool:
        """Destroy the session's data key (crypto-erasure); False if it was erased before.

        Afterwards the session's records and checkpoints raise
        :class:`~agentledger.errors.SessionKeyErasedError`, here, in every dump or
        backup of the database and in archives made before; other sessions read intact.
        """
        return await asyncio.to_thread(self._require_encryption().erase_session_keys, session_id)

    async def rotate_keys(self) -> int:
        """Rewrap every data key under the keyring's current key; records are not rewritten."""
        return await asyncio.to_thread(self._require_encryption().rotate_keys)

    def _require_encryption(self) -> Encryption:
        if self.encryption is None:
            raise ValidationError(
                field="encryption", expected="a store opened with encryption", got=None
            )
        return self.encryption


# Reads a StateReader cannot answer: one function per operation, each its own query.


async def _run_page(store: PostgresStore, q: req.RunPageQuery) -> Page:
    def require(r: StateReader) -> int:
        return lifecycle.require_run(r, q.run_id).last_seq

    lister = page_reader("run", q.run_id, require, q.cursor, q.limit)
    return await store._read("list_run_records", lister, ())


async def _transcript_chain(
    store: PostgresStore, q: req.ChainQuery
) -> tuple[TranscriptSegment, ...]:
    chain = chain_reader(q.run_id, windowed=q.windowed)
    return await store._read("load_transcript_chain", chain, ())


async def _session_page(store: PostgresStore, q: req.SessionPageQuery) -> Page:
    session_id = q.session_id

    def require(r: StateReader) -> int:
        lifecycle.require_session(r, session_id)
        return cast(CachedReader, r).session_seq[session_id]

    lister = page_reader("session", session_id, require, q.cursor, q.limit)
    return await store._read("list_session_run_records", lister, ())


async def _session_runs(store: PostgresStore, q: req.RunsBySessionQuery) -> list[RunMeta]:
    wanted = check_statuses(q.statuses, RunStatus)
    session_id = q.session_id

    async def read(loader: Loader) -> list[RunMeta]:
        require_id("session_id", session_id)
        # One statement: the session and its runs from one snapshot.
        cur = await loader.conn.execute(_SESSION_WITH_RUNS, (session_id,))
        rows = await cur.fetchall()
        session = session_from_row(rows[0][:SESSION_WIDTH]) if rows else None
        loader.cache.sessions[session_id] = session
        await _decide(loader, lambda r: lifecycle.require_session(r, session_id))
        width = SESSION_WIDTH
        runs = [run_from_row(row[width:]) for row in rows if row[width] is not None]
        return [run.meta() for run in runs if not wanted or run.status in wanted]

    return await store._read("list_runs_by_session", read, ())


async def _sessions(store: PostgresStore, q: req.SessionsQuery) -> SessionPage:
    statuses = cast(Iterable[SessionStatus], q.statuses)
    query = session_query(statuses, {} if q.labels is None else q.labels, q.cursor, q.limit)
    return await store._read("list_sessions", lambda r: session_list(r.conn, query), ())


async def _session_usage(store: PostgresStore, q: req.SessionRef) -> UsageTotals:
    session_id = q.session_id

    async def read(loader: Loader) -> UsageTotals:
        require_id("session_id", session_id)
        cur = await loader.conn.execute(USAGE.session_row, (session_id,))
        row = await cur.fetchone()
        if row is not None:
            return usage_from_row(row)
        await _decide(loader, lambda r: lifecycle.require_session(r, session_id))
        return UsageTotals()

    return await store._read("load_session_usage", read, ())


async def _run_usage(store: PostgresStore, q: req.RunRef) -> UsageTotals:
    run_id = q.run_id

    async def read(loader: Loader) -> UsageTotals:
        require_id("run_id", run_id)
        cur = await loader.conn.execute(RUN_USAGE, (run_id,))
        row = await cur.fetchone()
        if row is not None:
            return usage_from_row(row)
        await _decide(loader, lambda r: lifecycle.require_run(r, run_id))
        return UsageTotals()

    return await store._read("load_run_usage", read, ())


async def _usage_by_label(store: PostgresStore, q: req.UsageQuery) -> list[LabelUsage]:
    wanted = check_usage_query(q.key, q.labels)
    sql, params = USAGE.by_label(q.key, wanted)

    async def read(loader: Loader) -> list[LabelUsage]:
        cur = await loader.conn.execute(sql, params)
        return label_rows(q.key, await cur.fetchall())

    return await store._read("usage_by_label", read, ())


async def _derived_copies(store: PostgresStore, q: req.SessionRef) -> list[DerivedCopy]:
    session_id = q.session_id

    async def read(loader: Loader) -> list[DerivedCopy]:
        require_id("session_id", session_id)
        await loader.derived_copies(session_id)
        return loader.cache.derived[session_id]

    return await store._read("list_derived_copies", read, ())


async def _search(store: PostgresStore, q: req.SearchRequest) -> SearchPage:
    query = search_query(q.text, q.labels, q.session_id, q.cursor, q.limit)
    return await store._read("search", search_reader(query), ())


_READS: dict[Operation[Any, Any], Callable[[PostgresStore, Any], Awaitable[object]]] = {
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
