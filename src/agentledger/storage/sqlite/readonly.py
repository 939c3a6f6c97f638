"""Opening a store file for reading only: inspection never changes what it inspects.

A read-only connection opens the file with ``mode=ro`` (SQLite refuses every
write, whatever the file's permissions), so a read-only file can be read and
a file that is not an agentledger database is refused untouched: a 0-byte
file gets no schema, a foreign SQLite file keeps its tables.

A database in WAL mode needs its ``-shm`` file even to be read; SQLite creates
it beside the database, which a read-only directory (a read-only mount, a
directory the user may not write) does not allow. There the file is opened
with ``immutable=1`` instead (no ``-shm``, no locks): safe because no process
can be writing it either, as a writer too must create its ``-wal`` and ``-shm``
there. A ``-wal`` file left beside it (a writer that did not close cleanly)
may hold committed transactions ``immutable=1`` would not see: that file is
refused, saying so, rather than read without them.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import urllib.parse

from agentledger.errors import ValidationError
from agentledger.storage.sqlite import schema
from agentledger.storage.sqlite.connection import OPEN_ERRORS, map_open_error

__all__ = ["check_existing_path", "connect_read_only", "open_checked", "read_only_uri"]


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


def read_only_uri(path: str) -> str:
    """The URI that opens ``path`` for reading: ``mode=ro``, plus ``immutable=1`` when
    its directory cannot be written (see the module's docstring).

    Raises:
        ValidationError: the directory cannot be written and a ``-wal`` file
            beside the database holds transactions not yet in it.
    """
    absolute = os.path.abspath(path)
    uri = f"file:{urllib.parse.quote(absolute)}?mode=ro"
    beside = [os.path.exists(absolute + suffix) for suffix in ("-wal", "-shm")]
    if all(beside) or os.access(os.path.dirname(absolute), os.W_OK):
        return uri
    try:
        pending = os.path.getsize(absolute + "-wal") > 0
    except FileNotFoundError:
        pending = False
    if pending:
        raise ValidationError(
            field="path", expected="a database SQLite can read in a read-only directory",
            got=path,
            message=f"cannot read {path}: its directory is read-only and {path}-wal holds "
            f"transactions not yet in the database (a writer did not close it); SQLite needs "
            f"to create {path}-shm to read them: open it once where it can be written",
        )  # fmt: skip
    return uri + "&immutable=1"


def connect_read_only(path: str, *, busy_timeout: float) -> sqlite3.Connection:
    """A ``mode=ro`` connection in autocommit mode that also refuses writes (``query_only``)."""
    conn = sqlite3.connect(
        read_only_uri(path), uri=True, timeout=busy_timeout, isolation_level=None,
        check_same_thread=False,
    )  # fmt: skip
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
