"""[B3] An append in one statement: decide on the state last seen, write only if it still holds.

A writer that appends to a run usually appended to it (or started it) a moment
ago, so it already knows the run's row, the row's version (PostgreSQL's
``xmin``, which changes with every update of the row) and its session. The
store then runs the shared decision from :mod:`agentledger.storage.lifecycle`
on that remembered state, before any SQL, and sends one autocommit statement
that locks the session and the run (in the usual order) and applies the plan
only if the run's version, the session's status and the absence of every
event key the decision looked up are still what the decision saw. One round
trip and one commit, as raw psycopg's INSERT; nothing is written otherwise.

Only a plan that writes is sent this way. A refusal, an exact retry, a run
the decision needs more about, or a statement that wrote nothing is settled
by the locking transaction of :mod:`._store`, which decides again on fresh
state: every refusal is decided under locks, as before.
"""

from __future__ import annotations

import select
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import msgspec
from psycopg import AsyncConnection
from psycopg.errors import DivisionByZero
from psycopg.rows import TupleRow

from agentledger.errors import AgentledgerError
from agentledger.storage.accounting import token_rows
from agentledger.storage.postgres import search
from agentledger.storage.postgres import usage as usage_schema
from agentledger.storage.postgres.apply import USAGE, changed_columns
from agentledger.storage.postgres.reader import Missing
from agentledger.storage.postgres.rows import (
    RECORD_COLUMNS,
    RUN_COLUMNS,
    SESSION_COLUMNS,
    record_params,
    run_from_row,
    run_params,
    session_from_row,
)
from agentledger.storage.state import Plan, RunRow, SessionRow, StateReader
from agentledger.storage.types import DerivedCopy, PurgeReceipt, Record, SessionMessage

if TYPE_CHECKING:
    from agentledger.storage.encryption import Encryption

__all__ = [
    "RACED",
    "Guess",
    "Known",
    "KnownRuns",
    "Remembered",
    "Statement",
    "guess",
    "guess_statement",
    "healthy",
    "learn",
    "send_statements",
    "written",
]

_RUN_FIELDS = [c.strip() for c in RUN_COLUMNS.split(",")]
_NOT_GUESSED = {"run_id", "checkpoint_id", "checkpoint_data"}  # key; sealed data: slow path
_RECORD_TYPES = ("text", "text", "text", "text", "text", "text", "timestamptz", "bytea")
_RECORD_NAMES = [c.strip() for c in RECORD_COLUMNS.split(",")]
RACED = DivisionByZero
"""The error of a statement whose run changed after it took its session's positions: it
wrote nothing (the positions were given back with it); decide under locks instead."""
MAX_RECORDS = 200
"""Most records one statement carries (12 parameters each); a longer batch takes the
locking path, which writes them a thousand to an INSERT."""


@dataclass(frozen=True)
class Known:
    """What a store last wrote or read, under lock, of one run."""

    run: RunRow
    version: str
    """The run row's ``xmin`` as text: any later update of the row changes it."""
    session: SessionRow | None
    """The run's session as it was then (None for a run without one)."""


class KnownRuns:
    """The runs a store wrote last, newest last, at most ``capacity`` of them."""

    def __init__(self, capacity: int = 1024) -> None:
        self._runs: OrderedDict[str, Known] = OrderedDict()
        self._capacity = capacity

    def get(self, run_id: str) -> Known | None:
        return self._runs.get(run_id)

    def put(self, known: Known) -> None:
        """Remember ``known``; a run holding a checkpoint is not kept (it may be large)."""
        if known.run.checkpoint is not None:
            self.drop(known.run.run_id)
            return
        self._runs[known.run.run_id] = known
        self._runs.move_to_end(known.run.run_id)
        while len(self._runs) > self._capacity:
            self._runs.popitem(last=False)

    def drop(self, run_id: str) -> None:
        self._runs.pop(run_id, None)


class Remembered(StateReader):
    """A StateReader over the run a decision asks for first, as ``lookup`` knows it (a
    :class:`Known`, or None: then ``Missing``); record keys are assumed absent, and noted."""

    def __init__(self, lookup: Callable[[str], Known | None]) -> None:
        self.lookup = lookup
        self.known: Known | None = None
        self.asked: str | None = None
        """The run the decision asked for first: an id it checked before reading it."""
        self.absent: list[str] = []
        self.none_steering = False
        """The decision found no steering message waiting for the run; it must still be so."""

    def session(self, session_id: str) -> SessionRow | None:
        known = self.known
        if known is None or known.session is None or session_id != known.session.id:
            raise Missing(("session", session_id, ""))
        return known.session

    def session_purged(self, session_id: str) -> bool:
        raise Missing(("session_purged", session_id, ""))

    def run(self, run_id: str) -> RunRow | None:
        if self.asked is None:
            self.asked = run_id
            self.known = self.lookup(run_id)
        known = self.known
        if known is None or run_id != known.run.run_id:
            raise Missing(("run", run_id, ""))
        return known.run

    def purged_run_session(self, run_id: str) -> str | None:
        raise Missing(("purged_run", run_id, ""))

    def record(self, run_id: str, event_key: str) -> Record | None:
        if self.known is None or run_id != self.known.run.run_id:
            raise Missing(("record", run_id, event_key))
        self.absent.append(event_key)
        return None

    def running_run_ids(self, session_id: str) -> list[str]:
        raise Missing(("running", session_id, ""))

    def purge_receipt(self, session_id: str) -> PurgeReceipt:
        raise Missing(("session_purged", session_id, ""))

    def session_contents(self, session_id: str) -> tuple[list[RunRow], list[Record]]:
        raise Missing(("contents", session_id, ""))

    def tool_result(self, run: RunRow, call_key: str) -> bytes | None:
        raise Missing(("tool_result", run.run_id, call_key))

    def session_message(self, run_id: str) -> SessionMessage | None:
        raise Missing(("message", run_id, ""))

    def pending_messages(self, session_id: str) -> list[SessionMessage]:
        known = self.known
        if known is None or known.session is None or session_id != known.session.id:
            raise Missing(("pending", session_id, ""))
        # A planner turn's write (the only append that asks) assumes no steering message
        # waits for its run; the statement checks it, and writes nothing if one does.
        self.none_steering = True
        return []

    def latest_message(self, session_id: str) -> SessionMessage | None:
        raise Missing(("latest_message", session_id, ""))

    def session_messages(self, session_id: str) -> list[SessionMessage]:
        raise Missing(("messages", session_id, ""))

    def damaged_records(self, run_id: str) -> list[Record]:
        raise Missing(("damaged", run_id, ""))

    def derived_copies(self, session_id: str) -> list[DerivedCopy]:
        raise Missing(("derived", session_id, ""))


@dataclass(frozen=True)
class Guess:
    """A plan decided on remembered state, and what must still hold to write it."""

    known: Known
    plan: Plan[Any]
    absent: list[str]
    """Event keys the decision found unused; each must still be."""
    changed: list[int]
    """Positions in ``RUN_COLUMNS`` of the run row's changed values."""
    none_steering: bool = False
    """No steering message may wait for the run (a planner turn's write)."""


def guess(reader: Remembered, decide: Callable[[StateReader], Plan[Any]]) -> Guess | None:
    """The decision on the run ``reader`` knows if it appends records to that run alone;
    else None.

    None means: decide under locks instead (a refusal or a retry is never
    taken from remembered state, and nor is a plan that needs anything else).
    """
    try:
        plan = decide(reader)
    except (Missing, AgentledgerError):
        return None
    known = reader.known
    if known is None:
        return None
    run_id = known.run.run_id
    if (
        plan.session is not None
        or plan.purge_session
        or plan.tool_results
        or plan.messages
        or len(plan.runs) != 1
        or plan.runs[0].run_id != run_id
        or not plan.records
        or not reader.absent
        or len(plan.records) > MAX_RECORDS
        or any(record.run_id != run_id for record in plan.records)
    ):
        return None
    changed = changed_columns(run_params(plan.runs[0]), run_params(known.run))
    if not changed or any(_RUN_FIELDS[i] in _NOT_GUESSED for i in changed):
        return None
    steering = reader.none_steering and known.session is not None
    return Guess(known, plan, list(dict.fromkeys(reader.absent)), changed, steering)


@lru_cache(maxsize=256)
def _statement(
    session: bool,
    changed: tuple[str, ...],
    count: int,
    keys: int,
    steering: bool = False,
    index: str = "",
    tokens: bool = False,
    labels: bool = False,
) -> str:
    """The statement writing ``count`` records and the run columns ``changed``.

    Locks and checks in the order every writer uses: session, run. A run of a
    session locks its session by taking its positions (the UPDATE of its
    ``last_seq``, which holds the session's checks, that the run's version is
    the one remembered, that the run's event keys are unused and, with
    ``steering``, that no steering message waits for the run: each as the
    statement's snapshot holds it), then updates the run if its version still
    matches under its lock; if another writer changed it meanwhile, the
    statement fails with a division by zero (:data:`RACED`), so that the
    positions taken are not kept. Each later write happens only if the step
    before matched. The run's and the session's rows also take the records'
    payload bytes [G3] (their records are their ``last_seq``).
    """
    # One probe per key, each an equality on both columns of the (run_id, event_key)
    # unique index: a plan cached before the table had statistics still uses that index
    # (with ``= ANY(array)`` it may scan the run's whole log instead).
    unused = " AND ".join(
        "NOT EXISTS (SELECT 1 FROM agentledger_records "
        f"WHERE run_id = %(rid)s AND event_key = %(k{i})s)"
        for i in range(keys)
    )
    if steering:
        unused += (
            " AND NOT EXISTS (SELECT 1 FROM agentledger_session_messages "
            "WHERE session_id = %(sid)s AND started = 0 AND fate = 'steering' "
            "AND running_run_id = %(rid)s)"
        )
    # The run's version as the statement's snapshot holds it: a run another writer changed
    # before the statement began takes no position (and the statement does not fail).
    seen = (
        "EXISTS (SELECT 1 FROM agentledger_runs WHERE run_id = %(rid)s "
        "AND xmin::text = %(version)s)"
    )
    allocate = (
        "WITH a AS (UPDATE agentledger_sessions SET last_seq = last_seq + %(n)s, "
        "usage_bytes = usage_bytes + %(b)s WHERE id = %(sid)s AND status = %(status)s "
        f"AND ended_at IS NOT DISTINCT FROM %(ended)s AND {seen} AND {unused} "
        "RETURNING last_seq - %(n)s AS base), "
        if session
        else "WITH "
    )
    assignments = ", ".join(
        [*(f"{name} = %(c_{name})s" for name in changed), "usage_bytes = usage_bytes + %(b)s"]
    )
    gate = "EXISTS (SELECT 1 FROM a)" if session else unused
    run = (
        f"r AS (UPDATE agentledger_runs SET {assignments} "
        f"WHERE run_id = %(rid)s AND xmin::text = %(version)s AND {gate} "
        "RETURNING xmin::text AS v), "
    )
    rows = ", ".join(
        "("
        + ", ".join(f"%(v{i}_{j})s::{t}" for j, t in enumerate(_RECORD_TYPES))
        + f", %(v{i}_seq)s::bigint, %(v{i}_sum)s::bigint, {i + 1}, %(v{i}_w)s::tsvector)"
        for i in range(count)
    )
    names = ", ".join([*_RECORD_NAMES, "k", "words"])
    # [G1] each record's words in the search index and, if it has them, its position
    columns = ", ".join([
        *(f"v.{c}" for c in _RECORD_NAMES),
        "CASE WHEN v.words IS NULL THEN NULL ELSE nextval('agentledger_search_pos') END",
        "v.words",
    ])  # fmt: skip
    gate_insert = "CROSS JOIN a " if session else ""
    position = "a.base + v.k" if session else "NULL::bigint"
    insert = (
        f"i AS (INSERT INTO agentledger_records ({RECORD_COLUMNS}, search_pos, words, "
        f"session_seq) SELECT {columns}, {position} "
        f"FROM (VALUES {rows}) AS v ({names}) {gate_insert}WHERE EXISTS (SELECT 1 FROM r) "
        "RETURNING 1) "
    )
    index = f", {index}" if index else ""  # a sealed session left out of search [G1]
    if labels:  # [G3] the records added to the session's labels' totals
        index += f", l AS ({usage_schema.ADD_TO_LABELS} AND EXISTS (SELECT 1 FROM r) RETURNING 1)"
    # positions taken (a) for a run whose UPDATE then matched nothing (r): fail [B3]
    raced = (
        ", 1 / CASE WHEN x.v IS NULL AND EXISTS (SELECT 1 FROM a) THEN 0 ELSE 1 END"
        if session
        else ""
    )
    return (
        allocate + run + insert + index + _tokens(tokens)
        + f"SELECT x.v, (SELECT count(*) FROM i){raced} FROM (SELECT (SELECT v FROM r) AS v) x"
    )  # fmt: skip


def _tokens(tokens: bool) -> str:
    """[G3] Adding the tokens of the write's usage records, gated as the INSERT is (so only
    if it wrote); their roll-up into the session's and labels' totals is the schema's
    trigger's. Bytes and records are on the run's and session's rows (see ``_statement``)."""
    if not tokens:
        return ""
    return (
        f", t AS (UPDATE {USAGE.runs} SET input_tokens = input_tokens + %(ti)s, "
        "output_tokens = output_tokens + %(to)s, cached_tokens = cached_tokens + %(tc)s "
        "WHERE run_id = %(rid)s AND EXISTS (SELECT 1 FROM r) RETURNING 1) "
    )


_RUN_WIDTH = len(_RUN_FIELDS)
_LEARN = (
    f"SELECT {', '.join(f'r.{c}' for c in _RUN_FIELDS)}, r.xmin::text, "
    f"{', '.join(f's.{c.strip()}' for c in SESSION_COLUMNS.split(','))} "
    "FROM agentledger_runs r LEFT JOIN agentledger_sessions s ON s.id = r.session_id "
    "WHERE r.run_id = %s"
)


async def learn(conn: AsyncConnection[TupleRow], run_id: str) -> Known | None:
    """A run, its version and its session as one snapshot holds them; None if not usable.

    Read without locks: the statement that writes checks the version and the
    session's status under its own locks, as for remembered state.
    """
    cur = await conn.execute(_LEARN, (run_id,))
    row = await cur.fetchone()
    if row is None or row[_RUN_FIELDS.index("checkpoint_id")] is not None:
        return None  # absent, or holding a checkpoint (sealed, maybe large): decide under locks
    run = run_from_row(row[:_RUN_WIDTH])
    session = None
    if run.session_id:
        if row[_RUN_WIDTH + 1] is None:
            return None
        session = session_from_row(row[_RUN_WIDTH + 1 :])
    return Known(run, str(row[_RUN_WIDTH]), session)


def healthy(conn: AsyncConnection[TupleRow]) -> bool:
    """Whether an idle pooled connection has nothing unread (a server that closed it has).

    A statement sent on a connection the server already closed would fail as
    if cut off mid-write; that case goes to the locking path, which retries it.
    """
    if conn.closed:
        return False
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    return not poller.poll(0)


@lru_cache(maxsize=MAX_RECORDS)
def _record_names(i: int) -> tuple[str, ...]:
    """The parameter names of record ``i``'s values in ``_statement``, in ``record_params``
    order (its columns, then seq and checksum)."""
    return (*(f"v{i}_{j}" for j in range(len(_RECORD_TYPES))), f"v{i}_seq", f"v{i}_sum")


Statement = tuple[str, dict[str, object]]
"""An SQL statement and its named parameters."""


def guess_statement(g: Guess, sealer: Encryption | None) -> Statement:
    """``g`` as the one statement that writes it (its records sealed with ``sealer``).

    Raises:
        KeyNeeded: sealing needs a key not loaded yet (nothing was sent).
    """
    known, run = g.known, g.plan.runs[0]
    session = known.session
    names = tuple(_RUN_FIELDS[i] for i in g.changed)
    params: dict[str, object] = {
        "rid": run.run_id,
        "version": known.version,
    }
    params.update({f"k{i}": key for i, key in enumerate(g.absent)})
    values = run_params(run)
    for i in g.changed:
        params[f"c_{_RUN_FIELDS[i]}"] = values[i]
    if session is not None:
        params.update(sid=session.id, status=session.status.value, ended=session.ended_at)
        params["n"] = len(g.plan.records)
    size = 0
    for i, record in enumerate(g.plan.records):
        params[f"v{i}_w"] = None if sealer is not None else search.record_words(record)
        if sealer is not None:
            record = msgspec.structs.replace(record, payload=sealer.seal_record(record))
        size += len(record.payload)
        keys = _record_names(i)
        params.update(zip(keys, record_params(record, None)[: len(keys)], strict=True))
    params["b"] = size  # [G3] the payload bytes as stored, on the run's and session's rows
    tokens = token_rows(g.plan.records)  # all of one run: added up, one UPDATE of its row
    if tokens:
        params["ti"] = sum(t[0] for t in tokens)
        params["to"] = sum(t[1] for t in tokens)
        params["tc"] = sum(t[2] for t in tokens)
    index = ""
    if (
        session is not None
        and sealer is not None
        and any(record.type in search.INDEXED_TYPES for record in g.plan.records)
    ):
        index = search.GUESSED_LEFT_OUT
    sql = _statement(
        session is not None,
        names,
        len(g.plan.records),
        len(g.absent),
        g.none_steering,
        index,
        bool(tokens),
        session is not None and bool(session.labels),
    )
    return sql, params


def written(row: TupleRow | None, g: Guess) -> str | None:
    """The run row's new version from the statement's answer ``row``; None if it wrote nothing."""
    if row is None or row[0] is None:
        return None
    assert row[1] == len(g.plan.records), row
    return str(row[0])


async def send_statements(
    conn: AsyncConnection[TupleRow], statements: list[Statement]
) -> list[TupleRow | None]:
    """Run ``statements`` and give each one's answer: one alone in autocommit; more as one
    transaction in one round trip (pipelined), answered after its one COMMIT.

    An error rolls the transaction back (the caller abandons it): none of them wrote.
    """
    if len(statements) == 1:
        cur = await conn.execute(*statements[0])
        return [await cur.fetchone()]
    async with conn.pipeline():
        await conn.execute("BEGIN")
        cursors = [await conn.execute(sql, params) for sql, params in statements]
        await conn.execute("COMMIT")
    return [await cur.fetchone() for cur in cursors]
