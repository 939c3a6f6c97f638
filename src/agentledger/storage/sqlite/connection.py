"""Opening SQLite connections with the store's pragmas, and mapping sqlite3 errors.

Every pragma is set once per connection, never per call. No raw ``sqlite3``
exception leaves a public method: :func:`map_error` turns each into the error
a caller can act on, chosen by SQLite's result code rather than its message.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from typing import Literal

from agentledger.errors import AgentledgerError, CorruptRecordError, TransientError, ValidationError

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "OPEN_ERRORS",
    "Durability",
    "check_busy_timeout",
    "check_durability",
    "check_path",
    "connect",
    "map_error",
    "map_open_error",
]

Durability = Literal["full", "normal"]
"""``full``: every commit is on disk when it returns. ``normal``: see SQLiteStore."""

DEFAULT_BUSY_TIMEOUT = 5.0
"""Seconds a write waits for another writer's lock before TransientError."""

_SYNCHRONOUS = {"full": "FULL", "normal": "NORMAL"}

# Primary result codes (https://sqlite.org/rescode.html).
_ERROR, _PERM, _BUSY, _LOCKED, _READONLY = 1, 3, 5, 6, 8
_CORRUPT, _CANTOPEN, _SCHEMA, _TOOBIG, _CONSTRAINT = 11, 14, 17, 18, 19
_MISMATCH, _AUTH, _FORMAT, _NOTADB = 20, 23, 24, 26
_DAMAGED = frozenset({_ERROR, _CORRUPT, _SCHEMA, _CONSTRAINT, _MISMATCH, _FORMAT, _NOTADB})
"""Codes that mean the file or its schema does not hold what the store wrote."""


def check_durability(durability: object) -> str:
    """The ``PRAGMA synchronous`` value for a durability name."""
    if not isinstance(durability, str) or durability not in _SYNCHRONOUS:
        raise ValidationError(field="durability", expected="'full' or 'normal'", got=durability)
    return _SYNCHRONOUS[durability]


def check_busy_timeout(busy_timeout: object) -> float:
    """A busy timeout in seconds: a non-negative number."""
    if (
        not isinstance(busy_timeout, int | float)
        or isinstance(busy_timeout, bool)
        or not busy_timeout >= 0
    ):
        raise ValidationError(
            field="busy_timeout", expected="a number of seconds >= 0", got=busy_timeout
        )
    return float(busy_timeout)


def check_path(path: str | os.PathLike[str]) -> str:
    """A path SQLite can open read-write as a shared file, checked before any I/O.

    A file with no write permission bit is refused even when the process could
    write it anyway (as root): the file was marked read-only, and the store
    would write to it.
    """
    name = os.fspath(path)
    if not isinstance(name, str) or name in ("", ":memory:") or name.startswith("file:"):
        raise ValidationError(field="path", expected="a database file path", got=name)
    if os.path.isdir(name):
        raise ValidationError(field="path", expected="a file, not a directory", got=name)
    if os.path.exists(name):
        mode = os.stat(name).st_mode
        if not stat.S_ISREG(mode):
            raise ValidationError(field="path", expected="a regular file", got=name)
        if not os.access(name, os.R_OK | os.W_OK) or not mode & 0o222:
            raise ValidationError(field="path", expected="a writable database file", got=name)
    else:
        parent = os.path.dirname(os.path.abspath(name))
        if not os.path.isdir(parent):
            raise ValidationError(
                field="path", expected="a path in an existing directory", got=name
            )
    return name


def connect(
    path: str, *, busy_timeout: float, synchronous: str, read_only: bool
) -> sqlite3.Connection:
    """A connection in autocommit mode (explicit BEGIN/COMMIT) with the store's pragmas.

    ``read_only`` connections refuse writes (``query_only``): readers can never
    take the write lock by mistake.
    """
    conn = sqlite3.connect(
        path,
        timeout=busy_timeout,  # sqlite3_busy_timeout: SQLite's own wait-and-retry
        isolation_level=None,
        check_same_thread=False,
        cached_statements=256,
    )
    try:
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        if read_only:
            conn.execute("PRAGMA query_only = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def _code(error: sqlite3.Error) -> int:
    return int(getattr(error, "sqlite_errorcode", -1)) & 0xFF


def _undecodable(error: sqlite3.Error) -> bool:
    """sqlite3's own error for stored text that is not UTF-8: damage, like SQLITE_CORRUPT."""
    return str(error).startswith("Could not decode to UTF-8")


def map_error(error: sqlite3.Error, operation: str) -> AgentledgerError:
    """The agentledger error for a sqlite3 error raised while doing ``operation``.

    ``SQLITE_BUSY``/``SQLITE_LOCKED`` reach us only once the busy timeout has
    expired (every write starts with ``BEGIN IMMEDIATE``, so SQLite's busy
    handler always runs): :class:`TransientError`, retry later. A damaged
    file, a missing table or a broken constraint means the file does not hold
    what the store wrote: :class:`CorruptRecordError`, permanent. A value
    over SQLite's size limit is the caller's: :class:`ValidationError`. Any
    other failure (disk full, I/O error, out of memory) may pass:
    :class:`TransientError`.
    """
    code = _code(error)
    if code in (_BUSY, _LOCKED):
        return TransientError(
            f"database is busy (busy timeout expired): {error}", operation=operation
        )
    if code in _DAMAGED or isinstance(error, sqlite3.IntegrityError) or _undecodable(error):
        return CorruptRecordError(run_id="", record_id="", reason=f"{operation}: {error}")
    if code == _TOOBIG:
        return ValidationError(
            field=operation, expected="values within SQLite's size limit", got=str(error)
        )
    return TransientError(f"{type(error).__name__}: {error}", operation=operation)


OPEN_ERRORS = (sqlite3.Error, UnicodeDecodeError)
"""What a call into sqlite3 raises while opening a file: SQLite's errors, and the
``UnicodeDecodeError`` sqlite3 raises instead when SQLite's message quotes bytes
of a damaged schema that are not UTF-8 (see :func:`map_open_error`)."""


def map_open_error(error: sqlite3.Error | UnicodeDecodeError, path: str) -> AgentledgerError:
    """The error for a failure while opening ``path``, naming it: a bad file is the
    caller's to fix, a damaged one is :class:`CorruptRecordError`."""
    if isinstance(error, UnicodeDecodeError):
        # sqlite3 could not decode SQLite's error message: it quotes the damaged
        # schema text (for instance "malformed database schema (runs) - near ...").
        quoted = error.object if isinstance(error.object, bytes) else str(error).encode()
        message = bytes(quoted).decode("utf-8", "backslashreplace")
        return CorruptRecordError(run_id="", record_id="", reason=f"open {path}: {message}")
    code = _code(error)
    if code == _NOTADB:
        return ValidationError(field="path", expected="an SQLite database file", got=path)
    if code in (_READONLY, _PERM, _AUTH):
        return ValidationError(field="path", expected="a writable database file", got=path)
    if code == _CANTOPEN:
        return ValidationError(field="path", expected="a database file SQLite can open", got=path)
    mapped = map_error(error, "open")
    if isinstance(mapped, CorruptRecordError):
        return CorruptRecordError(run_id="", record_id="", reason=f"open {path}: {error}")
    if isinstance(mapped, TransientError):
        return TransientError(f"{path}: {type(error).__name__}: {error}", operation="open")
    return mapped
