"""What ``--db``/``--store`` names: a SQLite file, a PostgreSQL DSN or a store service URL.

One :class:`Target` is parsed, defaulted, shown and opened the same way by every
command, ``agentledger worker`` and ``agentledger serve``. Its ``str`` and
``repr`` never carry a password (the ``password=`` of a libpq string, the
``user:password@`` or ``?password=`` of a URL), so a target can be printed and
logged anywhere.

It lives outside :mod:`agentledger.storage` because the CLI parses targets
before it imports any backend.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from agentledger.errors import SchemaVersionError, ValidationError

if TYPE_CHECKING:
    from agentledger.storage.encryption import Encryption
    from agentledger.storage.protocol import AdminStore
    from agentledger.storage.validation import SizeLimits

# Nothing of the store is imported here until a target is opened: `agentledger --help`
# parses no target and must stay cheap.

__all__ = ["DB_VARIABLE", "TOKEN_VARIABLE", "Kind", "Target", "default_target", "masked"]

DB_VARIABLE = "AGENTLEDGER_DB"
"""The environment variable naming the default target."""
TOKEN_VARIABLE = "AGENTLEDGER_TOKEN"
"""The environment variable holding the bearer token for a service URL."""

Kind = Literal["sqlite", "postgres", "service"]

_POSTGRES = ("postgres://", "postgresql://")
_SERVICE = ("http://", "https://")
_SQLITE = "sqlite:///"
_SCHEME = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*)://")
_KINDS = "a SQLite file path, a postgresql:// DSN or an http(s):// service URL"
_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)", re.IGNORECASE)


def default_target() -> str:
    """``$AGENTLEDGER_DB``, else ``./agentledger.db``."""
    return os.environ.get(DB_VARIABLE) or os.path.join(".", "agentledger.db")


def masked(text: str) -> str:
    """``text`` with every DSN or URL password in it replaced (``***`` or dropped)."""
    text = _PASSWORD.sub(r"\1***", text)
    return re.sub(r"(\b[a-z][a-z0-9+.-]*://[^\s:/@]+):[^\s@/]*@", r"\1@", text)


@dataclass(frozen=True)
class Target:
    """A parsed ``--db``: its kind and text; shown (``str``, ``repr``) without secrets."""

    text: str = field(repr=False)
    """What the user gave, secrets included: pass it only to the backend."""
    kind: Kind

    @classmethod
    def parse(cls, text: str | None, *, default: bool = True) -> Target:
        """The target ``text`` names; empty or None is :func:`default_target` (if ``default``).

        Raises:
            ValidationError: ``field="--db"``, empty with no default.
        """
        text = text or (default_target() if default else "")
        if not text:
            raise ValidationError(
                field="--db", expected="a SQLite path, a PostgreSQL DSN or a service URL", got=""
            )
        if text.startswith(_SERVICE):
            return cls(text, "service")
        scheme = _SCHEME.match(text)
        if scheme and not text.startswith((*_POSTGRES, "sqlite://")):
            raise ValidationError(
                field="--db", expected=_KINDS, got=masked(text),
                message=f"{masked(text)}: agentledger does not store in {scheme[1]}; "
                f"--db takes {_KINDS}",
            )  # fmt: skip
        if text.startswith(_POSTGRES) or "dbname=" in text or "host=" in text:
            return cls(text, "postgres")
        return cls(text, "sqlite")

    @property
    def path(self) -> str:
        """A SQLite target's file (a path, or what follows ``sqlite:///``)."""
        return self.text.removeprefix(_SQLITE) if self.text != _SQLITE else self.text

    def dsn(self) -> str:
        """A PostgreSQL target's connection string, once libpq has parsed it.

        Raises:
            ValidationError: ``field="--db"``, libpq cannot parse it (the
                message says why, without the password).
        """
        _check_dsn(self.text)
        return self.text

    def __str__(self) -> str:
        return masked(self.text)

    def __repr__(self) -> str:
        return f"Target({masked(self.text)!r}, kind={self.kind!r})"

    async def open(
        self,
        *,
        read_only: bool = False,
        create: bool = True,
        encryption: Encryption | None = None,
        limits: SizeLimits | None = None,
        durability: Literal["full", "normal"] = "full",
        pool_size: int | None = None,
    ) -> AdminStore:
        """Open the store this target names.

        ``create``: a missing SQLite file is created and an older schema
        migrated (what ``serve`` and workers do); without it both are refused,
        the store unchanged (what the other commands do). ``read_only``: a
        SQLite file opens read-only (a read-only file can be read). ``limits``
        and ``durability`` are the backend's (a service enforces its own);
        ``pool_size`` caps PostgreSQL connections (default: the store's).

        Raises:
            SchemaVersionError: a database that needs migrating (without
                ``create``: the message names ``agentledger migrate``), or one a
                newer agentledger wrote (the message says to upgrade).
            ValidationError: a missing or foreign file, a DSN libpq cannot
                parse, ``"normal"`` durability for PostgreSQL, a service URL
                without ``agentledger.service``.
            TransientError: the database or service cannot be reached.
        """
        from agentledger.storage.validation import DEFAULT_LIMITS

        limits = limits or DEFAULT_LIMITS
        if self.kind == "service":
            return await self._client()
        if self.kind == "postgres":
            return await self._postgres(create, encryption, limits, durability, pool_size)
        return await self._sqlite(read_only, create, encryption, limits, durability)

    async def _client(self) -> AdminStore:
        try:  # imported here: the client names this module (no import circle)
            service = importlib.import_module("agentledger.service")
        except ImportError as e:
            raise ValidationError(
                field="--db",
                expected="a SQLite path or a PostgreSQL DSN",
                got=str(self),
                message=(
                    f"{self}: a service URL needs agentledger.service, which this "
                    f"installation does not have ({e})"
                ),
            ) from e
        # a missing extra (aiohttp) is the package's own one-line "needs the [service] extra"
        opened: AdminStore = await service.StoreClient.open(
            self.text, token=os.environ.get(TOKEN_VARIABLE, "")
        )
        return opened

    async def _postgres(
        self,
        create: bool,
        encryption: Encryption | None,
        limits: SizeLimits,
        durability: str,
        pool_size: int | None,
    ) -> AdminStore:
        from agentledger.storage.postgres import PostgresStore

        dsn = self.dsn()
        if durability != "full":
            raise ValidationError(
                field="durability",
                expected="'full' for PostgreSQL (its server's synchronous_commit decides)",
                got=durability,
            )
        sizes = {} if pool_size is None else {"min_size": 1, "max_size": pool_size}
        try:
            return await PostgresStore.open(
                dsn,
                migrate=create,
                encryption=encryption,
                max_payload_bytes=limits.max_payload_bytes,
                max_checkpoint_bytes=limits.max_checkpoint_bytes,
                **sizes,
            )
        except ValidationError as e:
            raise self._unmigrated(e) from e

    async def _sqlite(
        self,
        read_only: bool,
        create: bool,
        encryption: Encryption | None,
        limits: SizeLimits,
        durability: Literal["full", "normal"],
    ) -> AdminStore:
        import asyncio

        from agentledger.storage.sqlite import SQLiteStore

        path = self.path
        if not create:
            if not await asyncio.to_thread(os.path.exists, path):
                raise ValidationError(
                    field="--db",
                    expected="an existing agentledger database",
                    got=path,
                    message=f"no database at {path} (run `agentledger demo` first, or pass --db)",
                )
            # Opening read-only first refuses an empty, foreign or older file before any write.
            try:
                reader = await SQLiteStore.open_read_only(path, encryption=encryption)
            except ValidationError as e:
                raise self._unmigrated(e) from e
            if read_only:
                return reader
            await reader.close()
        try:
            return await SQLiteStore.open(
                path,
                encryption=encryption,
                durability=durability,
                max_payload_bytes=limits.max_payload_bytes,
                max_checkpoint_bytes=limits.max_checkpoint_bytes,
            )
        except ValidationError as e:
            raise self._unmigrated(e) from e

    def _unmigrated(self, error: ValidationError) -> ValidationError:
        """A schema that is not this code's, said for the command line: a database
        behind it names the command that migrates it; a newer one, this target.
        """
        if not isinstance(error, SchemaVersionError):
            return error
        if error.newer:
            return SchemaVersionError(current=error.current, latest=error.latest, where=f"{self}: ")
        import shlex

        return SchemaVersionError(
            current=error.current,
            latest=error.latest,
            pending=error.pending,
            where=f"{self} needs migrating: ",
            advice=f"; run `agentledger migrate --db {shlex.quote(str(self))}`",
        )


def _check_dsn(dsn: str) -> None:
    """Refuse a malformed PostgreSQL DSN in one clean line (libpq's own reason, trimmed)."""
    import psycopg
    from psycopg import conninfo

    try:
        conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as e:
        reason = masked(" ".join(str(e).split()))
        raise ValidationError(
            field="--db",
            expected="a libpq connection string or a postgresql:// URI",
            got=masked(dsn),
            message=f"not a valid PostgreSQL DSN ({reason}): {masked(dsn)}",
        ) from None
