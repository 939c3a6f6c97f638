"""The StateReader over one SQLite connection, inside the caller's transaction.

The shared decisions read through it; listings read through it too, so every
read of one operation sees one snapshot. It returns exactly what is stored
(payload bytes, types, keys), so damaged rows surface as
:class:`~agentledger.errors.CorruptRecordError` in the decisions instead of
being smoothed over here.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from agentledger.errors import CorruptRecordError, ValidationError
from agentledger.storage import chain_rows, lifecycle, pages, session_pages
from agentledger.storage import transcript_chain as chain
from agentledger.storage.cursor import decode_cursor
from agentledger.storage.derivation import HISTORY_COPIED, DerivedCopy, derived_copy, summaries_of
from agentledger.storage.integrity import verified_tool_result
from agentledger.storage.listing import SessionQuery
from agentledger.storage.message_rows import MESSAGE_COLUMNS, message_from_row
from agentledger.storage.payloads import TRANSCRIPT_WINDOW
from agentledger.storage.receipts import decode_receipt
from agentledger.storage.search import SearchPage, SearchQuery
from agentledger.storage.sqlite import search
from agentledger.storage.sqlite.inline_reads import MAX_RECORDS, Declined
from agentledger.storage.sqlite.rows import (
    RECORD_COLUMNS,
    RUN_COLUMNS,
    RUN_PAGE_COLUMNS,
    SESSION_COLUMNS,
    decode_record,
    decode_records,
    decode_run,
    decode_session,
    from_ms,
    unverified_record,
)
from agentledger.storage.sqlite.session_list import session_list
from agentledger.storage.state import Plan, RunRow, SessionRow, StateReader
from agentledger.storage.types import (
    Page,
    PurgeReceipt,
    Record,
    RunMeta,
    RunStatus,
    SessionMessage,
    SessionPage,
    TranscriptSegment,
)
from agentledger.storage.validation import check_limit, require_id

if TYPE_CHECKING:
    from agentledger.storage.encryption import Encryption

__all__ = ["RowCache", "SQLiteReader"]

_SESSION = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?"
_SESSION_PURGED = "SELECT 1 FROM session_tombstones WHERE id = ?"
_PURGE_RECEIPT = "SELECT receipt FROM session_tombstones WHERE id = ?"
_SESSION_CONTENT_RUNS = (
    f"SELECT {RUN_COLUMNS}, checkpoints.id, checkpoints.data FROM runs "
    "LEFT JOIN checkpoints ON checkpoints.run_id = runs.run_id "
    "WHERE runs.session_id = ? ORDER BY runs.pos"
)
_SESSION_CONTENT_RECORDS = f"SELECT {RECORD_COLUMNS} FROM records WHERE session_id = ? ORDER BY pos"
_RUN = (
    f"SELECT {RUN_COLUMNS}, checkpoints.id, checkpoints.data FROM runs "
    "LEFT JOIN checkpoints ON checkpoints.run_id = runs.run_id WHERE runs.run_id = ?"
)
_RUN_BOUNDED = (
    f"SELECT {RUN_COLUMNS}, checkpoints.id, "
    "CASE WHEN length(checkpoints.data) <= :bound THEN checkpoints.data END, "
    "length(checkpoints.data) FROM runs "
    "LEFT JOIN checkpoints ON checkpoints.run_id = runs.run_id WHERE runs.run_id = :run"
)
""":data:`_RUN` for a bounded read: the checkpoint only if it is small, and its size."""
_RUN_PURGED = "SELECT session_id FROM run_tombstones WHERE run_id = ?"
_RECORD = f"SELECT {RECORD_COLUMNS} FROM records WHERE run_id = ? AND event_key = ?"
_TOOL_RESULT = "SELECT data, checksum FROM tool_results WHERE run_id = ? AND call_key = ?"
_TOOL_RESULT_BOUNDED = (
    "SELECT CASE WHEN length(data) <= ? THEN data END, checksum, length(data) "
    "FROM tool_results WHERE run_id = ? AND call_key = ?"
)
_MESSAGE = f"SELECT {MESSAGE_COLUMNS} FROM session_messages WHERE run_id = ?"
_WAITING = (
    f"SELECT {MESSAGE_COLUMNS} FROM session_messages WHERE session_id = ? AND started = 0 "
    "ORDER BY pos"
)
_LATEST_MESSAGE = (
    f"SELECT {MESSAGE_COLUMNS} FROM session_messages WHERE session_id = ? ORDER BY pos DESC LIMIT 1"
)
_MESSAGES = f"SELECT {MESSAGE_COLUMNS} FROM session_messages WHERE session_id = ? ORDER BY pos"
_RUNNING = "SELECT run_id FROM runs WHERE session_id = ? AND status = 'running' ORDER BY pos"
_SESSION_RUNS = f"SELECT {RUN_COLUMNS}, NULL, NULL FROM runs WHERE session_id = ? ORDER BY pos"


# A run's constant ids, its newest seq and one page of its log: one statement, so
# one snapshot without a transaction around it. The head comes first, as a row
# of seq 0 (a record's seq is at least 1), then the page's rows: no column of
# the head is repeated per record.
_RUN_PAGE = (
    "WITH head AS MATERIALIZED (SELECT agent_id, session_id, status, coalesce(("
    "SELECT seq FROM records WHERE records.run_id = runs.run_id ORDER BY seq DESC LIMIT 1"
    "), 0) AS newest FROM runs WHERE run_id = :run) "
    "SELECT 0, agent_id, session_id, status, newest, NULL, NULL FROM head UNION ALL "
    f"SELECT {RUN_PAGE_COLUMNS} FROM head, records WHERE records.run_id = :run "
    "AND records.seq > :start AND records.seq <= min(:start + :size, head.newest)"
)
"""No ORDER BY: the rows come in index order after the head, which
:meth:`SQLiteReader._run_rows` checks (and restores if ever needed) instead of
paying for a sort."""
_RUN_PAGE_BOUNDED = (
    "WITH run AS MATERIALIZED (SELECT agent_id, session_id, status, coalesce(("
    "SELECT seq FROM records WHERE records.run_id = runs.run_id ORDER BY seq DESC LIMIT 1"
    "), 0) AS newest FROM runs WHERE run_id = :run), "
    "head AS MATERIALIZED (SELECT agent_id, session_id, status, newest, "
    "CASE WHEN :whole AND newest > :start + :size THEN NULL ELSE ("
    "SELECT coalesce(sum(length(payload)), 0) FROM records WHERE records.run_id = :run "
    "AND records.seq > :start AND records.seq <= :start + :size) END AS bytes FROM run) "
    "SELECT 0, agent_id, session_id, status, newest, bytes, NULL FROM head UNION ALL "
    f"SELECT {RUN_PAGE_COLUMNS} FROM head, records WHERE records.run_id = :run "
    "AND records.seq > :start AND records.seq <= CASE WHEN bytes <= :bound "
    "THEN min(:start + :size, head.newest) ELSE :start END"
)
""":data:`_RUN_PAGE` for a bounded read (see :mod:`.inline_reads`): the head also
sums the page's payload sizes (``length`` reads no overflow page), and the page
is empty if they pass ``:bound``; with ``:whole``, a log that goes on past the
page gets no sum (NULL) and no rows. Either way the index range is empty: no
row is visited."""
_COPIES = (  # a literal type: the partial index records_copies answers it
    f"SELECT {RECORD_COLUMNS} FROM records WHERE type = '{HISTORY_COPIED}' ORDER BY session_id, pos"
)
_RUN_LOG = f"SELECT {RECORD_COLUMNS} FROM records WHERE run_id = ? ORDER BY seq"
_SESSION_WINDOWS = (  # [G2] a holder's compaction summaries (a holder session's records)
    f"SELECT {RECORD_COLUMNS} FROM records WHERE session_id = ? AND type = '{TRANSCRIPT_WINDOW}' "
    "ORDER BY pos"
)
# The newest record of each ended run of a session: its log must end with what ended it.
_SESSION_ENDS = (
    "SELECT runs.run_id, runs.status, records.seq, records.type FROM runs "
    "LEFT JOIN records ON records.run_id = runs.run_id AND records.seq = ("
    "SELECT max(seq) FROM records AS newest WHERE newest.run_id = runs.run_id) "
    "WHERE runs.session_id = ? AND runs.status != 'running'"
)
"""The newest record of each ended run of a session, by id and type (pages verify its bytes)."""
_RECORD_POS = "SELECT pos FROM records WHERE run_id = ? AND seq = ?"
_SESSION_NEWEST = "SELECT max(pos) FROM records WHERE session_id = ?"
_SESSION_PAGE = (
    f"SELECT pos, run_id, agent_id, session_id, {RUN_PAGE_COLUMNS} FROM records "
    "WHERE session_id = ? AND pos > ? ORDER BY pos LIMIT ?"
)
"""Session rows (see :mod:`..session_pages`)."""


_CHAIN_HEADS = (
    "SELECT run_id, agent_id, session_id, status, coalesce(("
    "SELECT seq FROM records WHERE records.run_id = runs.run_id ORDER BY seq DESC LIMIT 1"
    "), 0) FROM runs WHERE run_id = :run UNION SELECT run_id, agent_id, session_id, status, "
    "coalesce((SELECT seq FROM records WHERE records.run_id = runs.run_id "
    "ORDER BY seq DESC LIMIT 1), 0) FROM runs "
    "WHERE session_id = (SELECT session_id FROM runs WHERE run_id = :run) AND session_id != ''"
)
"""The heads of a run and of every run of its session: where its chain may lead."""
_CHAIN_REFERENCES = (
    f"SELECT run_id, {RUN_PAGE_COLUMNS} FROM records "
    "WHERE session_id = ? AND type = 'transcript_messages_referenced'"
)
_CHAIN_HEAD = (
    "SELECT run_id, agent_id, session_id, status, coalesce(("
    "SELECT seq FROM records WHERE records.run_id = runs.run_id ORDER BY seq DESC LIMIT 1"
    "), 0) FROM runs WHERE run_id = :run"
)
_CHAIN_WINDOWS = (
    f"SELECT run_id, {RUN_PAGE_COLUMNS} FROM records WHERE session_id = ? "
    "AND type IN ('transcript_messages_referenced', 'transcript_window_applied') "
    "AND pos <= (SELECT pos FROM records WHERE run_id = ? ORDER BY seq DESC LIMIT 1) "
    "ORDER BY pos DESC"
)
"""A session's references and windows, newest first from the run's own newest record
(nothing later can be in its chain), from one partial index (migration 12): read until
:class:`~agentledger.storage.transcript_chain.ChainScan` has enough."""
_CHAIN_NAMED_HEADS = (
    "SELECT run_id, agent_id, session_id, status, coalesce(("
    "SELECT seq FROM records WHERE records.run_id = runs.run_id ORDER BY seq DESC LIMIT 1"
    "), 0) FROM runs WHERE +session_id = ? AND run_id IN (SELECT value FROM json_each(?))"
)
"""The heads of the runs a windowed scan's rows belong to or name, in the session."""
_SCAN_BATCH = 64
"""References and windows read by a windowed scan's first batch; each next batch reads twice
as many, so a scan that must go far back (a long conversation with no window) asks
:class:`~agentledger.storage.transcript_chain.ChainScan` a few times, not once per 64 rows."""
_CHAIN_ROWS = (
    "WITH chain(run_id, first, through) AS (SELECT json_extract(value, '$[0]'), "
    "json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?)) "
    f"SELECT records.run_id, {RUN_PAGE_COLUMNS} FROM chain JOIN records "
    "ON records.run_id = chain.run_id AND records.seq BETWEEN chain.first AND chain.through"
)
"""No ORDER BY: each run's rows come in index order, which the checks restore if ever not."""
_CHAIN_ROWS_ONE = f"SELECT {RUN_PAGE_COLUMNS} FROM records WHERE run_id = ? AND seq BETWEEN ? AND ?"
"""A chain of one run (no reference): the common reload, without the join."""
_LEAN_ROWS = (
    "WITH chain(link, run_id, first, through) AS (SELECT key, json_extract(value, '$[0]'), "
    "json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?)) "
    f"SELECT chain.link, {chain_rows.lean_columns('records.')} FROM chain JOIN records "
    "ON records.run_id = chain.run_id AND records.seq BETWEEN chain.first AND chain.through "
    f"WHERE records.{chain_rows.WITHOUT_REFERENCES}"
)
""":data:`_CHAIN_ROWS` as lean rows (see :mod:`...chain_rows`): the link's index, a type's
code, and no history reference (the walk read them). No ORDER BY: the rows come in
link then index order (json_each's, then the index's), which the checks restore if ever not."""
_CHAIN_RUN_WINDOWS = (
    f"SELECT {RUN_PAGE_COLUMNS} FROM records "
    "WHERE run_id = ? AND type = 'transcript_window_applied'"
)
"""The windows of a run without a session (its log's own index)."""


_STATUSES: dict[object, RunStatus] = {status.value: status for status in RunStatus}
"""A stored status text as its :class:`RunStatus` (a dict lookup: a chain reads hundreds)."""


class RowCache:
    """Run and session rows the write connection saw, kept while nobody else commits.

    ``PRAGMA data_version`` changes exactly when another connection, in any
    process, has committed since this connection last looked. Until then the
    rows this connection read under its write lock, or committed itself, are
    what the file holds, so an append need not read and decode its run and
    session again. Records are never cached: lifecycle checks always read
    them back from the file [J1].
    """

    __slots__ = ("_version", "limit", "runs", "sessions")

    def __init__(self, limit: int = 4096) -> None:
        self._version: object = None
        self.limit = limit
        """Forget everything beyond this many runs (a bound, not an LRU)."""
        self.runs: dict[str, RunRow] = {}
        self.sessions: dict[str, SessionRow] = {}

    def validate(self, conn: sqlite3.Connection | sqlite3.Cursor) -> RowCache:
        """Drop every row if another connection committed; call right after BEGIN
        (on the write connection, or a cursor of it).

        Returns the cache itself: it is the writer's per-transaction context.
        """
        (version,) = conn.execute("PRAGMA data_version").fetchone()
        if version != self._version or len(self.runs) > self.limit:
            self.runs.clear()
            self.sessions.clear()
            self._version = version
        return self

    def clear(self) -> None:
        """Forget every row: the transaction that read or wrote them failed."""
        self.runs.clear()
        self.sessions.clear()
        self._version = None

    def committed(self, plan: Plan[Any]) -> None:
        """Keep the rows ``plan`` wrote in the open transaction.

        The writer runs later operations of the same transaction through this
        cache, and calls :meth:`clear` if that transaction fails.
        """
        if plan.purge_session:
            self.runs.clear()
            self.sessions.clear()
            return
        if plan.session is not None:
            self.sessions[plan.session.id] = plan.session
        for row in plan.runs:
            self.runs[row.run_id] = row


class SQLiteReader(StateReader):
    """Reads of one transaction on ``conn``; run rows are remembered for the writer.

    Within a transaction nothing else can change what was read (the write
    lock, or the read snapshot, is held), so a run read once is read once.
    The writer passes its :class:`RowCache` (already validated for this
    transaction); readers on other connections pass none.
    """

    __slots__ = ("_cache", "_conn", "_fresh_keys", "max_bytes", "runs_read", "sealer")

    def __init__(
        self,
        conn: sqlite3.Connection,
        cache: RowCache | None = None,
        *,
        fresh_keys: bool = False,
        sealer: Encryption | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self._conn = conn
        self._cache = cache
        self.sealer = sealer
        """Encryption at rest [A2]: payloads and checkpoints are opened as read
        (and sealed by :func:`~.apply.apply_plan` as written); None: plaintext."""
        self._fresh_keys = fresh_keys
        """Answer every record lookup "absent" without reading: the caller's
        INSERT must then prove it (see ``SQLiteStore``'s insert-first appends)."""
        self.runs_read: dict[str, RunRow | None] = {}
        """Every run this transaction looked up, as found (None: absent)."""
        self.max_bytes = max_bytes
        """A bounded read (see :mod:`.inline_reads`): a checkpoint, tool result or
        run page's payloads over this many bytes is not fetched but raises
        :class:`~.inline_reads.Declined`; None: no bound."""

    # StateReader -------------------------------------------------------------

    def session(self, session_id: str) -> SessionRow | None:
        cache = self._cache
        if cache is not None and session_id in cache.sessions:
            return cache.sessions[session_id]
        row = self._conn.execute(_SESSION, (session_id,)).fetchone()
        session = None if row is None else decode_session(row)
        if cache is not None and session is not None:
            cache.sessions[session_id] = session
        return session

    def session_purged(self, session_id: str) -> bool:
        return self._conn.execute(_SESSION_PURGED, (session_id,)).fetchone() is not None

    def run(self, run_id: str) -> RunRow | None:
        runs_read = self.runs_read
        if run_id in runs_read:
            return runs_read[run_id]
        cache = self._cache
        run = None if cache is None else cache.runs.get(run_id)
        if run is None:
            row = self._run_row(run_id)
            run = None if row is None else decode_run(row)
            if run is not None and run.checkpoint is not None and self.sealer is not None:
                opened = self.sealer.open_checkpoint(run.session_id, run_id, run.checkpoint)
                run = msgspec.structs.replace(run, checkpoint=opened)
            if cache is not None and run is not None:
                cache.runs[run_id] = run
        self.runs_read[run_id] = run
        return run

    def _run_row(self, run_id: str) -> Any:
        bound = self.max_bytes
        if bound is None:
            return self._conn.execute(_RUN, (run_id,)).fetchone()
        row = self._conn.execute(_RUN_BOUNDED, {"run": run_id, "bound": bound}).fetchone()
        if row is not None and row[-1] is not None and row[-1] > bound:
            raise Declined
        return None if row is None else row[:-1]

    def purged_run_session(self, run_id: str) -> str | None:
        row = self._conn.execute(_RUN_PURGED, (run_id,)).fetchone()
        return None if row is None else str(row[0])

    def record(self, run_id: str, event_key: str) -> Record | None:
        if self._fresh_keys:
            return None
        row = self._conn.execute(_RECORD, (run_id, event_key)).fetchone()
        if row is None:
            return None
        record = decode_record(row)
        return record if self.sealer is None else self.sealer.open_record(record)

    def running_run_ids(self, session_id: str) -> list[str]:
        return [str(run_id) for (run_id,) in self._conn.execute(_RUNNING, (session_id,))]

    def session_message(self, run_id: str) -> SessionMessage | None:
        row = self._conn.execute(_MESSAGE, (run_id,)).fetchone()
        return None if row is None else message_from_row(row, from_ms, self.sealer)

    def pending_messages(self, session_id: str) -> list[SessionMessage]:
        rows = self._conn.execute(_WAITING, (session_id,))
        return [message_from_row(row, from_ms, self.sealer) for row in rows]

    def latest_message(self, session_id: str) -> SessionMessage | None:
        row = self._conn.execute(_LATEST_MESSAGE, (session_id,)).fetchone()
        return None if row is None else message_from_row(row, from_ms, self.sealer)

    def session_messages(self, session_id: str) -> list[SessionMessage]:
        rows = self._conn.execute(_MESSAGES, (session_id,))
        return [message_from_row(row, from_ms, self.sealer) for row in rows]

    def purge_receipt(self, session_id: str) -> PurgeReceipt:
        row = self._conn.execute(_PURGE_RECEIPT, (session_id,)).fetchone()
        if row is None:
            raise AssertionError(f"purge_receipt asked for session {session_id!r}, not purged")
        return decode_receipt(session_id, row[0])

    def session_contents(self, session_id: str) -> tuple[list[RunRow], list[Record]]:
        runs = [decode_run(row) for row in self._conn.execute(_SESSION_CONTENT_RUNS, (session_id,))]
        rows = self._conn.execute(_SESSION_CONTENT_RECORDS, (session_id,)).fetchall()
        records = list(decode_records(rows))
        if self.sealer is not None:
            return self.sealer.open_contents(runs, records)
        return runs, records

    def tool_result(self, run: RunRow, call_key: str) -> bytes | None:
        bound = self.max_bytes
        if bound is None:
            row = self._conn.execute(_TOOL_RESULT, (run.run_id, call_key)).fetchone()
        else:
            row = self._conn.execute(_TOOL_RESULT_BOUNDED, (bound, run.run_id, call_key)).fetchone()
            if row is not None and row[2] is not None and row[2] > bound:
                raise Declined
        if row is None:
            return None
        data = verified_tool_result(run.run_id, call_key, row[0], row[1])
        if self.sealer is None:
            return data
        return self.sealer.open_tool_result(run.session_id, run.run_id, call_key, data)

    def damaged_records(self, run_id: str) -> list[Record]:
        if self._fresh_keys:  # a guess: any refusal is decided again on what is stored
            return []
        return [
            damaged
            for row in self._conn.execute(_RUN_LOG, (run_id,))
            if (damaged := unverified_record(row)) is not None
        ]

    # Listings ----------------------------------------------------------------

    def run_page(self, run_id: str, cursor: str, limit: int) -> Page:
        """[L9] records after the cursor on one run's log; positions are seqs.

        Needs no transaction: the run's head and the page are one statement.
        """
        require_id("run_id", run_id)
        try:
            size = check_limit(limit)
            start = decode_cursor(cursor, "run", run_id, sys.maxsize)  # checked again below
        except ValidationError:
            lifecycle.require_run(self, run_id)  # a missing run is the first error to report
            raise
        head, rows = self._run_rows(run_id, start, size)
        if start > head.newest:
            decode_cursor(cursor, "run", run_id, head.newest)  # raises: past the end of the log
        return pages.run_page(
            run_id, head, rows, start=start, size=size, per_second=1000, sealer=self.sealer
        )

    def transcript_payloads(self, run_id: str) -> list[bytes]:
        """[R2] a run's transcript payloads, its whole log read and checked as pages are.

        One statement (one snapshot, no transaction); see :func:`..pages.split_transcript`.
        """
        require_id("run_id", run_id)
        size = sys.maxsize if self.max_bytes is None else MAX_RECORDS
        head, rows = self._run_rows(run_id, 0, size, whole=True)
        return pages.split_transcript(run_id, head, rows, per_second=1000, sealer=self.sealer)

    def transcript_chain(
        self, run_id: str, *, windowed: bool = False
    ) -> tuple[TranscriptSegment, ...]:
        """[V4] a run's transcript chain in three statements (see :mod:`..transcript_chain`);
        windowed [V5], in four, the scan of references and windows stopping early.
        In plaintext the rows of a chain of several runs are read lean (see
        :mod:`...chain_rows`).

        Call inside a read transaction: the statements must see one snapshot.
        """
        require_id("run_id", run_id)
        heads = self._heads(_CHAIN_HEAD if windowed else _CHAIN_HEADS, {"run": run_id})
        if run_id not in heads:
            lifecycle.require_run(self, run_id)  # raises the error that says why
        session_id = heads[run_id].session_id
        index = chain.ChainIndex({}, {})
        if session_id and windowed:
            heads, index = self._windowed_index(run_id, heads[run_id])
        elif session_id:
            rows = self._conn.execute(_CHAIN_REFERENCES, (session_id,)).fetchall()
            index = chain.reference_records(rows, heads, per_second=1000, sealer=self.sealer)
        elif windowed:  # a run without a session has no references, but may have windows
            rows = self._conn.execute(_CHAIN_RUN_WINDOWS, (run_id,)).fetchall()
            rows = [(run_id, *row) for row in rows]
            index = chain.reference_records(rows, heads, per_second=1000, sealer=self.sealer)
        links = chain.chain_links(run_id, heads, index, windowed=windowed)
        if self.sealer is None and len(links) > 1:  # one link holds no reference to leave out
            query = msgspec.json.encode([[k.run_id, k.first, k.through] for k in links])
            rows = self._conn.execute(_LEAN_ROWS, (query,)).fetchall()
            try:
                return chain_rows.lean_segments(links, heads, rows, per_second=1000)
            except chain_rows.NotLean:
                pass  # a gap, or a reference the walk did not take: read the chain whole
        grouped: dict[str, list[Any]] = {}
        if len(links) == 1:
            (link,) = links
            grouped[run_id] = self._conn.execute(
                _CHAIN_ROWS_ONE, (link.run_id, link.first, link.through)
            ).fetchall()
        else:
            query = msgspec.json.encode([[k.run_id, k.first, k.through] for k in links])
            for row in self._conn.execute(_CHAIN_ROWS, (query,)):
                grouped.setdefault(row[0], []).append(row[1:])
        return chain.chain_segments(links, heads, grouped, per_second=1000, sealer=self.sealer)

    def _heads(self, statement: str, query: Any) -> dict[str, pages.RunHead]:
        heads: dict[str, pages.RunHead] = {}
        for rid, agent_id, session_id, status, newest in self._conn.execute(statement, query):
            known = _STATUSES.get(status)
            if known is None:
                reason = f"run row: {status!r} is not a valid RunStatus"
                raise CorruptRecordError(run_id=rid, record_id="", reason=reason)
            heads[rid] = pages.RunHead(agent_id, session_id, newest, known)
        return heads

    def _windowed_index(
        self, run_id: str, head: pages.RunHead
    ) -> tuple[dict[str, pages.RunHead], chain.ChainIndex]:
        """[V5] the references and windows a windowed chain needs, read newest first until
        the walk has them, and the heads of the runs they name."""
        sealer, session_id = self.sealer, head.session_id

        def open_payload(row: Sequence[Any]) -> bytes:
            if sealer is None:
                return bytes(row[6])
            return sealer.run_opener(session_id, row[0], row[1])([row[1:]])[0]

        scan = chain.ChainScan(run_id, head.newest, open_payload)
        cursor = self._conn.execute(_CHAIN_WINDOWS, (session_id, run_id))
        size = _SCAN_BATCH
        while True:
            batch = cursor.fetchmany(size)
            if scan.add(batch) or len(batch) < size:
                break
            size *= 2
        cursor.close()
        named = msgspec.json.encode(sorted(scan.named))
        heads = self._heads(_CHAIN_NAMED_HEADS, (session_id, named))
        heads[run_id] = head
        index = chain.reference_records(scan.rows, heads, per_second=1000, sealer=sealer)
        return heads, index

    def _run_rows(
        self, run_id: str, start: int, size: int, *, whole: bool = False
    ) -> tuple[pages.RunHead, list[Any]]:
        """The run's head and its run rows (:data:`RUN_PAGE_COLUMNS`) after ``start``;
        ``whole``: a bounded read declines a log that goes on past them."""
        query: dict[str, object] = {"run": run_id, "start": start, "size": size}
        bound = self.max_bytes
        if bound is None:
            rows = self._conn.execute(_RUN_PAGE, query).fetchall()
        else:
            query["bound"] = bound
            query["whole"] = whole
            rows = self._conn.execute(_RUN_PAGE_BOUNDED, query).fetchall()
        if not rows:
            lifecycle.require_run(self, run_id)  # raises the error that says why
            # Each statement reads its own snapshot: the run was started between the two
            # reads. It exists now, so the page query finds at least its head.
            return self._run_rows(run_id, start, size, whole=whole)
        if rows[0][0] != 0:
            rows.sort(key=lambda row: row[0])
        _, agent_id, session_id, status, newest, size_bytes, _ = rows.pop(0)
        if bound is not None and (size_bytes is None or size_bytes > bound):
            raise Declined  # the page's rows were not fetched
        try:
            return pages.RunHead(agent_id, session_id, newest, RunStatus(status)), rows
        except ValueError as e:
            raise CorruptRecordError(run_id=run_id, record_id="", reason=f"run row: {e}") from e

    def session_page(self, session_id: str, cursor: str, limit: int) -> Page:
        """[L9] records after the cursor in a session's commit order; positions are ``pos``
        (see :mod:`..session_pages`: this only fetches rows)."""
        lifecycle.require_session(self, session_id)
        size = check_limit(limit)
        (newest,) = self._conn.execute(_SESSION_NEWEST, (session_id,)).fetchone()
        newest = newest or 0
        start = session_pages.session_start(session_id, cursor, newest)
        rows = self._conn.execute(_SESSION_PAGE, (session_id, start, size)).fetchall()
        before: dict[tuple[str, int], int | None] = {}
        for run_id, seq in session_pages.entering(rows):
            found = self._conn.execute(_RECORD_POS, (run_id, seq)).fetchone()
            before[run_id, seq] = None if found is None else found[0]
        session_pages.check_order(rows, before)
        records = session_pages.session_records(rows, per_second=1000, sealer=self.sealer)
        statuses = {}
        for run_id in lifecycle.completed_runs(records):
            run = self.run(run_id)
            statuses[run_id] = None if run is None else run.status
        return session_pages.session_page(
            session_id,
            records,
            end=session_pages.page_end(rows, start),
            newest=newest,
            statuses=statuses,
            ends=lambda: [
                session_pages.SessionEnd(*row)
                for row in self._conn.execute(_SESSION_ENDS, (session_id,))
            ],
        )

    def session_runs(self, session_id: str, statuses: Collection[RunStatus]) -> list[RunMeta]:
        """The session's runs in start order, only those with ``statuses`` if any."""
        lifecycle.require_session(self, session_id)
        rows = (decode_run(row) for row in self._conn.execute(_SESSION_RUNS, (session_id,)))
        return [run.meta() for run in rows if not statuses or run.status in statuses]

    def derived_copies(self, session_id: str) -> list[DerivedCopy]:
        """[G2] the copies of ``session_id``'s history other sessions hold (records opened)."""
        rows = self._conn.execute(_COPIES).fetchall()
        found = []
        for row in rows:
            record = decode_record(row)
            if self.sealer is not None:
                record = self.sealer.open_record(record)
            copy = derived_copy(record)
            if copy.source.session_id == session_id:
                found.append(copy)
        windows = []
        for holder in dict.fromkeys(c.session_id for c in found):
            for row in self._conn.execute(_SESSION_WINDOWS, (holder,)):
                record = decode_record(row)
                windows.append(record if self.sealer is None else self.sealer.open_record(record))
        return summaries_of(found, windows)

    def usage_rows(self, sql: str, params: Sequence[object]) -> list[Any]:
        """[G3] The rows of a counter read (see :mod:`agentledger.storage.usage_sql`)."""
        return self._conn.execute(sql, params).fetchall()

    def session_list(self, query: SessionQuery) -> SessionPage:
        """[D6] one page of sessions newest first, filtered in SQL (see :mod:`..session_list`)."""
        return session_list(self._conn, query)

    # Search [G1] ---------------------------------------------------------------

    def search(self, query: SearchQuery) -> SearchPage:
        """One page of search hits newest first (see :mod:`..search`); the one session
        searched must exist."""
        if query.session_id:
            lifecycle.require_session(self, query.session_id)
        return search.search(self._conn, query)

    def search_purge(self, session_ids: Sequence[str]) -> tuple[int, list[tuple[str, Any, bool]]]:
        """How many messages of the first session the search index holds (what its purge
        removes), and the statements removing the words of all of them (see
        :mod:`..search`)."""
        return search.purge_statements(self._conn, session_ids, sealed=self.sealer is not None)
