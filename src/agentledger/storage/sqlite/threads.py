"""The threads behind SQLiteStore: one writer thread, a pool of reader connections.

sqlite3 blocks, so every operation leaves the event loop exactly once, for
the whole operation rather than per statement. Writes queue for a dedicated
thread that owns the write connection (one transaction at a time, in call
order). Reads run on the default executor with their own connections: under
WAL they see the last commit and never wait behind the writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ReaderPool", "WriterThread"]

R = TypeVar("R")
Job = Callable[[sqlite3.Connection], Any]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller gave up waiting; the operation still ran
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class WriterThread:
    """A thread owning one connection, running submitted jobs one by one, in order."""

    def __init__(self, conn: sqlite3.Connection, name: str) -> None:
        self._conn = conn
        self._jobs: queue.SimpleQueue[
            tuple[Job, asyncio.AbstractEventLoop, asyncio.Future[Any]] | None
        ] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[sqlite3.Connection], R]) -> asyncio.Future[R]:
        """Queue ``job``; the future resolves on the caller's loop when it has run."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._jobs.put((job, loop, future))
        return future

    def _serve(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                break
            job, loop, future = item
            result: Any = None
            error: BaseException | None = None
            try:
                result = job(self._conn)
            except BaseException as e:
                error = e
            # A closed loop raises RuntimeError: nobody is waiting for the result.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, result, error)
            del item, job, future, result, error
        self._conn.close()

    def stop(self) -> None:
        """Let queued jobs finish, then close the connection and end the thread (blocks)."""
        self._jobs.put(None)
        self._thread.join()


class ReaderPool:
    """Read connections, opened on demand and reused; one per concurrent read."""

    def __init__(self, open_connection: Callable[[], sqlite3.Connection]) -> None:
        self._open = open_connection
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    def run(self, job: Callable[[sqlite3.Connection], R]) -> R:
        """Run ``job`` on a free connection in this thread (call via the executor)."""
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._open()
        try:
            return job(conn)
        finally:
            with self._lock:
                keep = not self._closed
                if keep:
                    self._idle.append(conn)
            if not keep:
                conn.close()

    def close(self) -> None:
        """Close idle connections now and busy ones when their read ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
