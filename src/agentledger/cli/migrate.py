"""``agentledger migrate``: bring a database's schema up to this agentledger's version.

The other commands never migrate (reading never writes); workers and
``serve`` migrate when they open a database. This is the deploy step, or the
first step on a fresh PostgreSQL database: each migration is applied with
its row in ``_agentledger_migrations`` in one transaction, so running it
again, or from several hosts at once, applies each migration exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from agentledger.cli.app import STORE_HELP, Settings, run, settings_options

if TYPE_CHECKING:
    from agentledger.target import Target

__all__ = ["Migrated", "migrate"]


@dataclass(frozen=True)
class Migrated:
    """What ``migrate`` did: the versions it applied and the schema version now."""

    applied: list[int]
    schema_version: int


@click.command(short_help="apply pending schema migrations to a database")
@settings_options(target_help=STORE_HELP)
def migrate(settings: Settings) -> None:
    """Apply the pending schema migrations to the database --db names (an existing SQLite
    file or a PostgreSQL database); a database already up to date is left unchanged.

    Workers and `agentledger serve` migrate when they open a database; every other
    command refuses one that needs migrating. Safe to run again, and from several hosts.
    """
    done = run(_migrate(settings.target))
    from agentledger.cli.output import echo, echo_json

    if settings.json:
        echo_json({"db": str(settings.target), **vars(done)})
    elif done.applied:
        versions = ", ".join(str(v) for v in done.applied)
        echo(
            f"{settings.target!s}: applied migration{'s' if len(done.applied) > 1 else ''} "
            f"{versions}; schema version {done.schema_version}"
        )
    else:
        echo(f"{settings.target!s}: already at schema version {done.schema_version}")


async def _migrate(target: Target) -> Migrated:
    from agentledger.errors import SchemaVersionError, ValidationError

    kind = target.kind
    if kind == "service":
        raise ValidationError(
            field="--db",
            expected="a SQLite file or a PostgreSQL DSN (the service migrates its own database)",
            got=str(target),
        )
    try:
        if kind == "postgres":
            return await _migrate_postgres(target)
        return await _migrate_sqlite(target.path)
    except SchemaVersionError as e:
        if not e.newer:
            raise
        # Written by a newer agentledger: never migrated here; say which database it is.
        raise SchemaVersionError(current=e.current, latest=e.latest, where=f"{target}: ") from e


async def _migrate_postgres(target: Target) -> Migrated:
    import psycopg

    from agentledger.cli.target import quiet_pool_logs
    from agentledger.errors import TransientError
    from agentledger.storage.postgres import migrations
    from agentledger.storage.postgres.search import build_index
    from agentledger.target import masked

    dsn = target.dsn()
    quiet_pool_logs()
    try:
        async with await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, connect_timeout=30
        ) as conn:
            applied = await migrations.migrate(conn)
            await build_index(conn, progress=lambda done: _progress(done, None))
    except psycopg.Error as e:
        reason = masked(" ".join(str(e).split()))
        raise TransientError(f"{target}: cannot migrate: {reason}") from e
    return Migrated(applied=applied, schema_version=migrations.SCHEMA_VERSION)


async def _migrate_sqlite(path: str) -> Migrated:
    import asyncio
    import os
    import sqlite3

    from agentledger.errors import SchemaVersionError, ValidationError
    from agentledger.storage.sqlite import LATEST_VERSION, SQLiteStore
    from agentledger.storage.sqlite.readonly import open_checked

    if not await asyncio.to_thread(os.path.exists, path):
        raise ValidationError(
            field="--db",
            expected="an existing agentledger database",
            got=path,
            message=f"no database at {path} (agentledger demo, or SQLiteStore.open, creates one)",
        )
    applied: list[int] = []
    try:
        probe = await asyncio.to_thread(open_checked, path, busy_timeout=5.0)
        probe.close()
    except SchemaVersionError as e:
        if e.newer:
            raise  # migrating it would be guessing: upgrade agentledger
        applied = list(e.pending)
    except sqlite3.Error:
        pass  # SQLiteStore.open says what is wrong with the file
    if applied:
        await asyncio.to_thread(_migrate_sqlite_file, path)
    store = await SQLiteStore.open(path)
    await store.close()
    return Migrated(applied=applied, schema_version=LATEST_VERSION)


def _migrate_sqlite_file(path: str) -> None:
    """Migrate, then build the search index of the older records, saying how far it is."""
    from agentledger.storage.sqlite import schema, search
    from agentledger.storage.sqlite.connection import connect

    conn = connect(path, busy_timeout=30.0, synchronous="FULL", read_only=False)
    try:
        schema.migrate(conn)
        search.build_index(conn, progress=_progress)
    finally:
        conn.close()


def _progress(done: int, left: int | None) -> None:
    """The search index build's progress, on stderr (stdout is the command's answer)."""
    import sys

    more = f", {left} to go" if left else ""
    sys.stderr.write(f"search index: {done} older records indexed{more}\n")
    sys.stderr.flush()
