"""Reading one page of a run's or a session's log, and running a decision over a loader.

Positions in a log are gap-free ``1..newest`` (per-run sequence, or the
per-session position allocated in commit order, see :mod:`._apply`), so a
cursor is just the last position returned and a page is a range query.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

import psycopg
from psycopg import pq

from agentledger.errors import CorruptRecordError, ValidationError
from agentledger.storage import lifecycle
from agentledger.storage.cursor import decode_cursor, encode_cursor
from agentledger.storage.integrity import mismatch, record_checksum, run_seed, sequence_gap
from agentledger.storage.postgres._reader import Loader, Missing
from agentledger.storage.postgres._rows import (
    RECORD_COLUMNS,
    RUN_COLUMNS,
    SESSION_COLUMNS,
    micros,
    utc,
)
from agentledger.storage.state import StateReader
from agentledger.storage.types import Page, Record
from agentledger.storage.validation import check_limit, require_id

__all__ = ["decide", "page_reader"]

R = TypeVar("R")

_MAX_RERUNS = 10_000  # a decision reads a handful of items; more means a loader bug


def _prefixed(alias: str, columns: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in columns.split(","))


# A session and one page of its log, in one statement (one snapshot).
_SESSION_WITH_PAGE = (
    f"SELECT {_prefixed('s', SESSION_COLUMNS)}, s.last_seq, {_prefixed('x', RECORD_COLUMNS)}, "
    "x.session_seq "
    "FROM agentledger_sessions s LEFT JOIN LATERAL ("
    f" SELECT {RECORD_COLUMNS}, session_seq FROM agentledger_records"
    " WHERE session_id = s.id AND session_seq > %s ORDER BY session_seq LIMIT %s) x ON true "
    "WHERE s.id = %s ORDER BY x.session_seq"
)
# A run's own row and its page: two statements, one snapshot (REPEATABLE READ),
# one round trip (pipelined). The page fetches only what varies within a run.
_RUN_ROW = f"SELECT {RUN_COLUMNS} FROM agentledger_runs WHERE run_id = %s"
_RUN_PAGE = (
    "SELECT seq, turn_id, event_key, type, ts, payload, checksum FROM agentledger_records "
    "WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s"
)
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

    The owner's row (its ``newest`` position) and the page after the cursor
    come from one snapshot in one round trip. The shared checks then run in
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
        if scope == "run":
            return await _run_page(loader, scope_id, require, cursor, start, size)
        cur = await loader.conn.execute(_SESSION_WITH_PAGE, (start, size, scope_id))
        rows = await cur.fetchall()
        if rows:
            loader.keep_session(rows[0][:_SESSION_WIDTH])
        else:
            loader.cache.sessions[scope_id] = None
        newest = await decide(loader, require)
        decode_cursor(cursor, scope, scope_id, newest)
        width = _SESSION_WIDTH
        page = [row[width:] for row in rows if row[width] is not None]
        end = min(start + size, newest)
        positions = [row[-1] for row in page]
        if positions != list(range(start + 1, end + 1)):
            raise _session_gap(scope_id, start, positions)
        records = tuple(loader.decode_record(row[:-1]) for row in page)
        completed = lifecycle.completed_runs(records)
        if completed:
            runs = await decide(loader, lambda reader: [reader.run(r) for r in sorted(completed)])
            statuses = {
                r: None if run is None else run.status
                for r, run in zip(sorted(completed), runs, strict=True)
            }
        else:
            statuses = {}
        lifecycle.check_listed(records, statuses)
        next_cursor = encode_cursor(scope, scope_id, end) if end < newest else ""
        return Page(records=records, next_cursor=next_cursor)

    return read


def _session_gap(session_id: str, start: int, positions: list[int]) -> CorruptRecordError:
    """A session page whose positions are not the consecutive ones after ``start``."""
    error = sequence_gap("", start, positions)
    return CorruptRecordError(
        run_id="",
        record_id=error.record_id,
        reason=f"session {session_id!r}, by position: {error.reason}",
    )


async def _run_page(
    loader: Loader,
    run_id: str,
    require: Callable[[StateReader], int],
    cursor: str,
    start: int,
    size: int,
) -> Page:
    """One page of a run's log: the run's row once, then only the columns that vary."""
    conn = loader.conn
    try:
        async with conn.pipeline():
            await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            run_cur = await conn.execute(_RUN_ROW, (run_id,))
            page_cur = await conn.execute(_RUN_PAGE, (run_id, start, size))
            await conn.execute("COMMIT")
            run_row = await run_cur.fetchone()
            rows = await page_cur.fetchall()
    except BaseException:
        if not conn.closed and conn.info.transaction_status != pq.TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                await conn.execute("ROLLBACK")
        raise
    run = None if run_row is None else loader.decode_run(run_row)
    loader.cache.runs[run_id] = run
    newest = await decide(loader, require)
    decode_cursor(cursor, "run", run_id, newest)
    assert run is not None  # require() raised otherwise
    agent_id, session_id = run.agent_id, run.session_id
    seed = run_seed(run_id, agent_id, session_id)
    records: list[Record] = []
    append = records.append
    try:
        for seq, turn_id, event_key, type_, ts, payload, checksum in rows:
            payload = bytes(payload)
            us = micros(ts)
            if record_checksum(seed, seq, turn_id, event_key, type_, us, payload) != checksum:
                raise mismatch(run_id, seq)
            append(
                Record(
                    run_id=run_id,
                    agent_id=agent_id,
                    session_id=session_id,
                    turn_id=turn_id,
                    event_key=event_key,
                    type=type_,
                    timestamp=utc(ts),
                    payload=payload,
                    id=str(seq),
                )
            )
    except (TypeError, ValueError, OverflowError) as e:
        raise CorruptRecordError(run_id=run_id, record_id="", reason=str(e)) from e
    if loader.sealer is not None:
        records = list(loader.sealer.open_records(tuple(records)))
    end = min(start + size, newest)
    if len(records) != end - start or (records and int(records[-1].id) != end):
        raise sequence_gap(run_id, start, [int(record.id) for record in records])
    lifecycle.check_listed(records, {run_id: run.status}, ends_log=end == newest)
    next_cursor = encode_cursor("run", run_id, end) if end < newest else ""
    return Page(records=tuple(records), next_cursor=next_cursor)
