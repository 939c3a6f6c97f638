"""The reader threads behind SQLiteStore: each owns one connection and runs whole reads.

sqlite3 blocks, so every operation leaves the event loop exactly once, for
the whole operation rather than per statement. Reads queue for a few reader
threads with their own connections: under WAL they see the last commit and
never wait behind the writer (writes go to :mod:`.group`). A queue and a future per call cost
about half of what a hop through the default executor costs.

A reader thread may wait: on the disk for an uncached page, and in SQLite's
busy handler (up to the busy timeout) while another connection recovers the
WAL. A small read that cannot wait first tries the caller's thread instead
(:mod:`.inline_reads`), saving the hop (about 100 µs, most of it waking
threads); whatever it declines comes here.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ConnectionThreads"]

R = TypeVar("R")
Job = Callable[[sqlite3.Connection], Any]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller gave up waiting; the operation still ran
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class ConnectionThreads:
    """``count`` threads taking jobs from one queue, each on a connection of its own.

    A thread opens its connection with ``open_connection`` on its first job
    (a failure to open is that job's error, and the next job tries again).
    """

    def __init__(
        self, open_connection: Callable[[], sqlite3.Connection], *, count: int, name: str
    ) -> None:
        self._open = open_connection
        self._jobs: queue.SimpleQueue[
            tuple[Job, asyncio.AbstractEventLoop, asyncio.Future[Any]] | None
        ] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, job: Callable[[sqlite3.Connection], R]) -> asyncio.Future[R]:
        """Queue ``job``; the future resolves on the caller's loop when it has run."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._jobs.put((job, loop, future))
        return future

    def _serve(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                item = self._jobs.get()
                if item is None:
                    break
                job, loop, future = item
                result: Any = None
                error: BaseException | None = None
                try:
                    if conn is None:
                        conn = self._open()
                    result = job(conn)
                except BaseException as e:
                    error = e
                # A closed loop raises RuntimeError: nobody is waiting for the result.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_settle, future, result, error)
                del item, job, future, result, error
        finally:
            if conn is not None:
                conn.close()

    def stop(self) -> None:
        """Let queued jobs finish, then close the connections and end the threads (blocks)."""
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()
