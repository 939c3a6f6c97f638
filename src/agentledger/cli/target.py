"""What a command works on: a SQLite file, a PostgreSQL DSN or a store service URL.

:func:`open_store` is the one place that turns ``--db`` into an open store.
Read commands open it read-only: a SQLite file with ``mode=ro`` (a read-only
file can be read; a file that is not an agentledger database is refused
unchanged). A PostgreSQL database is never migrated by the CLI. No command
but ``demo`` creates a database.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import os
import sqlite3
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

from agentledger.errors import ValidationError
from agentledger.storage.encryption.config import configured_encryption

if TYPE_CHECKING:
    from agentledger.storage.protocol import SessionAdmin, Store

__all__ = ["AdminStore", "Kind", "kind_of", "open_store", "opened", "sqlite_path"]

TOKEN_VARIABLE = "AGENTLEDGER_TOKEN"
"""The environment variable holding the bearer token for a service URL."""

_POSTGRES = ("postgres://", "postgresql://")
_SERVICE = ("http://", "https://")
_SQLITE = "sqlite:///"

Kind = str
"""``"sqlite"``, ``"postgres"`` or ``"service"``."""


if TYPE_CHECKING:

    class AdminStore(Store, SessionAdmin, Protocol):
        """A store with session administration that can be closed: what commands use."""

        async def close(self) -> None: ...

else:
    AdminStore = Any


def kind_of(target: str) -> Kind:
    """Which backend ``target`` names (a path is SQLite)."""
    if target.startswith(_SERVICE):
        return "service"
    if target.startswith(_POSTGRES) or "dbname=" in target or "host=" in target:
        return "postgres"
    return "sqlite"


def sqlite_path(target: str) -> str:
    """The file of a SQLite target (a path, or ``sqlite:///path``)."""
    return target.removeprefix(_SQLITE) if target != _SQLITE else target


async def open_store(
    target: str, *, read_only: bool, keyring: str | None = None, vault: str | None = None
) -> AdminStore:
    """Open the store ``target`` names, for reads only or for writes too.

    An encrypted database [A2] needs its keyring and vault: ``keyring`` and
    ``vault`` (files), else the environment (see :mod:`agentledger.storage.encryption.config`).

    Raises:
        ValidationError: an empty target, a missing file or one that is not an
            agentledger database, a service URL while ``agentledger.service``
            is not installed.
        TransientError: the database or service cannot be reached.
    """
    if not target:
        raise ValidationError(
            field="--db", expected="a SQLite path, a PostgreSQL DSN or a service URL", got=target
        )
    kind = kind_of(target)
    if kind == "service":
        return await _open_service(target)
    if kind == "postgres":
        from agentledger.storage.postgres import PostgresStore

        check_dsn(target)
        quiet_pool_logs()
        # The CLI never migrates but on `agentledger migrate` (workers and deploy steps
        # do): a database that needs it is refused, not changed.
        try:
            return await PostgresStore.open(
                target,
                min_size=1,
                max_size=4,
                migrate=False,
                encryption=configured_encryption(keyring, vault),
            )
        except ValidationError as e:
            raise _unmigrated(e, target) from e
    from agentledger.storage.sqlite import SQLiteStore

    path = sqlite_path(target)
    if not await asyncio.to_thread(os.path.exists, path):
        raise ValidationError(
            field="--db",
            expected="an existing agentledger database",
            got=path,
            message=f"no database at {path} (run `agentledger demo` first, or pass --db)",
        )
    # Opening read-only first refuses an empty, foreign or damaged file before any write.
    encryption = configured_encryption(keyring, vault)  # else the environment, like the token
    try:
        reader = await SQLiteStore.open_read_only(path, encryption=encryption)
    except ValidationError as e:
        raise _unmigrated(e, path) from e
    if read_only:
        return reader
    await reader.close()
    return await SQLiteStore.open(path, encryption=encryption)


_SIDECARS = ("-wal", "-shm")
"""The files SQLite keeps beside a database in WAL mode while it is open."""


@contextlib.asynccontextmanager
async def opened(
    target: str, *, read_only: bool, keyring: str | None = None, vault: str | None = None
) -> AsyncIterator[AdminStore]:
    """:func:`open_store`, closed on exit; a read leaves no ``-wal``/``-shm`` it created.

    A read-only SQLite connection cannot remove the WAL files it made (SQLite
    removes them when the last connection closes, if that connection may write
    the file); so once the store is closed, files that were not there before are
    removed the same way: one read on a plain connection, which SQLite closes
    with its usual checkpoint of an empty log. A file the user cannot write, or a
    database another process has open, keeps them (that is SQLite's choice).
    """
    path = sqlite_path(target) if read_only and kind_of(target) == "sqlite" else ""
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


def _unmigrated(error: ValidationError, target: str) -> ValidationError:
    """A database whose schema is behind this code's: say which command migrates it."""
    from agentledger.cli.app import display

    if error.field != "schema_version" or not isinstance(error.got, int):
        return error
    import re

    latest = re.search(r"\d+", error.expected)
    if latest is None:
        return error
    count = int(latest.group()) - error.got
    return ValidationError(
        field="schema_version",
        expected=error.expected,
        got=error.got,
        message=(
            f"{display(target)} needs migrating: {count} migration{'s' if count > 1 else ''} "
            f"pending (schema version {error.got}, this agentledger's is {latest.group()}); "
            f"run `agentledger migrate --db {_quoted(display(target))}`"
        ),
    )


def _quoted(text: str) -> str:
    import shlex

    return shlex.quote(text)


def check_dsn(dsn: str) -> None:
    """Refuse a malformed PostgreSQL DSN in one clean line (libpq's own reason, trimmed).

    Raises:
        ValidationError: ``field="--db"``, libpq cannot parse ``dsn``.
    """
    import psycopg
    from psycopg import conninfo

    from agentledger.cli.app import display

    try:
        conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as e:
        reason = " ".join(str(e).split())
        raise ValidationError(
            field="--db",
            expected="a libpq connection string or a postgresql:// URI",
            got=display(dsn),
            message=f"not a valid PostgreSQL DSN ({reason}): {display(dsn)}",
        ) from None


def quiet_pool_logs() -> None:
    """Keep psycopg's pool from logging what the command reports itself (a refusal once)."""
    import logging

    logger = logging.getLogger("psycopg")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())


async def _open_service(url: str) -> AdminStore:
    """A ``StoreClient`` for ``url``, with the token from ``$AGENTLEDGER_TOKEN``."""
    try:
        service = importlib.import_module("agentledger.service")
    except ImportError as e:
        raise ValidationError(
            field="--db",
            expected="a SQLite path or a PostgreSQL DSN",
            got=url,
            message=(
                f"{url}: a service URL needs agentledger.service, which this "
                f"installation does not have ({e})"
            ),
        ) from e
    client: Any = service.StoreClient(url, token=os.environ.get(TOKEN_VARIABLE, ""))
    if inspect.isawaitable(client):
        client = await client
    store: AdminStore = client
    return store
