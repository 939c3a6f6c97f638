"""``agentledger sessions`` (list) and ``agentledger session end|purge`` (administer)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from agentledger.cli.app import Settings, run, settings_options, with_store
from agentledger.cli.complete import session_ids

if TYPE_CHECKING:
    from agentledger.cli.target import AdminStore
    from agentledger.storage.types import Session

__all__ = ["list_all_sessions", "session", "sessions"]


async def list_all_sessions(store: AdminStore, statuses: Sequence[str] = ()) -> list[Session]:
    """Every session (with one of ``statuses``, if any), oldest first.

    The CLI's one call to ``list_sessions``.
    """
    from agentledger.storage.types import SessionStatus

    return list(await store.list_sessions([SessionStatus(s) for s in statuses]))


@click.command(short_help="list sessions")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(["active", "ended"]),
    help="only sessions with this status (repeatable)",
)
@settings_options
def sessions(settings: Settings, statuses: tuple[str, ...]) -> None:
    """List every session: its status, when it was created and ended, and its run count."""
    run(with_store(settings, lambda store: _sessions(store, settings, statuses)))


async def _sessions(store: AdminStore, settings: Settings, statuses: Sequence[str]) -> None:
    from agentledger.cli.output import columns, echo, echo_json, when

    found = await list_all_sessions(store, statuses)
    if settings.json:
        echo_json({"sessions": found})
        return
    rows = []
    for s in found:
        count = len(await store.list_runs_by_session(s.id))
        rows.append([s.id, str(s.status), when(s.created_at) or "", when(s.ended_at) or "-",
                     str(count)])  # fmt: skip
    for line in columns(["SESSION", "STATUS", "CREATED", "ENDED", "RUNS"], rows):
        echo(line)


@click.group(short_help="end or purge a session")
def session() -> None:
    """Administer one session: end it (no new work), then purge it (delete its data)."""


@session.command(short_help="end a session (no new work)")
@click.argument("session_id", shell_complete=session_ids)
@settings_options
def end(settings: Settings, session_id: str) -> None:
    """[D2] End SESSION_ID: no new run or tool work starts in it; idempotent."""
    run(with_store(settings, lambda store: _end(store, settings, session_id), read_only=False))


async def _end(store: AdminStore, settings: Settings, session_id: str) -> None:
    from datetime import UTC, datetime

    from agentledger.cli.output import echo, echo_json, when

    now = datetime.now(UTC)
    ended = await store.end_session(
        session_id, ended_at=now.replace(microsecond=now.microsecond - now.microsecond % 1000)
    )
    if settings.json:
        echo_json(ended)
    else:
        echo(f"session {ended.id} ended at {when(ended.ended_at)}")


@session.command(short_help="delete an ended session")
@click.argument("session_id", shell_complete=session_ids)
@settings_options
def purge(settings: Settings, session_id: str) -> None:
    """[D3] Delete the ended SESSION_ID, its runs, records and checkpoints; a tombstone stays.

    The session must be ended and have no running run; purging again is a no-op.
    """
    run(with_store(settings, lambda store: _purge(store, settings, session_id), read_only=False))


async def _purge(store: AdminStore, settings: Settings, session_id: str) -> None:
    from agentledger.cli.output import echo, echo_json

    await store.purge_session(session_id)
    if settings.json:
        echo_json({"id": session_id, "purged": True})
    else:
        echo(f"session {session_id} purged")
