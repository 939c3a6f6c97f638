"""Group commit [B2]: the writer thread runs waiting operations in one transaction.

Every write of a handle queues for its one writer thread. The thread takes
the first waiting operation, opens ``BEGIN IMMEDIATE`` (waiting, across
processes, for SQLite's write lock), then takes every operation that queued
meanwhile, and those that queue while the group runs, up to
:data:`MAX_GROUP`. Each runs under its own ``SAVEPOINT``: a refused or failed
operation rolls back to it and leaves the others' writes alone. One
``COMMIT`` (one fsync at ``synchronous=FULL``) then answers the whole group,
and only then does any caller hear its answer: nobody is told
"stored" before the commit that stores it, and a refusal decided on top of
an uncommitted write is not reported before that write is durable either.
If the commit (or a statement that aborts the whole transaction) fails,
every operation of the group gets that error, and none of them wrote.

Operations submitted in one turn of an event loop reach the thread together,
as one queue item: waking a thread costs tens of microseconds, and a writer
woken by the first of sixteen submissions would contend for the GIL with the
loop still submitting the other fifteen.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["MAX_GROUP", "GroupWriter", "Operation"]

R = TypeVar("R")
C = TypeVar("C")

MAX_GROUP = 128
"""Most operations sharing one transaction: a bound on the latency a group adds."""

Operation = Callable[[sqlite3.Connection, Any], Any]
"""Runs one whole operation inside the open transaction; may raise to refuse it.

Its second argument is the writer's per-transaction context (what
``begin`` returned); it returns the caller's result.
"""

_Item = tuple[Operation, asyncio.AbstractEventLoop, "asyncio.Future[Any]"]
_Batch = list[_Item]
"""Operations one event loop submitted in one turn, queued as one item."""


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

    ``begin(conn)`` is called right after each ``BEGIN IMMEDIATE`` and returns
    the context handed to every operation of the group (the row cache);
    ``lost(context)`` is called when a group's transaction fails, so nothing
    learned inside it survives.
    """

    def __init__(
        self,
        open_connection: Callable[[], sqlite3.Connection],
        *,
        begin: Callable[[sqlite3.Connection], C],
        lost: Callable[[C], None],
        name: str,
    ) -> None:
        self._open = open_connection
        self._begin = begin
        self._lost = lost
        self._jobs: queue.SimpleQueue[_Batch | None] = queue.SimpleQueue()
        self._submitted: dict[asyncio.AbstractEventLoop, _Batch] = {}
        """This turn's submissions of each loop, queued by :meth:`flush` at the turn's end."""
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, operation: Callable[[sqlite3.Connection, C], R]) -> asyncio.Future[R]:
        """Queue ``operation``; the future resolves on the caller's loop after its COMMIT."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        batch = self._submitted.get(loop)
        if batch is None:
            batch = self._submitted[loop] = []
            loop.call_soon(self.flush, loop)
        batch.append((operation, loop, future))
        return future

    def flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """Queue what ``loop`` submitted this turn now (it runs by itself after the turn)."""
        batch = self._submitted.pop(loop, None)
        if batch:
            self._jobs.put(batch)

    def stop(self) -> None:
        """Let queued operations finish, then close the connection and end the thread.

        Submissions still waiting for their loop's turn to end are queued first.
        """
        for loop in list(self._submitted):
            self.flush(loop)
        self._jobs.put(None)
        self._thread.join()

    # writer thread -----------------------------------------------------------

    def _serve(self) -> None:
        conn: sqlite3.Connection | None = None
        self._stopping = False
        try:
            while not self._stopping:
                first = self._jobs.get()
                if first is None:
                    break
                group = first
                try:
                    if conn is None:
                        conn = self._open()
                    conn.execute("BEGIN IMMEDIATE")
                except BaseException as e:
                    group.extend(self._drain(len(group)))
                    self._answer([(item, None, e) for item in group])
                    continue
                self._answer(self._run_group(conn, group))
        finally:
            if conn is not None:
                conn.close()

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
                found.extend(batch)
        return found

    def _run_group(
        self, conn: sqlite3.Connection, group: list[_Item]
    ) -> list[tuple[_Item, Any, BaseException | None]]:
        """Run ``group`` in the open transaction and commit it; one answer per operation.

        Operations that queue while the group runs join it, up to MAX_GROUP:
        the transaction stays open while work keeps arriving.
        """
        answers: list[tuple[_Item, Any, BaseException | None]] = []
        context: C | None = None
        try:
            context = self._begin(conn)
            pending = group + self._drain(len(group))
            group[:] = pending
            while pending:
                for item in pending:
                    # The first operation, with nobody else waiting, needs no
                    # savepoint: if it fails, ROLLBACK undoes it alone.
                    alone = len(group) == 1
                    if not alone:
                        conn.execute("SAVEPOINT op")
                    try:
                        result = item[0](conn, context)
                    except BaseException as e:
                        if not conn.in_transaction:
                            raise  # SQLite rolled the whole transaction back: the group fails
                        if alone:
                            conn.execute("ROLLBACK")
                            return [(item, None, e)]
                        conn.execute("ROLLBACK TO op")
                        conn.execute("RELEASE op")
                        answers.append((item, None, e))
                        continue
                    if not alone:
                        conn.execute("RELEASE op")
                    answers.append((item, result, None))
                pending = self._drain(len(group))
                group.extend(pending)
            conn.execute("COMMIT")
        except BaseException as e:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            if context is not None:
                self._lost(context)
            return [(item, None, e) for item in group]
        return answers

    @staticmethod
    def _answer(answers: list[tuple[_Item, Any, BaseException | None]]) -> None:
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
