"""``agentledger search TEXT``: find the messages that hold every word of TEXT, newest first."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import click

from agentledger.cli.app import Settings, label_option, run, settings_options, with_store
from agentledger.cli.complete import session_ids

if TYPE_CHECKING:
    from agentledger.storage.protocol import AdminStore

__all__ = ["search"]


@click.command(short_help="find messages by their words, across sessions")
@click.argument("words", nargs=-1, required=True, metavar="TEXT...")
@label_option
@click.option("--session", "session_id", default="", shell_complete=session_ids,
              help="only this session")  # fmt: skip
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="at most this many messages")  # fmt: skip
@click.option("--cursor", default="", help="resume after a previous search's next_cursor")
@settings_options
def search(
    settings: Settings,
    words: tuple[str, ...],
    labels: dict[str, str],
    session_id: str,
    limit: int,
    cursor: str,
) -> None:
    """Find the messages whose text holds every word of TEXT (one or more words, quoted
    or not; whole words, any case),
    newest first: the session, run, record and message, with the words marked **like
    this**. Searched: what the model sees (text, tool inputs and results, compaction
    summaries). Sessions sealed by encryption at rest are never indexed; the search
    says how many it left out.
    """
    text = " ".join(words)
    run(
        with_store(
            settings,
            lambda store: _search(store, settings, text, labels, session_id, limit, cursor),
        )
    )


async def _search(
    store: AdminStore,
    settings: Settings,
    text: str,
    labels: Mapping[str, str],
    session_id: str,
    limit: int,
    cursor: str,
) -> None:
    from agentledger.cli.output import columns, echo, echo_json, jsonable, when

    page = await store.search(
        text, labels=labels or None, session_id=session_id or None, limit=limit, cursor=cursor
    )
    if settings.json:
        echo_json(jsonable(page))
        return
    rows = [
        [when(h.timestamp) or "", h.session_id, h.run_id, f"{h.record_id}/{h.message_index}",
         h.role, h.snippet]
        for h in page.hits
    ]  # fmt: skip
    if rows:
        for line in columns(["TIME", "SESSION", "RUN", "RECORD/MSG", "ROLE", "MATCH"], rows):
            echo(line)
    else:
        echo("no message holds every word searched for")
    if page.left_out:
        sessions = "session is" if page.left_out == 1 else "sessions are"
        echo(f"{page.left_out} {sessions} sealed (encrypted at rest) and never searched")
    if not page.complete:
        echo("the index of older records is still being built: some may be missing")
    if page.next_cursor:
        echo(f"more: --cursor {page.next_cursor}")
