"""``agentledger records RUN_ID``: a run's records in commit order, filtered and paged."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from agentledger.cli.app import Settings, run, settings_options, with_store
from agentledger.cli.complete import run_ids

if TYPE_CHECKING:
    from agentledger.storage.protocol import AdminStore
    from agentledger.storage.types import Record

__all__ = ["TAIL_WIDTHS", "Selection", "record_json", "record_lines", "records", "select_records"]

_PAGE = 1000
"""Records fetched per request (the stores' largest page)."""


@click.command(short_help="a run's records in commit order")
@click.argument("run_id", shell_complete=run_ids)
@click.option(
    "--type", "types", multiple=True, metavar="TYPE", help="only records of this type (repeatable)"
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="show at most N records, then the cursor to go on from",
)
@click.option("--cursor", default="", metavar="CURSOR", help="start after this cursor")
@click.option("--full", is_flag=True, help="show whole payloads (pretty JSON), not previews")
@settings_options
def records(
    settings: Settings,
    run_id: str,
    types: tuple[str, ...],
    limit: int | None,
    cursor: str,
    full: bool,
) -> None:
    """RUN_ID's records in the order they were committed: id, type, event key, time, payload.

    With --limit the listing stops after N records and says how to go on
    (--cursor); --type keeps only the given types. --json prints
    {"run_id", "records", "next_cursor"} with each payload as its JSON value.
    """
    run(
        with_store(
            settings,
            lambda store: _records(store, settings, run_id, types, limit, cursor, full),
        )
    )


@dataclass(frozen=True)
class Selection:
    """What one listing found: the records, and the cursor to go on from (``""``: done)."""

    records: list[Record]
    next_cursor: str


async def select_records(
    store: AdminStore, run_id: str, types: Sequence[str], limit: int | None, cursor: str
) -> Selection:
    """Up to ``limit`` records of ``types`` after ``cursor``, and the exact cursor after them.

    The store pages by commit order only; the type filter is applied here.
    When a page holds more matches than wanted, the page is fetched again
    up to the last one kept, so the returned cursor resumes right after it.
    """
    wanted = frozenset(types)
    found: list[Record] = []
    while True:
        room = _PAGE if limit is None else limit - len(found)
        fetch = room if not wanted else _PAGE
        page = await store.list_run_records(run_id, cursor=cursor, limit=min(fetch, _PAGE))
        matches = [r for r in page.records if not wanted or r.type in wanted]
        if len(matches) > room:  # a filtered page overshot: cut it at the last record kept
            keep = matches[room - 1]
            upto = page.records.index(keep) + 1
            page = await store.list_run_records(run_id, cursor=cursor, limit=upto)
            matches = [r for r in page.records if r.type in wanted]
        found.extend(matches)
        cursor = page.next_cursor
        if not cursor or (limit is not None and len(found) >= limit):
            return Selection(found, cursor)


def record_json(record: Record) -> dict[str, object]:
    """A record in the CLI's JSON style: its payload as a JSON value."""
    from agentledger.cli.output import jsonable, payload_value

    return {**jsonable(record), "payload": payload_value(record.payload)}


def _pretty(payload: bytes) -> str:
    import msgspec

    try:
        return msgspec.json.format(payload, indent=2).decode()
    except (msgspec.DecodeError, UnicodeDecodeError):
        return payload.decode("utf-8", "replace")


_HEADER = ["ID", "TYPE", "EVENT KEY", "TIME", "PAYLOAD"]
TAIL_WIDTHS = (3, 28, 28, 24)
"""Column widths ``tail`` keeps, so lines printed one by one stay aligned."""


def record_lines(
    found: Sequence[Record], *, full: bool, header: bool = True, minimum: Sequence[int] = ()
) -> list[str]:
    """Records as text: one aligned line each with a payload preview, or whole blocks."""
    from agentledger.cli.output import columns, preview, preview_room, when

    if full:
        lines: list[str] = []
        for r in found:
            turn = f"  turn {r.turn_id}" if r.turn_id else ""
            lines.append(f"── {r.id}  {r.type}  {when(r.timestamp)}  key {r.event_key}{turn}")
            lines.extend(_pretty(r.payload).splitlines())
        return lines
    rows = [[r.id, r.type, r.event_key, when(r.timestamp) or "", ""] for r in found]
    least = [*minimum, 0, 0, 0, 0]
    fixed = [max(least[i], *(len(row[i]) for row in [_HEADER, *rows])) + 2 for i in range(4)]
    room = preview_room(sum(fixed))
    for row, r in zip(rows, found, strict=True):
        row[4] = preview(r.payload.decode("utf-8", "replace"), room)
    table = columns(_HEADER, rows, minimum)
    return table if header else table[1:]


async def _records(
    store: AdminStore,
    settings: Settings,
    run_id: str,
    types: Sequence[str],
    limit: int | None,
    cursor: str,
    full: bool,
) -> None:
    from agentledger.cli.output import echo, echo_json

    await store.load_run(run_id)  # an unknown run is an error, not an empty list
    selection = await select_records(store, run_id, types, limit, cursor)
    if settings.json:
        echo_json(
            {
                "run_id": run_id,
                "records": [record_json(r) for r in selection.records],
                "next_cursor": selection.next_cursor,
            }
        )
        await _name_missing_types(store, run_id, types, selection)
        return
    for line in record_lines(selection.records, full=full):
        echo(line)
    if selection.next_cursor:
        click.echo(f"more: add --cursor {selection.next_cursor}", err=True)
    await _name_missing_types(store, run_id, types, selection)


async def _name_missing_types(
    store: AdminStore, run_id: str, types: Sequence[str], selection: Selection
) -> None:
    """A --type the run has no record of is named on stderr, with the types it has."""
    found = {r.type for r in selection.records}
    if not types or found >= set(types):
        return
    held: list[str] = []
    for r in (await select_records(store, run_id, (), None, "")).records:
        if r.type not in held:
            held.append(r.type)
    absent = [t for t in dict.fromkeys(types) if t not in held]
    if absent:
        named = ", ".join(repr(t) for t in absent)
        click.echo(
            f"agentledger: note: run {run_id} has no record of type {named}; "
            f"its types: {', '.join(held)}",
            err=True,
        )
