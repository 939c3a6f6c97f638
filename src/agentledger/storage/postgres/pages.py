"""Reading one page of a run's or a session's log, and running a decision over a loader.

Positions in a log are gap-free ``1..newest`` (per-run sequence, or the
per-session position allocated in commit order, see :mod:`._apply`), so a
cursor is just the last position returned and a page is a range query.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

import psycopg
from psycopg import pq

from agentledger.errors import CorruptRecordError, ValidationError
from agentledger.storage import lifecycle, session_pages
from agentledger.storage.cursor import decode_cursor
from agentledger.storage.pages import RunHead, run_page, split_transcript
from agentledger.storage.postgres.reader import Loader, Missing
from agentledger.storage.postgres.rows import (
    RUN_COLUMNS,
    SESSION_COLUMNS,
)
from agentledger.storage.state import StateReader
from agentledger.storage.transcript_chain import (
    ChainScan,
    chain_links,
    chain_segments,
    reference_records,
)
from agentledger.storage.types import Page, Record, RunStatus, TranscriptSegment
from agentledger.storage.validation import check_limit, require_id

__all__ = ["chain_reader", "decide", "page_reader", "transcript_reader"]

R = TypeVar("R")

_MAX_RERUNS = 10_000  # a decision reads a handful of items; more means a loader bug


# A session, one page of its log as session rows (see :mod:`..session_pages`) and, when
# the page is the last, each ended run of the session with its newest stored record (a
# JSON array on the page's first row only): one statement, one snapshot. The session's
# columns repeat on every row; its labels come as text, so only the first row's are parsed.
_SESSION_WITH_PAGE = (
    "SELECT s.id, s.status, s.created_at, s.ended_at, s.labels::text, s.last_seq, "
    "CASE WHEN coalesce(x.session_seq, %(first)s) = %(first)s THEN e.ends END, "
    "x.session_seq, x.run_id, x.agent_id, x.session_id, x.seq, x.turn_id, x.event_key, x.type, "
    "(extract(epoch FROM x.ts) * 1000000)::int8, x.payload, x.checksum "
    "FROM agentledger_sessions s LEFT JOIN LATERAL ("
    " SELECT json_agg(json_build_array(r.run_id, r.status, l.seq, l.type)) AS ends"
    " FROM agentledger_runs r LEFT JOIN LATERAL (SELECT seq, type FROM agentledger_records"
    " WHERE run_id = r.run_id ORDER BY seq DESC LIMIT 1) l ON true"
    " WHERE s.last_seq <= %(last)s AND r.session_id = s.id AND r.status <> 'running') e ON true "
    "LEFT JOIN LATERAL ("
    " SELECT * FROM agentledger_records"
    " WHERE session_id = s.id AND session_seq > %(start)s ORDER BY session_seq LIMIT %(size)s"
    ") x ON true WHERE s.id = %(id)s ORDER BY x.session_seq"
)
_FIRST_ORPHAN = (
    "SELECT r.run_id, r.seq FROM agentledger_records r WHERE r.session_id = %s "
    "AND r.session_seq > %s AND r.seq > 1 AND NOT EXISTS (SELECT 1 FROM agentledger_records p "
    "WHERE p.run_id = r.run_id AND p.seq = r.seq - 1) ORDER BY r.session_seq LIMIT 1"
)
"""The first record after a position whose run's record before it is not stored
(damage path only)."""
_SESSION_ENDS = (
    "SELECT r.run_id, r.status, x.seq, x.type FROM agentledger_runs r LEFT JOIN LATERAL ("
    " SELECT seq, type FROM agentledger_records WHERE run_id = r.run_id"
    " ORDER BY seq DESC LIMIT 1) x ON true "
    "WHERE r.session_id = %s AND r.status <> 'running'"
)
"""Each ended run of a session and its newest stored record (damage path only)."""
_SESSION_STORED_NEWEST = "SELECT max(session_seq) FROM agentledger_records WHERE session_id = %s"
"""The newest position stored (damage path only: the session row keeps its own)."""
# A run's own row and its page: two statements, one snapshot (REPEATABLE READ),
# one round trip (pipelined). The page fetches only what varies within a run.
_RUN_ROW = f"SELECT {RUN_COLUMNS} FROM agentledger_runs WHERE run_id = %s"
_RUN_PAGE = (
    "SELECT seq, turn_id, event_key, type, (extract(epoch FROM ts) * 1000000)::int8, payload, "
    "checksum FROM agentledger_records WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s"
)
"""Run rows (see :mod:`agentledger.storage.pages`): ``ts`` as the microseconds its
checksum hashes, exact (``extract`` returns a numeric)."""
_CHAIN_HEADS = (
    "SELECT run_id, agent_id, session_id, status, last_seq FROM agentledger_runs "
    "WHERE run_id = %(run)s OR (session_id <> '' AND session_id = "
    "(SELECT session_id FROM agentledger_runs WHERE run_id = %(run)s))"
)
"""The heads of a run and of every run of its session: where its chain may lead."""
_CHAIN_REFERENCES = (
    "SELECT run_id, seq, turn_id, event_key, type, (extract(epoch FROM ts) * 1000000)::int8, "
    "payload, checksum FROM agentledger_records WHERE type = 'transcript_messages_referenced' "
    "AND session_id <> '' AND session_id = "
    "(SELECT session_id FROM agentledger_runs WHERE run_id = %(run)s)"
)
_CHAIN_HEAD = (
    "SELECT run_id, agent_id, session_id, status, last_seq FROM agentledger_runs "
    "WHERE run_id = %(run)s"
)
_CHAIN_SCAN = (
    "SELECT run_id, seq, turn_id, event_key, type, (extract(epoch FROM ts) * 1000000)::int8, "
    "payload, checksum, session_seq FROM agentledger_records WHERE type IN "
    "('transcript_messages_referenced', 'transcript_window_applied') "
    "AND session_id <> '' AND session_id = "
    "(SELECT session_id FROM agentledger_runs WHERE run_id = %(run)s) "
    "AND session_seq < %(before)s AND session_seq <= (SELECT session_seq "
    "FROM agentledger_records WHERE run_id = %(run)s ORDER BY seq DESC LIMIT 1) "
    "ORDER BY session_seq DESC LIMIT %(limit)s"
)
"""A session's references and windows, newest first, a batch at a time (one partial
index, migration 10), until :class:`~agentledger.storage.transcript_chain.ChainScan`
has what the walk needs."""
_CHAIN_RUN_WINDOWS = (
    "SELECT run_id, seq, turn_id, event_key, type, (extract(epoch FROM ts) * 1000000)::int8, "
    "payload, checksum FROM agentledger_records "
    "WHERE run_id = %(run)s AND type = 'transcript_window_applied'"
)
"""The windows of a run without a session."""
_CHAIN_NAMED_HEADS = (
    "SELECT run_id, agent_id, session_id, status, last_seq FROM agentledger_runs "
    "WHERE run_id = ANY(%(runs)s) AND session_id = %(session)s"
)
"""The heads of the runs a windowed scan's rows belong to or name, in the session."""
_SCAN_BATCH = 64
_CHAIN_ROWS = (
    "SELECT r.run_id, r.seq, r.turn_id, r.event_key, r.type, "
    "(extract(epoch FROM r.ts) * 1000000)::int8, r.payload, r.checksum "
    "FROM unnest(%s::text[], %s::int8[], %s::int8[]) AS c(run_id, first, through) "
    "JOIN agentledger_records r ON r.run_id = c.run_id "
    "AND r.seq BETWEEN c.first AND c.through "
    "ORDER BY c.run_id, r.seq"
)
_US = 1_000_000
_ALL = 2**62
"""A LIMIT no log reaches."""
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
        query = {"id": scope_id, "start": start, "size": size}
        query |= {"first": start + 1, "last": start + size}
        rows = await (await loader.conn.execute(_SESSION_WITH_PAGE, query)).fetchall()
        if rows:  # labels come as text on every row; parsed once, here
            *head, labels, last_seq = rows[0][:_SESSION_WIDTH]
            loader.keep_session((*head, json.loads(labels), last_seq))
        else:
            loader.cache.sessions[scope_id] = None
        newest = await decide(loader, require)
        session_pages.session_start(scope_id, cursor, newest)
        width = _SESSION_WIDTH + 1  # then the ended runs, then the session row
        page = [row[width:] for row in rows if row[width] is not None]
        ends = [session_pages.SessionEnd(*end) for end in rows[0][_SESSION_WIDTH] or ()]
        return await _session_page(loader, scope_id, page, ends, start, size, newest)

    return read


async def _session_page(
    loader: Loader,
    session_id: str,
    rows: list[Any],
    ends: list[session_pages.SessionEnd],
    start: int,
    size: int,
    newest: int,
) -> Page:
    """[L9] the session page of ``rows`` (see :mod:`..session_pages`).

    ``ends``: each ended run and its newest record, read with the last page. Positions
    here are gap-free ``1..newest``: on a page that holds exactly the positions it
    should, they vouch for the record before each run's first one on the page (a
    deleted one leaves a gap), so an intact page costs no more statements. A page
    that skips a position is damaged; what is stored is then read (more statements,
    on this path only) so the damage is named as every backend names it, by its run
    and record; only damage no other check sees is reported by position.
    """
    positions = [row[0] for row in rows]
    session_pages.check_order(rows, None)
    records = session_pages.session_records(rows, per_second=_US, sealer=loader.sealer)
    statuses = await _completed_statuses(loader, records)
    if positions == list(range(start + 1, min(start + size, newest) + 1)):
        end = session_pages.page_end(rows, start)
        return session_pages.session_page(
            session_id, records, end=end, newest=newest, statuses=statuses, ends=lambda: ends
        )
    conn = loader.conn
    stored = await (await conn.execute(_SESSION_STORED_NEWEST, (session_id,))).fetchone()
    ends = [
        session_pages.SessionEnd(*row)
        for row in await (await conn.execute(_SESSION_ENDS, (session_id,))).fetchall()
    ]  # as stored: this page may be the last of what is stored, not of the session row's
    session_pages.session_page(  # raises if the page reaches the end of what is stored
        session_id,
        records,
        end=session_pages.page_end(rows, start),
        newest=(stored[0] if stored else None) or 0,
        statuses=statuses,
        ends=lambda: ends,
    )
    orphan = await (await conn.execute(_FIRST_ORPHAN, (session_id, start))).fetchone()
    if orphan is not None:  # as a backend with gaps in its positions finds it, later on
        raise session_pages.missing_before(orphan[0], orphan[1])
    raise session_pages.position_gap(session_id, start, positions)


async def _completed_statuses(
    loader: Loader, records: tuple[Record, ...]
) -> dict[str, RunStatus | None]:
    """The status of each run whose ``run_completed`` is among ``records`` (None: purged)."""
    completed = sorted(lifecycle.completed_runs(records))
    if not completed:
        return {}
    runs = await decide(loader, lambda reader: [reader.run(r) for r in completed])
    return {r: None if run is None else run.status for r, run in zip(completed, runs, strict=True)}


async def _run_rows(
    loader: Loader, run_id: str, require: Callable[[StateReader], int], start: int, size: int
) -> tuple[RunHead, list[Any]]:
    """The run's row, then its run rows after ``start`` (at most ``size``): two
    statements, one snapshot (REPEATABLE READ), one round trip (pipelined).

    Raises what ``require`` raises for a missing run.
    """
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
    assert run is not None  # require() raised otherwise
    return RunHead(run.agent_id, run.session_id, newest, run.status), rows


async def _run_page(
    loader: Loader,
    run_id: str,
    require: Callable[[StateReader], int],
    cursor: str,
    start: int,
    size: int,
) -> Page:
    """One page of a run's log: the run's row once, then only the columns that vary."""
    head, rows = await _run_rows(loader, run_id, require, start, size)
    decode_cursor(cursor, "run", run_id, head.newest)
    return run_page(
        run_id, head, rows, start=start, size=size, per_second=_US, sealer=loader.sealer
    )


def transcript_reader(
    run_id: str, require: Callable[[StateReader], int]
) -> Callable[[Loader], Awaitable[list[bytes]]]:
    """[R2] a read of a run's transcript payloads: its whole log in one round trip,
    checked as a listing of it is (see :func:`..pages.split_transcript`)."""

    async def read(loader: Loader) -> list[bytes]:
        try:
            require_id("run_id", run_id)
        except ValidationError:
            await decide(loader, require)
            raise
        head, rows = await _run_rows(loader, run_id, require, 0, _ALL)
        return split_transcript(run_id, head, rows, per_second=_US, sealer=loader.sealer)

    return read


def chain_reader(
    run_id: str, *, windowed: bool = False
) -> Callable[[Loader], Awaitable[tuple[TranscriptSegment, ...]]]:
    """[V4] a read of a run's transcript chain: the session's run heads and history
    references, then the chain's rows; two round trips in one snapshot (REPEATABLE
    READ), however long the chain (see :mod:`..transcript_chain`)."""

    async def read(loader: Loader) -> tuple[TranscriptSegment, ...]:
        require_id("run_id", run_id)
        conn = loader.conn
        query = {"run": run_id, "before": _ALL, "limit": _SCAN_BATCH}
        try:
            async with conn.pipeline():  # one sync on leaving: one round trip
                await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                heads_cur = await conn.execute(_CHAIN_HEAD if windowed else _CHAIN_HEADS, query)
                index_query = _CHAIN_SCAN if windowed else _CHAIN_REFERENCES
                refs_cur = await conn.execute(index_query, query)
            heads = _heads(await heads_cur.fetchall())
            ref_rows = await refs_cur.fetchall()
            if run_id not in heads:
                await conn.execute("COMMIT")
                loader.cache.runs[run_id] = None
                await decide(loader, lambda r: lifecycle.require_run(r, run_id))
                raise AssertionError("require_run found a run the chain query did not")
            if windowed:
                heads, ref_rows = await _windowed_rows(loader, heads[run_id], run_id, ref_rows)
            index = reference_records(ref_rows, heads, per_second=_US, sealer=loader.sealer)
            links = chain_links(run_id, heads, index, windowed=windowed)
            async with conn.pipeline():
                cur = await conn.execute(
                    _CHAIN_ROWS,
                    (
                        [link.run_id for link in links],
                        [link.first for link in links],
                        [link.through for link in links],
                    ),
                )
                await conn.execute("COMMIT")
            chain_rows = await cur.fetchall()
            grouped: dict[str, list[Any]] = {}
            for row in chain_rows:
                grouped.setdefault(row[0], []).append(row[1:])
        except BaseException:
            if not conn.closed and conn.info.transaction_status != pq.TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    await conn.execute("ROLLBACK")
            raise
        return chain_segments(links, heads, grouped, per_second=_US, sealer=loader.sealer)

    return read


def _heads(rows: Sequence[Sequence[Any]]) -> dict[str, RunHead]:
    heads: dict[str, RunHead] = {}
    for rid, agent_id, session_id, status, newest in rows:
        try:
            heads[rid] = RunHead(agent_id, session_id, newest, RunStatus(status))
        except ValueError as e:
            raise CorruptRecordError(run_id=rid, record_id="", reason=f"run row: {e}") from e
    return heads


async def _windowed_rows(
    loader: Loader, head: RunHead, run_id: str, first: list[Any]
) -> tuple[dict[str, RunHead], list[Any]]:
    """[V5] the references and windows a windowed chain needs (``first``: the first
    batch, newest first), read on until the walk has them, and the heads of the runs they
    name; one more round trip in the common case."""
    conn = loader.conn
    if not head.session_id:  # its own windows only
        cur = await conn.execute(_CHAIN_RUN_WINDOWS, {"run": run_id})
        return {run_id: head}, list(await cur.fetchall())
    sealer, session_id = loader.sealer, head.session_id

    def open_payload(row: Sequence[Any]) -> bytes:
        if sealer is None:
            return bytes(row[6])
        return sealer.run_opener(session_id, row[0], row[1])([row[1:]])[0]

    scan = ChainScan(run_id, head.newest, open_payload)
    batch = first
    while not scan.add(row[:8] for row in batch) and len(batch) == _SCAN_BATCH:
        query = {"run": run_id, "before": batch[-1][8], "limit": _SCAN_BATCH}
        batch = list(await (await conn.execute(_CHAIN_SCAN, query)).fetchall())
    named = {"runs": sorted(scan.named), "session": session_id}
    heads = _heads(await (await conn.execute(_CHAIN_NAMED_HEADS, named)).fetchall())
    heads[run_id] = head
    return heads, scan.rows
