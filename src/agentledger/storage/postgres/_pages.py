"""Reading one page of a run's or a session's log, and running a decision over a loader.

Positions in a log are gap-free ``1..newest`` (per-run sequence, or the
per-session position allocated in commit order, see :mod:`._apply`), so a
cursor is just the last position returned and a page is a range query.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

from agentledger.errors import ValidationError
from agentledger.storage.cursor import decode_cursor, encode_cursor
from agentledger.storage.postgres._reader import Loader, Missing
from agentledger.storage.postgres._rows import (
    RECORD_COLUMNS,
    RUN_COLUMNS,
    SESSION_COLUMNS,
    record_from_row,
    run_from_row,
)
from agentledger.storage.state import StateReader
from agentledger.storage.types import Page
from agentledger.storage.validation import check_limit, require_id

__all__ = ["decide", "page_reader"]

R = TypeVar("R")

_MAX_RERUNS = 10_000  # a decision reads a handful of items; more means a loader bug


def _prefixed(alias: str, columns: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in columns.split(","))


# A log's owner and one page of it, in one statement (one snapshot).
_RUN_WITH_PAGE = (
    f"SELECT {_prefixed('r', RUN_COLUMNS)}, {_prefixed('x', RECORD_COLUMNS)} "
    "FROM agentledger_runs r LEFT JOIN LATERAL ("
    f" SELECT {RECORD_COLUMNS} FROM agentledger_records"
    " WHERE run_id = r.run_id AND seq > %s ORDER BY seq LIMIT %s) x ON true "
    "WHERE r.run_id = %s ORDER BY x.seq"
)
_SESSION_WITH_PAGE = (
    f"SELECT {_prefixed('s', SESSION_COLUMNS)}, s.last_seq, {_prefixed('x', RECORD_COLUMNS)} "
    "FROM agentledger_sessions s LEFT JOIN LATERAL ("
    f" SELECT {RECORD_COLUMNS}, session_seq FROM agentledger_records"
    " WHERE session_id = s.id AND session_seq > %s ORDER BY session_seq LIMIT %s) x ON true "
    "WHERE s.id = %s ORDER BY x.session_seq"
)
_RUN_WIDTH = len(RUN_COLUMNS.split(","))
_SESSION_WIDTH = len(SESSION_COLUMNS.split(",")) + 1


async def decide(loader: Loader, decide: Callable[[StateReader], R]) -> R:
    """Run ``decide`` until it needs nothing the cache lacks."""
    for _ in range(_MAX_RERUNS):
        try:
            return decide(loader.cache)
        except Missing as miss:
            await loader.load(miss.key)
    raise RuntimeError("decision kept asking for unloaded state")


def page_reader(
    scope: Literal["run", "session"],
    scope_id: str,
    require: Callable[[StateReader], int],
    cursor: str,
    limit: int,
) -> Callable[[Loader], Awaitable[Page]]:
    """A read of one page of a run's or session's log, positions gap-free ``1..newest``.

    One statement returns the owner's row (its ``newest`` position) and the
    page after the cursor, from one snapshot. The shared checks then run in
    the contract's order: the owner exists, the limit, the cursor (which must
    not point past ``newest``). Bad input is refused before any SQL is sent.
    """

    async def read(loader: Loader) -> Page:
        try:
            require_id(f"{scope}_id", scope_id)
            size = check_limit(limit)
            start = decode_cursor(cursor, scope, scope_id, sys.maxsize)
        except ValidationError:
            await decide(loader, require)  # a missing owner is the first error to report
            raise
        query = _RUN_WITH_PAGE if scope == "run" else _SESSION_WITH_PAGE
        cur = await loader.conn.execute(query, (start, size, scope_id))
        rows = await cur.fetchall()
        cache = loader.cache
        if not rows:
            if scope == "run":
                cache.runs[scope_id] = None
            else:
                cache.sessions[scope_id] = None
        elif scope == "run":
            cache.runs[scope_id] = run_from_row(rows[0][:_RUN_WIDTH])
        else:
            loader.keep_session(rows[0][:_SESSION_WIDTH])
        newest = await decide(loader, require)
        decode_cursor(cursor, scope, scope_id, newest)
        width = _RUN_WIDTH if scope == "run" else _SESSION_WIDTH
        records = tuple(record_from_row(row[width:]) for row in rows if row[width] is not None)
        end = start + len(records)
        next_cursor = encode_cursor(scope, scope_id, end) if end < newest else ""
        return Page(records=records, next_cursor=next_cursor)

    return read
