"""``agentledger export`` and ``import``: the portable session format, archives, and
conversations from other frameworks' session stores [G4]."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agentledger.cli.app import (
    STORE_HELP,
    Settings,
    run,
    settings_options,
    with_store,
)
from agentledger.cli.complete import session_ids

if TYPE_CHECKING:
    from agentledger.interchange import ImportOutcome
    from agentledger.storage.protocol import AdminStore

__all__ = ["export", "import_"]

T = TypeVar("T")

_PEERS = ("openai-agents", "adk", "langgraph")


@click.command(short_help="write an ended session as JSON Lines (the portable format)")
@click.argument("session_id", shell_complete=session_ids)
@click.option(
    "--format",
    "format_",
    type=click.Choice(["jsonl"]),
    default="jsonl",
    show_default=True,
    help="the file format: jsonl, agentledger's documented session format (docs/format.md)",
)
@click.option(
    "-o",
    "--out",
    "out",
    type=click.Path(dir_okay=False, allow_dash=True),
    default="-",
    help="the file to create (never overwritten); default: standard output",
)
@settings_options
def export(settings: Settings, session_id: str, format_: str, out: str) -> None:
    """Write the ended SESSION_ID (runs, records, checkpoints, messages) as JSON Lines.

    A header line with the format version and the session, then its runs,
    records, checkpoints and submitted messages, in order; `agentledger import`
    reads it back, and exporting the imported session gives the same bytes. An
    encrypted store's records are exported in plain text, so the store opens
    only with its keyring and vault. For a self-verifying backup, use
    `agentledger archive`.
    """
    run(with_store(settings, lambda store: _export(store, session_id, out)))


async def _export(store: AdminStore, session_id: str, out: str) -> None:
    import asyncio

    from agentledger.interchange import export_session

    data = await export_session(store, session_id)
    if out == "-":
        import sys

        buffer = getattr(sys.stdout, "buffer", None)
        if buffer is None:  # a text stream (in tests): the file is UTF-8 text
            sys.stdout.write(data.decode("utf-8"))
        else:
            sys.stdout.flush()
            buffer.write(data)
            buffer.flush()
        return
    await asyncio.to_thread(_write_new, out, data)


def _write_new(path: str, data: bytes) -> None:
    """Write a whole new file: a name that exists is refused, a failed write leaves nothing."""
    import os

    with open(path, "xb") as f:
        try:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        except BaseException:
            os.unlink(path)
            raise


@click.command(name="import", short_help="bring in a session file, an archive, or a peer's store")
@click.argument("source", metavar="FILE|PATH_OR_DSN")
@click.option(
    "--from",
    "peer",
    type=click.Choice(_PEERS),
    default=None,
    help="read another framework's session store instead of a file: openai-agents "
    "(SQLiteSession/SQLAlchemySession tables), adk (DatabaseSessionService), "
    "langgraph (a checkpointer's latest state of --thread)",
)
@click.option(
    "--session",
    "session",
    default=None,
    metavar="ID",
    help="with --from openai-agents or adk: only this conversation (default: every one)",
)
@click.option(
    "--thread",
    "thread",
    default=None,
    metavar="ID",
    help="with --from langgraph: the thread to import (required)",
)
@click.option(
    "--create",
    is_flag=True,
    help="create the SQLite database named by --db if it does not exist",
)
@settings_options(target_help=STORE_HELP)
def import_(
    settings: Settings,
    source: str,
    peer: str | None,
    session: str | None,
    thread: str | None,
    create: bool,
) -> None:
    """Import the session(s) in FILE|PATH_OR_DSN into the store, each in one transaction.

    FILE is a session file written by `agentledger export` (JSON Lines) or an
    archive written by `agentledger archive`; its first line says which. The
    whole file is checked first, like a restore: a damaged or inconsistent file
    is refused and nothing is written. Importing a session the store already
    holds, unchanged, changes nothing.

    With --from, SOURCE is another framework's session store: each conversation
    becomes an ended session whose turns follow each other by reference, with
    ids derived from the peer's, so importing again changes nothing. What
    could not be carried is reported, with why.
    """
    if peer is None and (session or thread):
        raise click.UsageError("--session and --thread go with --from")
    if peer == "langgraph" and not thread:
        raise click.UsageError("--from langgraph needs --thread ID")
    if peer not in (None, "langgraph") and thread:
        raise click.UsageError("--thread goes with --from langgraph")
    if peer == "langgraph" and session:
        raise click.UsageError("--session goes with --from openai-agents or adk")

    async def use(store: AdminStore) -> None:
        if peer is None:
            await _import_file(store, settings, source)
        else:
            await _import_peer(store, settings, peer, source, session or thread or "")

    run(_writing(settings, create, use))


async def _writing(settings: Settings, create: bool, use: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``use`` on the store, made first with --create (and removed if the import fails)."""
    import asyncio
    import contextlib
    import os

    from agentledger.errors import ValidationError
    from agentledger.storage.encryption.config import configured_encryption
    from agentledger.storage.sqlite import SQLiteStore

    if not create:
        return await with_store(settings, use, read_only=False)
    if settings.target.kind != "sqlite":
        raise ValidationError(
            field="--create", expected="a SQLite file as --db", got=str(settings.target)
        )
    path = settings.target.path
    if await asyncio.to_thread(os.path.lexists, path):
        return await with_store(settings, use, read_only=False)
    store = await SQLiteStore.open(path, encryption=configured_encryption())
    try:
        result = await use(store)
    except BaseException:
        await store.close()
        for leftover in (path, f"{path}-wal", f"{path}-shm", f"{path}-journal"):
            with contextlib.suppress(FileNotFoundError):
                await asyncio.to_thread(os.unlink, leftover)
        raise
    await store.close()
    return result


def _said(outcome: ImportOutcome) -> str:
    done = "imported" if outcome.imported else "already held, unchanged:"
    return (
        f"{done} session {outcome.session_id}: {outcome.runs} runs, "
        f"{outcome.records} records, digest {outcome.digest}"
    )


async def _import_file(store: AdminStore, settings: Settings, path: str) -> None:
    import asyncio

    from agentledger.cli.output import echo, echo_json
    from agentledger.errors import ValidationError
    from agentledger.interchange import import_session_file, is_session_file
    from agentledger.storage.archive import restore_archive

    first = await asyncio.to_thread(_first_line, path)
    if first.startswith(b"agentledger-archive "):
        manifest = await restore_archive(store, path)
        if settings.json:
            echo_json(manifest)
        else:
            echo(
                f"restored session {manifest.session_id} from the archive {path}: "
                f"{manifest.runs} runs, {manifest.records} records, "
                f"digest {manifest.session_digest}"
            )
        return
    if not is_session_file(first):
        raise ValidationError(
            field=path,
            expected="a session file from `agentledger export` or an archive "
            "(or name another framework's store with --from)",
            got=first[:40].decode("utf-8", "replace"),
        )
    outcome = await import_session_file(store, path)
    if settings.json:
        echo_json(outcome)
    else:
        echo(_said(outcome))


def _first_line(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.readline(1 << 16)


async def _import_peer(
    store: AdminStore, settings: Settings, peer: str, source: str, only: str
) -> None:
    from agentledger.cli.output import echo, echo_json
    from agentledger.interchange.peers import import_peer

    report = await import_peer(store, peer, source, only)
    if settings.json:
        echo_json(report)
        return
    for outcome in report.sessions:
        echo(_said(outcome))
    for gap in report.not_carried:
        echo(f"not carried: {gap}")
    if not report.sessions:
        echo(f"nothing to import: {source} holds no conversation")
