"""``agentledger archive``, ``restore`` and ``retention`` [A1]: archive files and the sweep."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import click

from agentledger.cli.app import (
    CommandError,
    Settings,
    run,
    settings_options,
    with_store,
)
from agentledger.cli.complete import session_ids

if TYPE_CHECKING:
    from agentledger.storage.archive import ArchiveManifest
    from agentledger.storage.protocol import AdminStore
    from agentledger.storage.retention import SweepResult

__all__ = ["archive", "parse_cutoff", "restore", "retention"]

_AGE = re.compile(r"^(\d+)([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_cutoff(text: str, now: datetime) -> datetime:
    """``30d`` (an age: s, m, h, d or w before ``now``) or an ISO 8601 time, as UTC."""
    age = _AGE.match(text.strip())
    if age:
        return now - timedelta(**{_UNITS[age[2]]: int(age[1])})
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise click.BadParameter(
            f"expected an age like 30d, 12h, 90m or an ISO 8601 time, got {text!r}",
            param_hint="--ended-before",
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _describe(manifest: ArchiveManifest) -> str:
    return (
        f"session {manifest.session_id}: {manifest.runs} runs, {manifest.records} records, "
        f"{manifest.checkpoints} checkpoints, {manifest.byte_total} bytes, "
        f"digest {manifest.session_digest}"
    )


@click.command(short_help="write an ended session to an archive file")
@click.argument("session_id", shell_complete=session_ids)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(dir_okay=False),
    help="the archive file to create (an existing file is kept if it is the same archive)",
)
@settings_options
def archive(settings: Settings, session_id: str, out: str) -> None:
    """Write the ended SESSION_ID (runs, records, checkpoints) to one self-verifying file.

    The file is compressed and carries a manifest with counts and digests; it
    is written whole or not at all. The session stays in the store (see
    `agentledger session purge` and `agentledger retention`).
    """
    run(with_store(settings, lambda store: _archive(store, settings, session_id, out)))


async def _check_directory(path: str, option: str) -> None:
    """Refuse a file whose directory does not exist, before anything is read or written."""
    import asyncio
    import os

    from agentledger.errors import ValidationError

    folder = os.path.dirname(path) or "."
    if not await asyncio.to_thread(os.path.isdir, folder):
        raise ValidationError(
            field=option,
            expected="a file in an existing directory",
            got=path,
            message=f"{option} {path}: there is no directory {folder} (create it first)",
        )


async def _archive(store: AdminStore, settings: Settings, session_id: str, out: str) -> None:
    from agentledger.cli.output import echo, echo_json
    from agentledger.storage.archive import archive_session

    await _check_directory(out, "--out")
    manifest = await archive_session(store, session_id, out)
    if settings.json:
        echo_json(manifest)
    else:
        echo(f"archived {_describe(manifest)} to {out}")


@click.command(short_help="recreate a session from an archive file")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--verify-only", is_flag=True, help="check the file, write nothing to the store")
@click.option(
    "--create",
    is_flag=True,
    help="create the SQLite database named by --db if it does not exist "
    "(an existing file must be an agentledger database)",
)
@click.option(
    "--max-bytes",
    "max_bytes",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="refuse an archive whose body inflates past N bytes "
    "(default: what its manifest's counts allow)",
)
@settings_options
def restore(
    settings: Settings, file: str, verify_only: bool, create: bool, max_bytes: int | None
) -> None:
    """Recreate the session archived in FILE, byte for byte, in a store that never had it.

    The whole file is verified first: a damaged, truncated or tampered file,
    a purged session id or a session the store already has is refused, and
    nothing is written. With --create, a new SQLite file is made for it (and
    removed again if the restore is refused).
    """
    if verify_only:
        run(_verify(settings, file, max_bytes))
        return
    if create:
        run(_restore_creating(settings, file, max_bytes))
        return
    _exists_or_create(settings)
    run(
        with_store(
            settings, lambda store: _restore(store, settings, file, max_bytes), read_only=False
        )
    )


def _exists_or_create(settings: Settings) -> None:
    """Refuse a restore into a SQLite file that does not exist, naming --create.

    Raises:
        ValidationError: ``field="--db"``, no file there.
    """
    import os

    from agentledger.errors import ValidationError

    if settings.target.kind == "sqlite" and not os.path.lexists(settings.target.path):
        path = settings.target.path
        raise ValidationError(
            field="--db",
            expected="an existing agentledger database, or --create",
            got=path,
            message=f"no database at {path}: pass --create to make a new SQLite file "
            "for the restored session",
        )


async def _verify(settings: Settings, file: str, max_bytes: int | None) -> None:
    from agentledger.cli.output import echo, echo_json
    from agentledger.storage.archive import verify_archive
    from agentledger.storage.encryption.config import configured_encryption

    manifest = await verify_archive(file, configured_encryption(), max_inflated_bytes=max_bytes)
    if settings.json:
        echo_json(manifest)
    else:
        echo(f"{file} is a valid archive of {_describe(manifest)}")


async def _restore(store: AdminStore, settings: Settings, file: str, max_bytes: int | None) -> None:
    from agentledger.cli.output import echo, echo_json
    from agentledger.errors import SessionConflictError
    from agentledger.storage.archive import restore_archive

    try:
        manifest = await restore_archive(store, file, max_inflated_bytes=max_bytes)
    except SessionConflictError as e:
        raise CommandError(
            f"{settings.target} already holds session {e.session_id}: a restore "
            "only recreates a session the store never held (restore into another store, "
            "with --db)",
            subject=str(settings.target),
        ) from e
    if settings.json:
        echo_json(manifest)
    else:
        echo(f"restored {_describe(manifest)} from {file}")


async def _restore_creating(settings: Settings, file: str, max_bytes: int | None) -> None:
    """``restore --create``: into the SQLite file --db names, made first if it does not exist.

    The archive is verified before the file is made, and a file made here is
    removed again if the restore is refused, so a refusal leaves nothing behind.
    """
    import asyncio
    import os

    from agentledger.errors import ValidationError
    from agentledger.storage.archive import verify_archive
    from agentledger.storage.encryption.config import configured_encryption
    from agentledger.storage.sqlite import SQLiteStore

    if settings.target.kind != "sqlite":
        raise ValidationError(
            field="--create", expected="a SQLite file as --db", got=str(settings.target)
        )
    path = settings.target.path
    if await asyncio.to_thread(os.path.lexists, path):  # an agentledger database, or refused
        await with_store(
            settings, lambda store: _restore(store, settings, file, max_bytes), read_only=False
        )
        return
    encryption = configured_encryption()
    await verify_archive(file, encryption, max_inflated_bytes=max_bytes)
    store = await SQLiteStore.open(path, encryption=encryption)
    try:
        await _restore(store, settings, file, max_bytes)
    except BaseException:
        await store.close()
        for leftover in (path, f"{path}-wal", f"{path}-shm", f"{path}-journal"):
            await asyncio.to_thread(_remove, leftover)
        raise
    await store.close()


def _remove(path: str) -> None:
    import contextlib
    import os

    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


@click.command(short_help="archive then purge sessions ended before a cut-off")
@click.option(
    "--ended-before",
    "ended_before",
    required=True,
    metavar="AGE|TIME",
    help="sessions ended before this: an age (30d, 12h, 90m, 2w) or an ISO 8601 time",
)
@click.option(
    "--archive-to",
    "archive_to",
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="archive each session to DIR/<session id>.alarchive before purging it",
)
@click.option("--dry-run", is_flag=True, help="say what would be done, change nothing")
@settings_options
def retention(settings: Settings, ended_before: str, archive_to: str | None, dry_run: bool) -> None:
    """Archive (with --archive-to) then purge every session ended before the cut-off.

    Prints each session's purge receipt. Safe to run again: a sweep that was
    interrupted finishes what is left, and one with nothing left says so. An
    archive already in DIR is verified and reused if it holds the session's same
    digest; any other file under its name stops the sweep. Sessions with a
    running run are skipped.
    """
    cutoff = parse_cutoff(ended_before, datetime.now(UTC))
    run(
        with_store(
            settings,
            lambda store: _retention(store, settings, cutoff, archive_to, dry_run),
            read_only=dry_run,
        )
    )


def _line(result: SweepResult) -> str:
    from agentledger.cli.output import when

    where = ""
    if result.archive:
        where = f", archive {result.archive}" + (" (reused)" if result.archive_reused else "")
    if result.receipt is not None:
        r = result.receipt
        return (
            f"purged {r.session_id}: {r.runs} runs, {r.records} records, "
            f"{r.checkpoints} checkpoints, {r.bytes} bytes, digest {r.digest}{where}"
        )
    if result.reason:
        return f"skipped {result.session_id}: {result.reason}"
    return f"would purge {result.session_id} (ended {when(result.ended_at)}){where}"


async def _retention(
    store: AdminStore,
    settings: Settings,
    cutoff: datetime,
    archive_to: str | None,
    dry_run: bool,
) -> None:
    from agentledger.cli.output import echo, echo_json, when
    from agentledger.storage.retention import sweep

    results = await sweep(store, cutoff, archive_to=archive_to, dry_run=dry_run)
    if settings.json:
        echo_json({"ended_before": cutoff, "dry_run": dry_run, "sessions": results})
        return
    for result in results:
        echo(_line(result))
    if not results:
        echo(f"nothing to do: no session ended before {when(cutoff)} is left")
