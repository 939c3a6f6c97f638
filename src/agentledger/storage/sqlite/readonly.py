"""Opening a store file for reading only: inspection never changes what it inspects.

A read-only connection opens the file with ``mode=ro`` (SQLite refuses every
write, whatever the file's permissions), so a read-only file can be read and
a file that is not an agentledger database is refused untouched: a 0-byte
file gets no schema, a foreign SQLite file keeps its tables.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import urllib.parse

from agentledger.errors import ValidationError
from agentledger.storage.sqlite import schema
from agentledger.storage.sqlite.connection import OPEN_ERRORS, map_open_error

__all__ = ["check_existing_path", "connect_read_only", "open_checked"]


def check_existing_path(path: str | os.PathLike[str]) -> str:
    """An existing regular file to read; nothing is created."""
    name = os.fspath(path)
    if not isinstance(name, str) or name in ("", ":memory:") or name.startswith("file:"):
        raise ValidationError(field="path", expected="a database file path", got=name)
    try:
        mode = os.stat(name).st_mode
    except FileNotFoundError:
        raise ValidationError(
            field="path",
            expected="an existing agentledger database",
            got=name,
            message=f"no database at {name}",
        ) from None
    except OSError as e:
        raise ValidationError(field="path", expected="a readable file", got=name) from e
    if not stat.S_ISREG(mode):
        raise ValidationError(field="path", expected="a regular file", got=name)
    return name


def connect_read_only(path: str, *, busy_timeout: float) -> sqlite3.Connection:
    """A ``mode=ro`` connection in autocommit mode that also refuses writes (``query_only``)."""
    uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
    conn = sqlite3.connect(
        uri, uri=True, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute("PRAGMA query_only = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def open_checked(path: str, *, busy_timeout: float) -> sqlite3.Connection:
    """A read-only connection to ``path``, once it is known to hold this agentledger's schema.

    Raises:
        ValidationError: not an SQLite file, no agentledger schema (a 0-byte or
            foreign file), or a schema older or newer than this code's.
    """
    try:
        conn = connect_read_only(path, busy_timeout=busy_timeout)
    except OPEN_ERRORS as e:
        raise map_open_error(e, path) from e
    try:
        if not schema.applied(conn):
            raise ValidationError(
                field="path",
                expected="an agentledger database",
                got=path,
                message=f"{path} is not an agentledger database (it has no agentledger schema)",
            )
        refusal = schema.behind(conn, path)
        if refusal is not None:
            raise refusal
    except OPEN_ERRORS as e:
        conn.close()
        raise map_open_error(e, path) from e
    except BaseException:
        conn.close()
        raise
    return conn
