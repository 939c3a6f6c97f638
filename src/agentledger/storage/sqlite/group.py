"""Group commit [B2]: the writer thread runs waiting operations in one transaction.

Every write of a handle queues for its one writer thread. The thread takes
the first waiting operation, opens ``BEGIN IMMEDIATE`` (waiting, across
processes, for SQLite's write lock), then takes every operation that queued
meanwhile, and those that queue while the group runs, up to
:data:`MAX_GROUP`. A refused or failed operation leaves the others' writes
alone: it is told it shares the transaction, and undoes its own writes (a
write of one statement is undone by SQLite itself; more run under a
savepoint, see :func:`.apply.apply_plan`). One ``COMMIT`` (one fsync at
``synchronous=FULL``) then answers the whole group, and only then does any
caller hear its answer: nobody is told "stored" before the commit that
stores it, and a refusal decided on top of an uncommitted write is not
reported before that write is durable either. If the commit (or a statement
that aborts the whole transaction) fails, every operation of the group gets
that error, and none of them wrote.

At ``synchronous=NORMAL`` a small write may run on the caller's thread
instead, as a group of one, when it would wait for nobody (see
:class:`GroupWriter`).

Operations submitted in one turn of an event loop reach the thread together,
as one queue item: waking a thread costs tens of microseconds, and a writer
woken by the first of sixteen submissions would contend for the GIL with the
loop still submitting the other fifteen.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, Final, Generic, Literal, TypeVar

__all__ = ["CHECKPOINT_EVERY", "MAX_GROUP", "QUEUE", "GroupWriter", "Operation", "Queued"]

R = TypeVar("R")
C = TypeVar("C")

MAX_GROUP = 128
"""Most operations sharing one transaction: a bound on the latency a group adds."""

CHECKPOINT_EVERY = 256
"""Commits between two checkpoints when SQLite's automatic one is off (inline mode):
about as often as its default of 1,000 WAL pages, for appends of a few pages each."""

# Primary result codes (https://sqlite.org/rescode.html).
_BUSY, _LOCKED = 5, 6

Operation = Callable[[sqlite3.Connection, Any, bool], Any]
"""Runs one whole operation inside the open transaction; may raise to refuse it.

Its second argument is the writer's per-transaction context (what
``begin`` returned), its third whether other operations' writes share the
transaction: if so, an operation that raises must first undo its own writes,
and only those. It returns the caller's result.
"""


class _Queue(enum.Enum):
    QUEUE = "queue"


QUEUE: Final = _Queue.QUEUE
"""What :meth:`GroupWriter.run_inline` returns when the operation must queue instead."""
Queued = Literal[_Queue.QUEUE]
"""The type of :data:`QUEUE`."""

_Item = tuple[Operation, asyncio.AbstractEventLoop, "asyncio.Future[Any]"]
_Answer = tuple[_Item, Any, "BaseException | None"]
"""An operation, its result and its error (one of the two is None)."""
_Batch = list[_Item]
"""Operations one event loop submitted in one turn, queued as one item."""


def _code(error: sqlite3.Error) -> int:
    return int(getattr(error, "sqlite_errorcode", -1)) & 0xFF


def _settle_all(answers: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, result, error in answers:
        if future.done():  # the caller gave up waiting; the operation still ran
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


class GroupWriter(Generic[C]):
    """One writer thread on one connection, committing queued operations in groups.

    ``begin(cursor)`` is called right after each ``BEGIN IMMEDIATE``, with a
    cursor of the connection to read through, and returns
    the context handed to every operation of the group (the row cache);
    ``lost(context)`` is called when a group's transaction fails, so nothing
    learned inside it survives.

    With ``inline`` (for ``synchronous=NORMAL``, where a commit does not wait
    for the disk), a small operation offered to :meth:`run_inline` while
    nothing else is queued or running, and the file's write lock is free at
    once, runs on the caller's thread instead: a group of one, with the same
    transaction and the same answer after the same COMMIT, without two thread
    wake-ups that cost more than the operation. It never waits there: the
    lock is only tried (busy timeout 0), and an operation that finds it taken
    queues for the thread, which waits for it with ``busy_timeout``. SQLite's
    automatic checkpoint is off on the connection, so the caller never runs
    one either: the thread checkpoints after every :data:`CHECKPOINT_EVERY`
    commits, on a connection of its own (``open_checkpointer``), so writes on
    the caller's thread go on meanwhile instead of queueing behind it.
    """

    def __init__(
        self,
        open_connection: Callable[[], sqlite3.Connection],
        *,
        begin: Callable[[sqlite3.Cursor], C],
        lost: Callable[[C], None],
        name: str,
        busy_timeout: float,
        inline: bool = False,
        open_checkpointer: Callable[[], sqlite3.Connection] | None = None,
    ) -> None:
        self._open = open_connection
        self._open_checkpointer = open_checkpointer
        self._checkpointer: sqlite3.Connection | None = None
        """The inline mode's checkpoint connection, once opened; the thread's alone."""
        self._begin = begin
        self._lost = lost
        self._busy_ms = int(busy_timeout * 1000)
        self._inline = inline
        self._jobs: queue.SimpleQueue[_Batch | None] = queue.SimpleQueue()
        self._submitted: dict[asyncio.AbstractEventLoop, _Batch] = {}
        """This turn's submissions of each loop, queued by :meth:`flush` at the turn's end."""
        self._conn: sqlite3.Connection | None = None
        """The connection, once the thread opened it; used only with ``_lock`` held."""
        self._cursor: sqlite3.Cursor | None = None
        """A cursor of ``_conn`` kept for BEGIN and COMMIT (cheaper than a new one each)."""
        self._lock = threading.Lock()
        """Held by whoever runs a group (or a checkpoint) on the connection."""
        self._waits = True
        """Whether the connection's busy timeout is ``busy_timeout`` (else 0: inline)."""
        self._count_lock = threading.Lock()
        self._outstanding = 0
        """Operations queued for the thread and not yet answered: while there are
        any, nothing runs inline, so nothing overtakes them."""
        self._commits = 0
        """Commits since the last checkpoint (inline mode)."""
        self._checkpoint_asked = False
        self._stopping = False
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    @property
    def inline(self) -> bool:
        """Whether small operations may run on the caller's thread (``synchronous=NORMAL``)."""
        return self._inline

    def submit(self, operation: Callable[[sqlite3.Connection, C, bool], R]) -> asyncio.Future[R]:
        """Queue ``operation``; the future resolves on the caller's loop after its COMMIT."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        item: _Item = (operation, loop, future)
        batch = self._submitted.get(loop)
        if batch is None:
            batch = self._submitted[loop] = []
            loop.call_soon(self.flush, loop)
        batch.append(item)
        return future

    def flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """Queue what ``loop`` submitted this turn now (it runs by itself after the turn)."""
        batch = self._submitted.pop(loop, None)
        if batch:
            with self._count_lock:
                self._outstanding += len(batch)
            self._jobs.put(batch)

    def stop(self) -> None:
        """Let queued operations finish, then close the connection and end the thread.

        Submissions still waiting for their loop's turn to end are queued first.
        """
        self._closed = True
        for loop in list(self._submitted):
            self.flush(loop)
        self._jobs.put(None)
        self._thread.join()

    # caller's thread (inline) ------------------------------------------------

    def run_inline(self, operation: Callable[[sqlite3.Connection, C, bool], R]) -> R | Queued:
        """Run a small ``operation`` here as a group of one, if nothing would have to
        wait: its result (or its error) after its COMMIT; :data:`QUEUE` if it must be
        submitted instead. Only an operation of a few rows and kilobytes belongs here:
        the caller's event loop is held while it runs.

        The same steps as :meth:`_run_group` for a group of one, without its
        bookkeeping for many, and without a future: the caller gets the answer.
        """
        if not self._inline or self._submitted:
            return QUEUE  # never overtake what this turn submitted
        with self._count_lock:
            if self._outstanding or not self._lock.acquire(blocking=False):
                return QUEUE
        try:
            conn, cursor = self._conn, self._cursor
            if conn is None or cursor is None or self._closed:
                return QUEUE
            if self._waits:
                conn.execute("PRAGMA busy_timeout = 0")
                self._waits = False
            try:
                cursor.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                if _code(e) in (_BUSY, _LOCKED):
                    return QUEUE  # another connection writes: queue for the thread
                raise
            context: C | None = None
            refused = False
            try:
                context = self._begin(cursor)
                try:
                    result = operation(conn, context, False)
                except BaseException:
                    # Still in the transaction: the operation refused, and what the
                    # transaction read stays true. Else SQLite rolled it all back.
                    refused = conn.in_transaction
                    raise
                cursor.execute("COMMIT")  # if it fails, the handler below undoes it all
            except BaseException:
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                if context is not None and (not refused or conn.in_transaction):
                    self._lost(context)
                raise
            self._commits += 1
            if self._commits >= CHECKPOINT_EVERY and not self._checkpoint_asked:
                self._checkpoint_asked = True
                self._jobs.put([])  # an empty batch: the thread checkpoints
            return result
        finally:
            self._lock.release()

    # writer thread -----------------------------------------------------------

    def _serve(self) -> None:
        self._stopping = False
        try:
            while not self._stopping:
                first = self._jobs.get()
                if first is None:
                    break
                if not first:
                    self._checkpoint()
                    continue
                with self._lock:
                    group = first
                    try:
                        conn = self._conn
                        if conn is None:
                            conn = self._conn = self._open()
                            self._cursor = conn.cursor()
                            if self._inline:
                                conn.execute("PRAGMA wal_autocheckpoint = 0")
                        if not self._waits:
                            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
                            self._waits = True
                        assert self._cursor is not None
                        self._cursor.execute("BEGIN IMMEDIATE")
                    except BaseException as e:
                        group.extend(self._drain(len(group)))
                        answers: list[_Answer] = [(item, None, e) for item in group]
                    else:
                        answers = self._run_group(conn, group)
                with self._count_lock:
                    self._outstanding -= len(answers)
                self._answer(answers)
                if self._commits >= CHECKPOINT_EVERY:  # after the answers: not their wait
                    self._checkpoint()
        finally:
            with self._lock:
                if self._checkpointer is not None:
                    self._checkpointer.close()
                    self._checkpointer = None
                if self._conn is not None:
                    self._cursor = None
                    self._conn.close()
                    self._conn = None

    def _checkpoint(self) -> None:
        """Copy the WAL into the database after enough commits (inline mode; the thread's).

        PASSIVE takes no write lock and never waits: what readers still use is
        copied by a later checkpoint. On the checkpoint connection it runs
        without the writer's lock, beside writes on the caller's thread.
        """
        with self._lock:
            if not self._inline or self._commits < CHECKPOINT_EVERY or self._conn is None:
                return  # otherwise SQLite's automatic checkpoint is on
            self._commits = 0
            self._checkpoint_asked = False
            if self._open_checkpointer is None:  # no connection of its own: this one
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                return
        with contextlib.suppress(sqlite3.Error):
            if self._checkpointer is None:
                self._checkpointer = self._open_checkpointer()
            self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _drain(self, size: int) -> list[_Item]:
        """Operations already waiting, while the group is under MAX_GROUP; notes a stop.

        A batch is taken whole, so a group may pass MAX_GROUP by one batch.
        """
        found: list[_Item] = []
        while not self._stopping and size + len(found) < MAX_GROUP:
            try:
                batch = self._jobs.get_nowait()
            except queue.Empty:
                break
            if batch is None:
                self._stopping = True
            else:
                found.extend(batch)  # an empty one (a checkpoint request) adds nothing
        return found

    def _run_group(self, conn: sqlite3.Connection, group: list[_Item]) -> list[_Answer]:
        """Run ``group`` in the open transaction and commit it; one answer per operation.

        Operations that queue while the group runs join it, up to MAX_GROUP:
        the transaction stays open while work keeps arriving. No savepoint per
        operation: each undoes its own writes if it fails (see :data:`Operation`).
        """
        answers: list[_Answer] = []
        context: C | None = None
        try:
            assert self._cursor is not None
            context = self._begin(self._cursor)
            pending = group + self._drain(len(group))
            group[:] = pending
            while pending:
                for item in pending:
                    # The first operation, with nobody else waiting, shares the
                    # transaction with nobody: if it fails, ROLLBACK undoes it alone.
                    alone = len(group) == 1
                    try:
                        result = item[0](conn, context, not alone)
                    except BaseException as e:
                        if not conn.in_transaction:
                            raise  # SQLite rolled the whole transaction back: the group fails
                        if alone:
                            conn.execute("ROLLBACK")
                            return [(item, None, e)]
                        answers.append((item, None, e))  # it undid its own writes
                        continue
                    answers.append((item, result, None))
                pending = self._drain(len(group))
                group.extend(pending)
            assert self._cursor is not None
            self._cursor.execute("COMMIT")
            self._commits += 1
        except BaseException as e:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            if context is not None:
                self._lost(context)
            return [(item, None, e) for item in group]
        return answers

    @staticmethod
    def _answer(answers: list[_Answer]) -> None:
        """Resolve each caller's future on its own loop, one hop per loop."""
        by_loop: dict[
            asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any, BaseException | None]]
        ] = {}
        for (_, loop, future), result, error in answers:
            by_loop.setdefault(loop, []).append((future, result, error))
        for loop, settled in by_loop.items():
            # A closed loop raises RuntimeError: nobody is waiting for the result.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle_all, settled)
