"""Opening a command's :class:`~agentledger.target.Target` the CLI's way.

Read commands open it read-only: a SQLite file with ``mode=ro`` (a read-only
file can be read; a file that is not an agentledger database is refused
unchanged). No command but ``demo`` creates a database, and none but
``migrate`` migrates one; parsing, defaults and masking live in
:mod:`agentledger.target`, shared with ``serve`` and ``worker``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from agentledger.storage.encryption.config import configured_encryption

if TYPE_CHECKING:
    from agentledger.storage.protocol import AdminStore
    from agentledger.target import Target

__all__ = ["open_store", "opened", "quiet_pool_logs"]

_CLI_POOL = 4
"""PostgreSQL connections a command opens at most."""


async def open_store(
    target: Target, *, read_only: bool, keyring: str | None = None, vault: str | None = None
) -> AdminStore:
    """Open ``target`` for reads only or for writes too; never create nor migrate it.

    An encrypted database [A2] needs its keyring and vault: ``keyring`` and
    ``vault`` (files), else the environment (see :mod:`agentledger.storage.encryption.config`).

    Raises:
        ValidationError: a missing file or one that is not an agentledger
            database, one that needs migrating, a service URL while
            ``agentledger.service`` is not installed.
        TransientError: the database or service cannot be reached.
    """
    if target.kind == "postgres":
        quiet_pool_logs()
    return await target.open(
        read_only=read_only,
        create=False,
        encryption=configured_encryption(keyring, vault) if target.kind != "service" else None,
        pool_size=_CLI_POOL,
    )


_SIDECARS = ("-wal", "-shm")
"""The files SQLite keeps beside a database in WAL mode while it is open."""


@contextlib.asynccontextmanager
async def opened(
    target: Target, *, read_only: bool, keyring: str | None = None, vault: str | None = None
) -> AsyncIterator[AdminStore]:
    """:func:`open_store`, closed on exit; a read leaves no ``-wal``/``-shm`` it created.

    A read-only SQLite connection cannot remove the WAL files it made (SQLite
    removes them when the last connection closes, if that connection may write
    the file); so once the store is closed, files that were not there before are
    removed the same way: one read on a plain connection, which SQLite closes
    with its usual checkpoint of an empty log. A file the user cannot write, or a
    database another process has open, keeps them (that is SQLite's choice).
    """
    path = target.path if read_only and target.kind == "sqlite" else ""
    new = await asyncio.to_thread(_absent_sidecars, path) if path else False
    try:
        store = await open_store(target, read_only=read_only, keyring=keyring, vault=vault)
        try:
            yield store
        finally:
            await store.close()
    finally:
        if new:
            await asyncio.to_thread(_tidy, path)


def _absent_sidecars(path: str) -> bool:
    return not any(os.path.exists(path + suffix) for suffix in _SIDECARS)


def _tidy(path: str) -> None:
    if _absent_sidecars(path) or not os.access(path, os.W_OK):
        return
    with contextlib.suppress(sqlite3.Error):
        conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            conn.close()


def quiet_pool_logs() -> None:
    """Keep psycopg's pool from logging what the command reports itself (a refusal once)."""
    import logging

    logger = logging.getLogger("psycopg")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
