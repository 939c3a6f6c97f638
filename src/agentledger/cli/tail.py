"""``agentledger tail RUN_ID``: follow a run's records live, as they commit."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from agentledger.cli.app import Settings, run, settings_options, with_store
from agentledger.cli.complete import run_ids

if TYPE_CHECKING:
    from agentledger.storage.protocol import AdminStore
    from agentledger.storage.types import Record, RunStatus

__all__ = ["follow", "tail"]

_PAGE = 100
"""Records per poll: at the end of the log the last page is read again, so keep it small."""


@click.command(short_help="follow a run's records live")
@click.argument("run_id", shell_complete=run_ids)
@click.option("--cursor", default="", metavar="CURSOR", help="start after this cursor")
@click.option(
    "--after",
    type=click.IntRange(min=0),
    default=0,
    metavar="ID",
    help="start after the record with this id (resume where you stopped)",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.01),
    default=0.25,
    show_default=True,
    metavar="SECONDS",
    help="how often to poll the store",
)
@click.option("--forever", is_flag=True, help="keep following after the run has ended")
@click.option("--full", is_flag=True, help="show whole payloads (pretty JSON), not previews")
@settings_options
def tail(
    settings: Settings,
    run_id: str,
    cursor: str,
    after: int,
    interval: float,
    forever: bool,
    full: bool,
) -> None:
    """Print RUN_ID's records as they commit, from the first (or after --cursor / --after),
    and stop once the run has ended (completed, failed, canceled or suspended) and its
    last record is printed, unless --forever. --json prints one JSON record per line;
    each record's id resumes with --after ID.
    """

    async def use(store: AdminStore) -> None:
        from agentledger.cli.output import echo, echo_json
        from agentledger.cli.records import TAIL_WIDTHS, record_json, record_lines

        header = [not settings.json and not full]

        def emit(record: Record) -> None:
            if settings.json:
                echo_json(record_json(record))
                return
            for line in record_lines([record], full=full, header=header[0], minimum=TAIL_WIDTHS):
                echo(line)
            header[0] = False

        status = await follow(
            store, run_id, emit, cursor=cursor, after=after, interval=interval, forever=forever
        )
        if not settings.json:
            from agentledger.storage.run_failure import load_run_failure

            failure = await load_run_failure(store, await store.load_run(run_id))
            ended = f"{status}: {failure}" if failure is not None else str(status)
            click.echo(f"run {run_id} {ended}", err=True)

    run(with_store(settings, use))


async def follow(
    store: AdminStore,
    run_id: str,
    emit: Callable[[Record], None],
    *,
    cursor: str = "",
    after: int = 0,
    interval: float = 0.25,
    forever: bool = False,
) -> RunStatus:
    """Hand each record of ``run_id`` to ``emit`` once, in commit order, as it commits.

    Returns the run's status once it has ended and every record is out (never,
    with ``forever``). A page that reaches the end of the log has no next
    cursor, so the next poll reads that page again and skips ids already
    emitted (record ids count up from 1 on each run's log): at most one page
    is read twice per poll.
    """
    import asyncio

    from agentledger.storage.types import RunStatus

    status = (await store.load_run(run_id)).status
    last = after
    ended = False  # the status was terminal before the last read began
    while True:
        page = await store.list_run_records(run_id, cursor=cursor, limit=_PAGE)
        for record in page.records:
            if int(record.id) > last:
                emit(record)
                last = int(record.id)
        if page.next_cursor:
            cursor = page.next_cursor
            continue
        if ended and not forever:
            return status
        # A terminal write saves the status and its record together: once the
        # status is terminal, one more read has every record.
        status = (await store.load_run(run_id)).status
        if status is not RunStatus.RUNNING and not ended:
            ended = True
            continue
        await asyncio.sleep(interval)
