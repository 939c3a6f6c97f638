"""Group commit [B2]: the writer thread runs waiting operations in one transaction.

Every write of a handle queues for its one writer thread. The thread takes
the first waiting operation, opens ``BEGIN IMMEDIATE`` (waiting, across
processes, for SQLite's write lock), then takes every operation that queued
meanwhile, and those that queue while the group runs, up to
:data:`MAX_GROUP`. A refused or failed operation leaves the others' writes
alone: it is told it shares the transaction, and undoes its own writes (a
write of one statement is undone by SQLite itself; more run under a
savepoint, see :func:`.apply.apply_plan`; consecutive plain appends are
written together, see :mod:`.writes`). One ``COMMIT`` (one fsync at
``synchronous=FULL``) then answers the whole group, and only then does any
caller hear its answer: nobody is told "stored" before the commit that
stores it, and a refusal decided on top of an uncommitted write is not
reported before that write is durable either. If the commit (or a statement
that aborts the whole transaction) fails, every operation of the group gets
that error, and none of them wrote.

When the writer is idle, what one event loop submitted in one turn may
instead run on that loop's thread, as one group with the same transaction,
the same COMMIT and the same answers, without the two thread hand-offs,
which cost more than a fast disk's fsync (see :class:`GroupWriter`).

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
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Final, Generic, Literal, TypeVar, cast

__all__ = [
    "CHECKPOINT_EVERY",
    "COMMIT_WINDOW",
    "HERE_COMMIT_SECONDS",
    "MAX_GROUP",
    "MAX_HERE",
    "PROBE_EVERY",
    "QUEUE",
    "GroupWriter",
    "Operation",
    "Queued",
]

R = TypeVar("R")
C = TypeVar("C")

MAX_GROUP = 128
"""Most operations sharing one transaction: a bound on the latency a group adds."""

MAX_HERE = 64
"""Most operations of one turn that may run on the caller's thread as one group
(more queue for the writer thread): a bound on how long they hold its loop."""

HERE_COMMIT_SECONDS = 0.001
"""Caller's-thread groups run only while a COMMIT (its fsync, at ``synchronous=FULL``)
typically takes at most this long: while at most half of the last :data:`COMMIT_WINDOW`
measured took longer. On a disk that syncs slowly they queue for the writer thread, so
the loop runs meanwhile, and the hand-offs, small beside such a sync, buy the overlap of
a group's commit with the next one's submissions. A few slow syncs among fast ones (a
file system's journal commit) do not count as a slow disk: an average would, and send
every lone append through two thread hand-offs that cost more CPU than its sync."""

COMMIT_WINDOW = 8
"""How many of the latest measured COMMITs decide whether commits are fast."""

PROBE_EVERY = 16
"""While commits are slow, every this many groups one runs on the caller's thread all
the same, to measure again (only a caller's-thread COMMIT is measured: on the writer
thread the time would include waiting for the GIL after the sync)."""

CHECKPOINT_EVERY = 256
"""Commits between two checkpoints when SQLite's automatic one is off (inline mode):
about as often as its default of 1,000 WAL pages, for appends of a few pages each."""

_WINDOW_MASK = (1 << COMMIT_WINDOW) - 1

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

_Item = tuple[Operation, "asyncio.AbstractEventLoop | None", "asyncio.Future[Any] | None"]
"""An operation, the loop that submitted it and its future (both None: run_inline's)."""
_Answer = tuple[_Item, Any, "BaseException | None"]
"""An operation, its result and its error (one of the two is None)."""
_Batch = list[_Item]
"""Operations one event loop submitted in one turn, queued as one item."""


Batch = Callable[
    [sqlite3.Connection, C, list[Operation], bool], list[tuple[Any, "BaseException | None"]]
]
"""Runs consecutive operations marked ``batchable`` of a group together: their
connection, the group's context, the operations and whether other writes share the
transaction. Returns an answer (result, error) for each of the first operations it
took, in order: maybe none, and the writer then runs the first by itself. Like an
operation, each failed one has undone its own writes; it raises only when the whole
transaction failed, or when it was given one operation sharing it with nobody."""


class _Requeue(Exception):
    """A caller's-thread group met an operation that must run on the writer thread."""


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

    With ``inline``, the operations one event loop submitted in one turn,
    all marked ``here`` (bounded work) and at most :data:`MAX_HERE` of them,
    run at the end of that turn on the loop's own thread when nothing else is
    queued or running, the file's write lock is free at once, and commits
    are typically fast (:data:`HERE_COMMIT_SECONDS`): one group, with the same
    transaction and the same answers after the same COMMIT (its fsync
    included), without the two thread wake-ups that cost more than the
    operations. Each caller still yields once, so the operations of
    concurrent tasks still meet in one group. It never waits there: the lock
    is only tried (busy timeout 0), and a group that finds it taken queues
    for the thread, which waits for it with ``busy_timeout``. An operation
    that raises one of ``requeue`` there (while ``here_context()`` is
    entered: the encrypted store's deferred vault reads) rolls the whole
    group back, unanswered, and it queues for the thread. :meth:`run_inline`
    runs one operation the same way at once, without a future and without
    yielding. SQLite's automatic checkpoint is off on the connection, so the
    caller never runs one either: the thread checkpoints after every
    :data:`CHECKPOINT_EVERY` commits, on a connection of its own
    (``open_checkpointer``), so writes on the caller's thread go on meanwhile
    instead of queueing behind it.

    ``before_commit(connection)`` runs in each group's transaction right before its
    COMMIT (the search index's batched writes); if it raises, the group fails.
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
        here_context: Callable[[], AbstractContextManager[object]] | None = None,
        requeue: tuple[type[BaseException], ...] = (),
        batch: Batch[C] | None = None,
        before_commit: Callable[[sqlite3.Connection], None] | None = None,
    ) -> None:
        self._open = open_connection
        self._batch = batch
        self._before_commit = before_commit
        self._open_checkpointer = open_checkpointer
        self._begin = begin
        self._lost = lost
        self._busy_ms = int(busy_timeout * 1000)
        self._inline = inline
        self._here_context = here_context
        self._requeue = requeue
        self._jobs: queue.SimpleQueue[_Batch | None] = queue.SimpleQueue()
        self._submitted: dict[asyncio.AbstractEventLoop, _Batch] = {}
        """This turn's submissions of each loop, queued by :meth:`flush` at the turn's end."""
        self._elsewhere: set[asyncio.AbstractEventLoop] = set()
        """Loops whose submissions this turn include one not marked ``here``."""
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
        self._slow_commits = 0
        """One bit per COMMIT measured on the caller's thread, newest lowest, of the last
        COMMIT_WINDOW: set if it took longer than HERE_COMMIT_SECONDS (groups run there
        while at most half are set, else one in PROBE_EVERY)."""
        self.commits_measured = 0
        """COMMITs measured on the caller's thread."""
        self._slow_groups = 0
        """Groups sent to the thread because commits were slow, since the last probe."""
        self._commits = 0
        """Commits since the last checkpoint (inline mode)."""
        self._checkpoint_asked = False
        self.checkpoints = 0
        """Checkpoints the thread has run (inline mode)."""
        self._checkpointing = False
        """The thread waits for the lock to end a checkpoint: groups queue for it meanwhile
        (else the caller's thread, taking the lock again at once, could starve it)."""
        self._stopping = False
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    @property
    def inline(self) -> bool:
        """Whether operations may run on the caller's thread (see the class docstring)."""
        return self._inline

    def submit(
        self, operation: Callable[[sqlite3.Connection, C, bool], R], *, here: bool = False
    ) -> asyncio.Future[R]:
        """Queue ``operation``; the future resolves on the caller's loop after its COMMIT.

        ``here``: its work is bounded (a few rows and kilobytes), so it may run on
        the caller's thread at the end of this turn (see the class docstring).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        item: _Item = (operation, loop, future)
        batch = self._submitted.get(loop)
        if batch is None:
            batch = self._submitted[loop] = []
            loop.call_soon(self._end_of_turn, loop)
        batch.append(item)
        if not here:
            self._elsewhere.add(loop)
        return future

    def flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """Queue what ``loop`` submitted this turn for the thread now (it runs by itself
        after the turn)."""
        self._elsewhere.discard(loop)
        batch = self._submitted.pop(loop, None)
        if batch:
            self._queue(batch)

    def _queue(self, batch: _Batch) -> None:
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

    def _end_of_turn(self, loop: asyncio.AbstractEventLoop) -> None:
        """What ``loop`` submitted this turn: run here as one group if it may, else queue
        it for the thread (on ``loop``'s thread, as the turn's last callback)."""
        batch = self._submitted.pop(loop, None)
        if not batch:
            return
        if loop in self._elsewhere:
            self._elsewhere.discard(loop)
        elif len(batch) <= MAX_HERE and self._fast_or_probe():
            answers = self._run_here(batch)
            if answers is not QUEUE:
                _settle_all([(f, r, e) for (_, _, f), r, e in answers if f is not None])
                return
        self._queue(batch)

    def _fast_or_probe(self) -> bool:
        """Whether commits are fast; while they are not, True once in PROBE_EVERY calls."""
        if self._slow_commits.bit_count() * 2 <= COMMIT_WINDOW:
            return True
        self._slow_groups += 1
        if self._slow_groups < PROBE_EVERY:
            return False
        self._slow_groups = 0
        return True

    def run_inline(self, operation: Callable[[sqlite3.Connection, C, bool], R]) -> R | Queued:
        """Run a small ``operation`` here as a group of one, if nothing would have to
        wait: its result (or its error) after its COMMIT; :data:`QUEUE` if it must be
        submitted instead. Only an operation of a few rows and kilobytes belongs here:
        the caller's event loop is held while it runs, and it does not yield, so it
        meets no other task's operations in a group: for ``synchronous=NORMAL``,
        where a COMMIT does not wait for the disk.
        """
        if self._submitted:
            return QUEUE  # never overtake what this turn submitted
        answers = self._run_here([(operation, None, None)])
        if answers is QUEUE:
            return QUEUE
        ((_, result, error),) = answers
        if error is not None:
            raise error
        return cast(R, result)

    def _run_here(self, group: _Batch) -> list[_Answer] | Queued:
        """``group`` as one transaction on the caller's thread: its answers after the
        COMMIT, or :data:`QUEUE` (nothing done) if it must go to the thread."""
        if not self._inline:
            return QUEUE
        with self._count_lock:
            if self._outstanding or self._checkpointing or not self._lock.acquire(blocking=False):
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
            except sqlite3.Error:
                return QUEUE  # another connection writes (or worse): the thread waits, answers
            try:
                if self._here_context is None:
                    answers = self._run_group(conn, group, here=True)
                else:
                    with self._here_context():
                        answers = self._run_group(conn, group, here=True)
            except _Requeue:
                return QUEUE
            if self._commits >= CHECKPOINT_EVERY and not self._checkpoint_asked:
                self._checkpoint_asked = True
                self._jobs.put([])  # an empty batch: the thread checkpoints
            return answers
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
                if self._conn is not None:
                    self._cursor = None
                    self._conn.close()
                    self._conn = None

    def _checkpoint(self) -> None:
        """Copy the WAL into the database after enough commits (inline mode; the thread's).

        PASSIVE takes no write lock and never waits: what readers still use is
        copied by a later checkpoint. On the checkpoint connection it runs
        without the writer's lock, beside writes on the caller's thread. Those
        writes leave it short of the log's end, and a log never copied to its end
        is never started again from its beginning: it grows, and each commit then
        extends the file, which makes its sync cost a journal commit of the file
        system as well (the counts a checkpoint returns do not show it: they are
        of the log as it was when it began). So a second pass copies what was
        committed meanwhile (a few pages) holding the writer's lock, and the next
        write starts the log over.
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
            checkpointer = self._open_checkpointer()  # for this checkpoint alone
            try:
                checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                self._checkpointing = True  # the caller's thread lets go of the lock
                try:
                    with self._lock:  # what was committed meanwhile; then the log starts over
                        checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                finally:
                    self._checkpointing = False
            finally:
                checkpointer.close()
        self.checkpoints += 1

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

    def _run_group(
        self, conn: sqlite3.Connection, group: list[_Item], *, here: bool = False
    ) -> list[_Answer]:
        """Run ``group`` in the open transaction and commit it; one answer per operation.

        On the thread, operations that queue while the group runs join it, up to
        MAX_GROUP: the transaction stays open while work keeps arriving (``here``,
        on the caller's thread, the group is what it was given). No savepoint per
        operation: each undoes its own writes if it fails (see :data:`Operation`).
        ``here``, an operation raising one of ``requeue`` rolls the whole group back
        and raises :class:`_Requeue`: nobody was answered, the thread runs it again.
        """
        answers: list[_Answer] = []
        context: C | None = None
        try:
            assert self._cursor is not None
            context = self._begin(self._cursor)
            pending = group if here else group + self._drain(len(group))
            group[:] = pending
            if len(pending) == 1 and here:  # a lone operation: the common case
                answer, rolled_back = self._run_alone(conn, context, pending[0])
                if rolled_back:
                    return [answer]
                answers.append(answer)
                pending = []
            while pending:
                index = 0
                solo = -1  # where a batch ended early: that operation runs by itself
                while index < len(pending):
                    # The first operation, with nobody else waiting, shares the
                    # transaction with nobody: if it fails, ROLLBACK undoes it alone.
                    alone = len(group) == 1
                    batch = self._batch
                    if (
                        batch is not None
                        and index != solo
                        and getattr(pending[index][0], "batchable", False)
                    ):
                        end = index + 1
                        while end < len(pending) and getattr(pending[end][0], "batchable", False):
                            end += 1
                        items = pending[index:end]
                        try:
                            done = batch(conn, context, [op for op, _, _ in items], not alone)
                        except BaseException as e:
                            if not conn.in_transaction or not alone:
                                raise  # the group fails
                            conn.execute("ROLLBACK")
                            return [(items[0], None, e)]
                        answers.extend(
                            (item, result, error)
                            for item, (result, error) in zip(items, done, strict=False)
                        )
                        index += len(done)
                        if done:
                            solo = index if len(done) < len(items) else -1
                            continue
                    item = pending[index]
                    index += 1
                    try:
                        result = item[0](conn, context, not alone)
                    except BaseException as e:
                        if here and isinstance(e, self._requeue):
                            raise _Requeue from e
                        if not conn.in_transaction:
                            raise  # SQLite rolled the whole transaction back: the group fails
                        if alone:
                            conn.execute("ROLLBACK")
                            return [(item, None, e)]
                        answers.append((item, None, e))  # it undid its own writes
                        continue
                    answers.append((item, result, None))
                if here:
                    break
                pending = self._drain(len(group))
                group.extend(pending)
            assert self._cursor is not None
            if self._before_commit is not None:
                self._before_commit(conn)  # its failure fails the group, like the COMMIT's
            started = time.perf_counter()
            self._cursor.execute("COMMIT")
            if here:
                slow = time.perf_counter() - started > HERE_COMMIT_SECONDS
                self._slow_commits = ((self._slow_commits << 1) | slow) & _WINDOW_MASK
                self.commits_measured += 1
            self._commits += 1
        except BaseException as e:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            if context is not None:
                self._lost(context)
            if isinstance(e, _Requeue):
                raise
            return [(item, None, e) for item in group]
        return answers

    def _run_alone(self, conn: sqlite3.Connection, context: C, item: _Item) -> tuple[_Answer, bool]:
        """What :meth:`_run_group`'s loop does for a group of one operation on the caller's
        thread: its answer, and whether it failed and the transaction was rolled back (it
        raises for the group to fail: SQLite rolled the transaction back, or ``requeue``)."""
        operation = item[0]
        batch = self._batch
        if batch is not None and getattr(operation, "batchable", False):
            try:
                done = batch(conn, context, [operation], False)
            except BaseException as e:
                if not conn.in_transaction:
                    raise  # the group fails
                conn.execute("ROLLBACK")
                return (item, None, e), True
            if done:
                result, error = done[0]
                return (item, result, error), False
        try:
            result = operation(conn, context, False)
        except BaseException as e:
            if isinstance(e, self._requeue):
                raise _Requeue from e
            if not conn.in_transaction:
                raise  # SQLite rolled the whole transaction back: the group fails
            conn.execute("ROLLBACK")
            return (item, None, e), True
        return (item, result, None), False

    @staticmethod
    def _answer(answers: list[_Answer]) -> None:
        """Resolve each caller's future on its own loop, one hop per loop."""
        by_loop: dict[
            asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any, BaseException | None]]
        ] = {}
        for (_, loop, future), result, error in answers:
            assert loop is not None  # the thread runs submitted operations only
            assert future is not None
            by_loop.setdefault(loop, []).append((future, result, error))
        for loop, settled in by_loop.items():
            # A closed loop raises RuntimeError: nobody is waiting for the result.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle_all, settled)
