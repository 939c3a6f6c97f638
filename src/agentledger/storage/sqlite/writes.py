"""One write operation of the SQLite store, and the appends of a group written together.

A write operation runs the shared lifecycle decision inside the group's
transaction and applies its plan (:class:`WriteOperation`). Appends may
first be decided as if their event keys were new, without reading them
(insert-first): the INSERT proves it.

Consecutive plain appends of one group are written together
(:func:`run_appends`): each is still decided alone, in order, each seeing
the rows the ones before it wrote (through the writer's row cache), but
their records go to the file in one INSERT (or one ``executemany``) and
their token counts in one statement (the schema's triggers count the rest).
If that INSERT meets a stored key (a retry, or two of them with one key),
the batch is undone and each runs alone, exactly as it would have: every
answer is the one the operation would get by itself.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from agentledger.errors import AgentledgerError
from agentledger.storage.encryption.deferral import KeyNeeded
from agentledger.storage.sqlite.apply import ADD_TOKENS, INSERT_RECORD, apply_plan, plan_statements
from agentledger.storage.sqlite.reader import RowCache, SQLiteReader
from agentledger.storage.state import Plan, StateReader

if TYPE_CHECKING:
    from agentledger.storage.encryption import Encryption

__all__ = ["WriteOperation", "run_appends"]

R = TypeVar("R")

Answer = tuple[Any, BaseException | None]
"""An operation's result, or its error (the other is None)."""


class WriteOperation(Generic[R]):
    """One whole lifecycle operation inside the group's transaction: decide and apply.

    The decision only reads; a refusal raises before anything is written. With
    ``shared`` (other operations' writes share the transaction) the plan is
    applied so that a failure undoes it alone (see :func:`.apply.apply_plan`).

    With ``insert_first`` (appends), the decision first runs as if none of its
    event keys were stored, without reading them; the plan is kept only if its
    INSERTs then succeed, which proves the keys were indeed new. Any refusal,
    or a unique-key conflict, and the decision runs again on what is stored.
    Either way the decision is the shared one: this only skips a read.
    """

    __slots__ = ("batchable", "decide", "insert_first", "sealer")

    def __init__(
        self,
        decide: Callable[[StateReader], Plan[R]],
        *,
        insert_first: bool = False,
        sealer: Encryption | None = None,
    ) -> None:
        self.decide = decide
        self.insert_first = insert_first
        self.sealer = sealer
        self.batchable = insert_first and sealer is None
        """Whether :func:`run_appends` may write it with its neighbours (a plaintext
        append: a sealed one may have to wait for its data key)."""

    def __call__(self, conn: sqlite3.Connection, cache: RowCache, shared: bool) -> R:
        if self.insert_first:
            guessed = self._insert_first(conn, cache)
            if guessed is not None:
                return guessed.result
        reader = SQLiteReader(conn, cache, sealer=self.sealer)
        plan = self.decide(reader)
        if plan.writes:
            apply_plan(conn, reader, plan, undoable=shared)
            cache.committed(plan)  # later operations of the group read through it
        return plan.result

    def _insert_first(self, conn: sqlite3.Connection, cache: RowCache) -> Plan[R] | None:
        """The plan of an append whose keys are new, applied; None if they may not be.

        A conflict undoes the plan's writes (always: the decision runs again in the
        same transaction), so None leaves the transaction as it found it.
        """
        reader = SQLiteReader(conn, cache, fresh_keys=True, sealer=self.sealer)
        try:
            plan = self.decide(reader)
        except KeyNeeded:
            raise  # not a refusal: the caller loads the key and runs the operation again
        except AgentledgerError:
            return None  # maybe a retry of a stored record: decide again on stored state
        try:
            apply_plan(conn, reader, plan, undoable=True)
        except sqlite3.IntegrityError:
            return None
        cache.committed(plan)
        return plan


_MERGEABLE = frozenset({INSERT_RECORD, ADD_TOKENS})
"""The statements of a plain append: rows of one table each, in any order across tables
(the token counts add, so their rows may be summed in any order too)."""


def run_appends(
    conn: sqlite3.Connection,
    cache: RowCache,
    operations: Sequence[Callable[[sqlite3.Connection, RowCache, bool], Any]],
    shared: bool,
) -> list[Answer]:
    """Consecutive batchable appends of a group, written together; one answer each for
    the first of them it took (maybe none: the writer then runs the first alone).

    Each is decided in order on the keys-are-new guess, seeing the ones before
    it through ``cache``; the batch ends before the first one whose guess is
    refused or whose plan is more than records and counters (it runs alone).
    ``shared``: other writes share the transaction, so a failure must undo only
    the batch's own. A failure that is the operation's own (``shared`` false, one
    operation) is raised, for the writer to roll back; a key conflict, or any
    failure of a batch under its savepoint, undoes the batch and runs each alone.
    """
    if len(operations) == 1:
        return _run_one(conn, cache, operations[0], shared)
    taken: list[tuple[WriteOperation[Any], Any]] = []
    records: list[Any] = []
    counters: dict[str, list[Any]] = {}
    for operation in operations:
        assert isinstance(operation, WriteOperation)
        reader = SQLiteReader(conn, cache, fresh_keys=True)
        try:
            plan = operation.decide(reader)
        except AgentledgerError:
            break  # maybe a retry: decided again on what is stored, alone
        if not plan.writes:
            break
        statements = plan_statements(reader, plan)
        if any(sql not in _MERGEABLE for sql, _, _ in statements):
            break
        for sql, params, many in statements:
            rows = records if sql is INSERT_RECORD else counters.setdefault(sql, [])
            if many:
                rows.extend(params)
            else:
                rows.append(params)
        cache.committed(plan)  # the next decision sees this one's run
        taken.append((operation, plan.result))
    if not taken:
        return []
    # One record alone needs no savepoint: its INSERT, the batch's first statement, is
    # undone by SQLite if it fails; a later failure is the operation's own, and the
    # writer rolls the transaction back.
    guarded = shared or len(records) != 1
    if guarded:
        conn.execute("SAVEPOINT batch")
    inserted = False
    try:
        if len(records) == 1:
            conn.execute(INSERT_RECORD, records[0])
        else:
            conn.executemany(INSERT_RECORD, records)
        inserted = True
        for sql, rows in counters.items():
            if len(rows) == 1:
                conn.execute(sql, rows[0])
            else:
                conn.executemany(sql, rows)
    except BaseException as e:
        if guarded and conn.in_transaction and isinstance(e, Exception):
            return _alone(conn, cache, taken, guarded)
        if not inserted and isinstance(e, sqlite3.IntegrityError):
            return _alone(conn, cache, taken, guarded)  # a stored key: nothing was written
        _undo(conn, cache, guarded)
        raise
    if guarded:
        conn.execute("RELEASE batch")
    return [(result, None) for _, result in taken]


def _run_one(
    conn: sqlite3.Connection,
    cache: RowCache,
    operation: Callable[[sqlite3.Connection, RowCache, bool], Any],
    shared: bool,
) -> list[Answer]:
    """:func:`run_appends` of one operation (a lone append: the common case), with the
    same answers: its statements need no merging, so they run as planned."""
    assert isinstance(operation, WriteOperation)
    reader = SQLiteReader(conn, cache, fresh_keys=True)
    try:
        plan = operation.decide(reader)
    except AgentledgerError:
        return []  # maybe a retry: decided again on what is stored, alone
    if not plan.writes:
        return []
    statements = plan_statements(reader, plan)
    first = statements[0][0] if statements else None
    if first is not INSERT_RECORD or any(sql not in _MERGEABLE for sql, _, _ in statements):
        return []
    cache.committed(plan)
    # One record alone needs no savepoint: its INSERT, the first statement, is undone by
    # SQLite if it fails; a later failure is the operation's own, and the writer rolls
    # the transaction back.
    guarded = shared or len(plan.records) != 1
    if guarded:
        conn.execute("SAVEPOINT batch")
    inserted = False  # every record (the first statements)
    try:
        for sql, params, many in statements:
            if sql is not INSERT_RECORD:
                inserted = True
            if many and len(params) != 1:
                conn.executemany(sql, params)
            else:
                conn.execute(sql, params[0] if many else params)
    except BaseException as e:
        if (not inserted and isinstance(e, sqlite3.IntegrityError)) or (
            guarded and conn.in_transaction and isinstance(e, Exception)
        ):
            _undo(conn, cache, guarded)
            return []  # the writer runs it alone, deciding on what is stored
        _undo(conn, cache, guarded)
        raise
    if guarded:
        conn.execute("RELEASE batch")
    return [(plan.result, None)]


def _undo(conn: sqlite3.Connection, cache: RowCache, guarded: bool) -> None:
    """Undo what the batch wrote, and forget the rows its decisions noted."""
    cache.clear()
    if guarded and conn.in_transaction:
        conn.execute("ROLLBACK TO batch")
        conn.execute("RELEASE batch")


def _alone(
    conn: sqlite3.Connection,
    cache: RowCache,
    taken: list[tuple[WriteOperation[Any], Any]],
    guarded: bool,
) -> list[Answer]:
    """Undo the batch and run its operations one by one: the answers they would get alone.

    One operation is left to the writer (it may be the group's only one); more
    each undo their own writes if they fail.
    """
    _undo(conn, cache, guarded)
    if len(taken) == 1:
        return []
    answers: list[Answer] = []
    for operation, _ in taken:
        try:
            answers.append((operation(conn, cache, True), None))
        except BaseException as e:
            if not conn.in_transaction:
                raise  # SQLite rolled the whole transaction back: the group fails
            answers.append((None, e))
    return answers
