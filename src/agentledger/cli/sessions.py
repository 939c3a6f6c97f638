"""``agentledger sessions`` (list) and ``agentledger session end|purge`` (administer)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import click

from agentledger.cli.app import Settings, label_option, run, settings_options, with_store
from agentledger.cli.complete import session_ids

if TYPE_CHECKING:
    from agentledger.storage.protocol import AdminStore
    from agentledger.storage.types import Session

__all__ = ["list_all_sessions", "session", "sessions"]


async def list_all_sessions(
    store: AdminStore,
    statuses: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
    cursor: str = "",
    limit: int = 0,
) -> tuple[list[Session], str]:
    """[D6] Sessions newest first, filtered; every page, or one page of ``limit``.

    The CLI's one call to ``list_sessions``. Returns the sessions and the cursor
    after them (``""`` when there are no more).
    """
    from agentledger.storage.types import SessionStatus
    from agentledger.storage.validation import MAX_PAGE_LIMIT

    wanted = [SessionStatus(s) for s in statuses]
    found: list[Session] = []
    while True:
        size = min(limit - len(found), MAX_PAGE_LIMIT) if limit else MAX_PAGE_LIMIT
        page = await store.list_sessions(wanted, labels=labels, cursor=cursor, limit=size)
        found.extend(page.sessions)
        cursor = page.next_cursor
        if not cursor or (limit and len(found) >= limit):
            return found, cursor


@click.command(short_help="list sessions")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(["active", "ended"]),
    help="only sessions with this status (repeatable)",
)
@label_option
@click.option("--limit", type=click.IntRange(min=1), help="at most this many sessions")
@click.option("--cursor", default="", help="resume after a previous listing's next_cursor")
@settings_options
def sessions(
    settings: Settings,
    statuses: tuple[str, ...],
    labels: dict[str, str],
    limit: int | None,
    cursor: str,
) -> None:
    """List sessions newest first: status, labels, when created and ended, and run count."""
    run(
        with_store(
            settings, lambda store: _sessions(store, settings, statuses, labels, limit, cursor)
        )
    )


async def _sessions(
    store: AdminStore,
    settings: Settings,
    statuses: Sequence[str],
    labels: Mapping[str, str],
    limit: int | None,
    cursor: str,
) -> None:
    from agentledger.cli.output import columns, echo, echo_json, jsonable, when

    found, next_cursor = await list_all_sessions(store, statuses, labels, cursor, limit or 0)
    counts = [len(await store.list_runs_by_session(s.id)) for s in found]
    if settings.json:
        listed = [{**jsonable(s), "runs": n} for s, n in zip(found, counts, strict=True)]
        echo_json({"sessions": listed, "next_cursor": next_cursor})
        return
    rows = []
    for s, count in zip(found, counts, strict=True):
        tags = " ".join(f"{k}={v}" for k, v in s.labels.items()) or "-"
        rows.append([s.id, str(s.status), when(s.created_at) or "", when(s.ended_at) or "-",
                     tags, str(count)])  # fmt: skip
    for line in columns(["SESSION", "STATUS", "CREATED", "ENDED", "LABELS", "RUNS"], rows):
        echo(line)
    if next_cursor:
        echo(f"more: --cursor {next_cursor}")


@click.group(short_help="end or purge a session")
def session() -> None:
    """Administer one session: end it (no new work), then purge it (delete its data)."""


@session.command(short_help="end a session (no new work)")
@click.argument("session_id", shell_complete=session_ids)
@settings_options
def end(settings: Settings, session_id: str) -> None:
    """End SESSION_ID: no new run or tool work starts in it; idempotent."""
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
@click.option(
    "--cascade",
    is_flag=True,
    help="also purge the sessions holding copies of its history (a fork into another session)",
)
@settings_options
def purge(settings: Settings, session_id: str, cascade: bool) -> None:
    """Delete the ended SESSION_ID, its runs, records and checkpoints; a tombstone stays.

    The session must be ended and have no running run. Prints the purge receipt:
    what was deleted (counts, payload and checkpoint bytes) and a sha256 digest of
    it; purging again deletes nothing and prints the same receipt. Copies of its
    history that other sessions hold (with their compaction summaries, and copies
    of those copies) are listed: they remain, unless --cascade
    purges those sessions too, whole, in the same transaction (each must be ended,
    with no running run, or nothing is purged).
    """
    run(
        with_store(
            settings, lambda store: _purge(store, settings, session_id, cascade), read_only=False
        )
    )


async def _purge(store: AdminStore, settings: Settings, session_id: str, cascade: bool) -> None:
    from agentledger.cli.output import echo, echo_json, when

    receipt = await store.purge_session(session_id, cascade=cascade)
    if settings.json:
        echo_json(receipt)
    elif not receipt.known:
        echo(f"session {session_id} purged (before receipts were kept: what it held is unknown)")
    else:
        indexed = (
            "" if receipt.search_entries is None
            else f", {receipt.search_entries} search index entries"
        )  # fmt: skip
        echo(
            f"session {session_id} purged at {when(receipt.purged_at)}: {receipt.runs} runs, "
            f"{receipt.records} records, {receipt.checkpoints} checkpoints, {receipt.bytes} bytes"
            f"{indexed}"
        )
        echo(f"digest {receipt.digest}")
        for holder in receipt.cascaded:
            echo(f"purged with it: session {holder} (held a copy of its history)")
        for copy in receipt.derived:
            what = f"a summary (record {copy.summary}) of a copy" if copy.summary else "a copy"
            echo(
                f"remains: {what} in session {copy.session_id}, run {copy.run_id} "
                f"(of run {copy.source.run_id} through record {copy.source.through})"
            )
