"""Opening a SQLite database for a store: checks, WAL, migrations and the encryption marker.

Everything here runs once per handle, in a worker thread, before the store
answers its first call; a refusal leaves the file as it was.
"""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING

from agentledger.errors import ValidationError
from agentledger.storage.encryption.binding import bind
from agentledger.storage.file_mode import create_private
from agentledger.storage.sqlite import schema, search
from agentledger.storage.sqlite.connection import OPEN_ERRORS, connect, map_open_error

if TYPE_CHECKING:
    from agentledger.storage.encryption import Encryption

__all__ = ["bind_encryption", "check_read_only_encryption", "enable_wal", "open_writer"]

_ENCRYPTION = "SELECT scheme, vault_id FROM encryption WHERE id = 1"
_HAS_DATA = "SELECT EXISTS (SELECT 1 FROM records) OR EXISTS (SELECT 1 FROM checkpoints)"


def bind_encryption(conn: sqlite3.Connection, encryption: Encryption | None) -> None:
    """[A2] check the database's encryption marker against ``encryption``; record a new one.

    The check and the write are one immediate transaction, so handles opening one new
    file at once record the marker once and each checks the one recorded.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute(_ENCRYPTION).fetchone()
        recorded = None if row is None else (str(row[0]), str(row[1]))
        (has_data,) = conn.execute(_HAS_DATA).fetchone()
        marker = bind(encryption, recorded, has_data=bool(has_data))
        if marker is not None:
            conn.execute("INSERT INTO encryption (id, scheme, vault_id) VALUES (1, ?, ?)", marker)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def enable_wal(conn: sqlite3.Connection, busy_timeout: float) -> str:
    """Switch the file to WAL; the journal mode it is in afterwards.

    The switch needs the file to itself and SQLite answers "locked" at once,
    without its busy handler, while another handle opening the same new file
    holds it: wait for it as the busy timeout would.
    """
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return str(mode)
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() >= deadline:
                raise
            time.sleep(0.005)


def open_writer(
    path: str, busy_timeout: float, synchronous: str, encryption: Encryption | None
) -> tuple[sqlite3.Connection, bool]:
    """The write connection: check the file and schema by reading, then WAL and migrate.

    Also says whether every stored transcript record passed the strict decode.
    """
    try:
        if path != ":memory:" and not path.startswith("file:"):
            create_private(path)  # its WAL and journal files take its mode
        conn = connect(path, busy_timeout=busy_timeout, synchronous=synchronous, read_only=False)
    except OPEN_ERRORS as e:
        raise map_open_error(e, path) from e
    try:
        # Reads first: a file that is not a database, or a schema from a newer
        # agentledger, is refused before anything is written.
        schema.pending(conn)
        mode = enable_wal(conn, busy_timeout)
        if mode.lower() != "wal":
            raise ValidationError(field="path", expected="a file that supports WAL", got=path)
        schema.migrate(conn)
        bind_encryption(conn, encryption)
        search.build_index(conn)  # the records stored before the search index [G1]
        (unchecked,) = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM unchecked_transcripts)"
        ).fetchone()
    except OPEN_ERRORS as e:
        conn.close()
        raise map_open_error(e, path) from e
    except BaseException:
        conn.close()
        raise
    return conn, not unchecked


def check_read_only_encryption(conn: sqlite3.Connection, encryption: Encryption | None) -> None:
    """[A2] a read-only handle checks the marker like a writer, and records nothing."""
    row = conn.execute(_ENCRYPTION).fetchone()
    recorded = None if row is None else (str(row[0]), str(row[1]))
    (has_data,) = conn.execute(_HAS_DATA).fetchone()
    bind(encryption, recorded, has_data=bool(has_data))
