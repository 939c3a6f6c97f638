"""Windows onto a log for the inspector: records after a position, filtered by type.

A position is a live-follow cursor (:func:`agentledger.service.follow.parse_after`):
a page cursor the store issued, optionally followed by ``.N`` to skip the
first N records of that page. The inspector pages with the same positions it
hands to the follow stream, so a page that reaches the end of a log can go on
live from exactly where it stopped, with no gap and no duplicate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

from agentledger.errors import ValidationError
from agentledger.service.follow import FOLLOW_PAGE, parse_after
from agentledger.storage.types import Page, Record

__all__ = [
    "MAX_SCAN_PAGES",
    "Window",
    "end_position",
    "matches",
    "position_after",
    "record_types",
    "window",
]

ListPage = Callable[..., Awaitable[Page]]

MAX_SCAN_PAGES = 100
"""Store pages one inspector request reads at most (of :data:`FOLLOW_PAGE` records each).

Pages are read at the follow stream's size, so every position made here is
one the follow stream accepts (its skip never exceeds a page).
"""


@dataclass(frozen=True)
class Window:
    """Records after a position, and where to go on from.

    ``next`` is set when more records may follow (the next page's position);
    ``end`` is set when the log's end was reached (where live follow resumes).
    """

    records: list[Record]
    next: str
    end: str


def _position(cursor: str, skip: int) -> str:
    return f"{cursor}.{skip}" if skip else cursor


def matches(record: Record, needle: str) -> bool:
    """Whether a record's type, event key or payload holds ``needle`` (lowercase)."""
    if needle in record.type.lower() or needle in record.event_key.lower():
        return True
    return needle in bytes(record.payload).decode("utf-8", errors="replace").lower()


async def window(
    list_page: ListPage,
    scope_id: str,
    after: str,
    *,
    limit: int,
    types: Collection[str] = (),
    text: str = "",
) -> Window:
    """Up to ``limit`` records of the log after ``after`` whose type is in ``types`` (any if empty)
    and that hold ``text`` (case-insensitive; any if empty).

    Raises:
        ValidationError: a position this service did not issue.
        NotFoundError: no such run or session (from the store).
    """
    cursor, skip = parse_after(after)
    needle = text.lower()
    found: list[Record] = []
    for _ in range(MAX_SCAN_PAGES):
        page = await list_page(scope_id, cursor=cursor, limit=FOLLOW_PAGE)
        if skip > len(page.records):
            raise ValidationError(
                field="after", expected="a position this service issued", got=after
            )
        for i in range(skip, len(page.records)):
            record = page.records[i]
            if types and record.type not in types:
                continue
            if needle and not matches(record, needle):
                continue
            if len(found) == limit:
                return Window(found, next=_position(cursor, i), end="")
            found.append(record)
        if not page.next_cursor:
            return Window(found, next="", end=_position(cursor, len(page.records)))
        cursor, skip = page.next_cursor, 0
    return Window(found, next=cursor, end="")


async def end_position(list_page: ListPage, scope_id: str) -> str:
    """The position just after the last record of a log (where live follow starts)."""
    cursor = ""
    while True:
        page = await list_page(scope_id, cursor=cursor, limit=FOLLOW_PAGE)
        if not page.next_cursor:
            return _position(cursor, len(page.records))
        cursor = page.next_cursor


async def position_after(list_page: ListPage, scope_id: str, cursor: str, count: int) -> str:
    """The position ``count`` records after the page cursor ``cursor`` (a follow position).

    How a page that read a log in large pages finds where live follow starts,
    as of its read, with a few small reads instead of reading the log again.
    """
    while count > FOLLOW_PAGE:
        page = await list_page(scope_id, cursor=cursor, limit=FOLLOW_PAGE)
        if not page.next_cursor:
            return _position(cursor, len(page.records))
        cursor, count = page.next_cursor, count - len(page.records)
    return _position(cursor, count)


async def record_types(list_page: ListPage, scope_id: str) -> Counter[str]:
    """How many records of each type the log holds (its first pages, for the type filter)."""
    counts: Counter[str] = Counter()
    cursor = ""
    for _ in range(MAX_SCAN_PAGES):
        page = await list_page(scope_id, cursor=cursor, limit=FOLLOW_PAGE)
        counts.update(r.type for r in page.records)
        if not (cursor := page.next_cursor):
            break
    return counts
