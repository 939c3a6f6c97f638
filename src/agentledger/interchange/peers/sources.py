"""Reading a peer's database with plain SQL: a SQLite file (read only) or PostgreSQL.

A source is a path, a SQLAlchemy-style URL (``sqlite:///path``,
``sqlite+aiosqlite:///path``, ``postgresql+asyncpg://...``), a ``postgresql://``
DSN or a libpq ``key=value`` one; the peers' packages are not needed to read their stores.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sqlite3
from collections.abc import Sequence
from typing import Any

from agentledger.errors import ValidationError

__all__ = ["PeerSource", "shown"]

_SQLITE_URL = re.compile(r"^sqlite(\+\w+)?:///(.*)$")
_POSTGRES_URL = re.compile(r"^postgres(ql)?(\+\w+)?://")
_CONNINFO = re.compile(r"^\s*\w+\s*=")
"""A libpq key=value DSN (``host=... dbname=...``)."""


class PeerSource:
    """One peer database, opened for reads; ``?`` marks a parameter in every query."""

    def __init__(self, source: str) -> None:
        self.source = source
        match = _SQLITE_URL.match(source)
        self.postgres = bool(_POSTGRES_URL.match(source)) or (
            not match and _CONNINFO.match(source) is not None and not os.path.exists(source)
        )
        self.path = match[2] if match else ("" if self.postgres else source)
        if self.postgres:
            self.dsn = _POSTGRES_URL.sub("postgresql://", source)
        elif not os.path.isfile(self.path):
            raise ValidationError(
                field="source",
                expected="an existing SQLite file, a sqlite:/// URL or a postgresql:// DSN",
                got=shown(source),
            )

    async def tables(self) -> set[str]:
        """The tables the database holds."""
        if self.postgres:
            sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        else:
            sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
        return {row[0] for row in await self.rows(sql)}

    async def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row ``sql`` selects."""
        if self.postgres:
            return await self._postgres(sql.replace("?", "%s"), params)
        return await asyncio.to_thread(self._sqlite, sql, params)

    def _sqlite(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        uri = "file:" + self.path.replace("?", "%3f").replace("#", "%23") + "?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
            return [tuple(row) for row in conn.execute(sql, tuple(params))]

    async def _postgres(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        try:
            import psycopg
        except ImportError as e:
            from agentledger._extras import needs_extra

            raise needs_extra("reading a PostgreSQL peer store", "postgres", e) from e
        async with await psycopg.AsyncConnection.connect(self.dsn) as conn:
            cursor = await conn.execute(sql, tuple(params))
            return [tuple(row) for row in await cursor.fetchall()]


def shown(source: str) -> str:
    """``source`` without a password (a DSN's ``user:secret@`` or ``password=secret``)."""
    source = re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", source)
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", source, flags=re.IGNORECASE)
