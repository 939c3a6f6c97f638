"""A run's or session's log as a page reads it: in the store's largest pages, up to
:data:`MAX_RECORDS` records per request, so a huge log costs a bounded read (and its
page says its figures are partial). What the records say is :mod:`agentledger.views`'.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agentledger.service.inspector.positions import end_position, position_after
from agentledger.storage.types import Page, Record
from agentledger.storage.validation import MAX_PAGE_LIMIT

__all__ = ["MAX_RECORDS", "Log", "read_log"]

MAX_RECORDS = 50_000
"""Records one inspector request reads at most to summarize a log."""

ListPage = Callable[..., Awaitable[Page]]


@dataclass
class Log:
    """A log's records (up to :data:`MAX_RECORDS`) and whether that is all of it.

    ``last_cursor`` is the page cursor its last page was read from and
    ``last_count`` how many records that page held: where the read ended.
    """

    records: list[Record]
    complete: bool
    last_cursor: str = ""
    last_count: int = 0

    async def end(self, list_page: ListPage, scope_id: str) -> str:
        """The follow position just after the records read (where live follow starts)."""
        if not self.complete:
            return await end_position(list_page, scope_id)
        return await position_after(list_page, scope_id, self.last_cursor, self.last_count)


async def read_log(list_page: ListPage, scope_id: str, *, most: int = MAX_RECORDS) -> Log:
    """The records of a run's or session's log, in commit order, up to ``most``."""
    records: list[Record] = []
    cursor = ""
    while True:
        page = await list_page(scope_id, cursor=cursor, limit=MAX_PAGE_LIMIT)
        records.extend(page.records)
        if not page.next_cursor:
            return Log(records, complete=True, last_cursor=cursor, last_count=len(page.records))
        cursor = page.next_cursor
        if len(records) >= most:
            return Log(records, complete=False)
