"""Small reads on the caller's thread: the read-side twin of the inline small appends.

A hop from the event loop to a reader thread and back costs about 100 µs on a
small machine, more than a bounded read itself (a run row, a session row, the
last few records of a run). So a read that is bounded and cannot wait runs on
the caller's thread, on a connection of its own; anything else goes to the
reader threads (:mod:`.threads`) as before. ``SQLiteStore`` says which reads
qualify: ``load_run``, ``load_session``, ``load_session_status``,
``load_tool_result``, run pages of at most :data:`MAX_RECORDS` records, and
the transcript of a run whose log is no longer than that (replay reads it
every planner turn). Each of them also fetches at most :data:`MAX_BYTES` of
large values (a page's payloads, a run's checkpoint, a saved tool result),
measured with ``length()`` in the statement that would fetch them, which
reads no overflow page: more declines the read.

Such a read never waits:

- its connection's busy timeout is 0: ``SQLITE_BUSY`` (another process
  recovering the WAL, say) declines at once, where a reader thread waits for it;
- vault reads are deferred (:mod:`..encryption.deferral`): a data key not in
  memory declines, and the reader thread's run of the read loads it;
- the connection is tried, never waited for: event loops in several threads
  sharing one handle (a ``SyncStore`` wrapping a store opened on another
  loop, say) take turns, and a read that finds it taken declines.

A declined read has changed nothing (reads never write) and runs again on
the reader threads. What this cannot rule out: a page that is not in the
operating system's cache is read from the disk (a bounded read touches a few
pages), SQLite's own retries, without the busy handler, while the WAL index
changes under a reader (normally for microseconds), and on an encrypted store
the one ``pread`` of the vault's header with which every sealer call checks
for erasures (as on PostgreSQL, whose sealer always runs on the loop).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import TypeVar

from agentledger.storage.encryption.deferral import KeyNeeded, deferring_vault_reads

__all__ = ["MAX_BYTES", "MAX_RECORDS", "Declined", "InlineReads"]

R = TypeVar("R")

MAX_RECORDS = 100
"""Largest run page (or whole run log) read on the caller's thread (the default page size)."""

MAX_BYTES = 256 * 1024
"""Most bytes of payloads, checkpoint or tool result one inline read may fetch."""

# Primary result codes (https://sqlite.org/rescode.html).
_BUSY, _LOCKED = 5, 6


class Declined(Exception):
    """This read must not run on the caller's thread: it would wait, or fetch too much."""


class InlineReads:
    """One read connection (busy timeout 0) that callers' threads take in turn, never waiting."""

    def __init__(self, conn: sqlite3.Connection, *, encrypted: bool) -> None:
        self._conn = conn
        self._encrypted = encrypted
        """Whether reads may need data keys (only then are vault reads deferred)."""
        self._lock = threading.Lock()
        """Held while a read runs on the connection; only ever tried, except by close."""
        self._closed = False

    def run(self, job: Callable[[sqlite3.Connection], R]) -> R:
        """Run ``job`` here and now, or raise :class:`Declined` having changed nothing.

        Errors other than a wait (a refusal, damage, a disk error) are the read's
        answer, as they would be on a reader thread.
        """
        if not self._lock.acquire(blocking=False):
            raise Declined  # another thread's loop is reading on it
        try:
            if self._closed:
                raise Declined
            if not self._encrypted:
                return job(self._conn)
            with deferring_vault_reads():
                return job(self._conn)
        except KeyNeeded:
            raise Declined from None
        except sqlite3.Error as e:
            if int(getattr(e, "sqlite_errorcode", -1)) & 0xFF in (_BUSY, _LOCKED):
                raise Declined from None
            raise
        finally:
            self._lock.release()

    def close(self) -> None:
        """Close the connection once no read runs on it; later reads decline."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
