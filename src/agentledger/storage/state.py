"""The durable state a backend keeps, and the seam between decisions and storage.

A backend implements :class:`StateReader` over its transaction, calls a
decision function from :mod:`agentledger.storage.lifecycle`, and applies the
:class:`Plan` it returns in the same transaction. Backends only store.
"""

from __future__ import annotations

from datetime import datetime
from typing import Generic, Protocol, TypeVar

import msgspec

from agentledger.storage.types import (
    Checkpoint,
    DerivedCopy,
    PurgeReceipt,
    Record,
    RunMeta,
    RunStatus,
    Session,
    SessionMessage,
    SessionStatus,
    StartOutcome,
)

__all__ = ["Plan", "RunRow", "SessionRow", "StateReader", "ToolResultRow"]

R = TypeVar("R")


class SessionRow(msgspec.Struct, frozen=True, kw_only=True):
    """A stored session."""

    id: str
    status: SessionStatus
    created_at: datetime
    ended_at: datetime | None = None
    labels: dict[str, str] = msgspec.field(default_factory=dict)  # fixed at creation [D6]

    def public(self) -> Session:
        """The session as callers see it."""
        return Session(
            id=self.id,
            status=self.status,
            created_at=self.created_at,
            ended_at=self.ended_at,
            labels=self.labels,
        )


class RunRow(msgspec.Struct, frozen=True, kw_only=True):
    """A stored run: its meta plus the event keys each lifecycle change chose [X2]."""

    run_id: str
    agent_id: str
    session_id: str
    parent_run_id: str
    status: RunStatus
    start_outcome: StartOutcome
    started_at: datetime
    updated_at: datetime
    labels: dict[str, str]
    cancellation_reason: str = ""
    successor_run_id: str = ""
    started_key: str  # run_started on this run's log
    link_key: str = ""  # child_run_linked on the parent's log
    cancel_key: str = ""  # runtime.cancellation_intent
    suspension_key: str = ""  # run_suspended
    terminal_key: str = ""  # run_completed (also the stop record of a [C2] start)
    checkpoint: Checkpoint | None = None
    last_seq: int = 0  # id of the newest record on this run's log
    # How many ordinary records the start wrote after run_started (ids 2, 3 ...), so
    # that its retry must carry them all [L10]; -1 when unknown (a run stored before
    # this was kept, or imported: its retry is then checked record by record).
    start_records: int = -1

    def meta(self) -> RunMeta:
        """The run as callers see it."""
        return RunMeta(
            run_id=self.run_id,
            agent_id=self.agent_id,
            session_id=self.session_id,
            parent_run_id=self.parent_run_id,
            status=self.status,
            start_outcome=self.start_outcome,
            started_at=self.started_at,
            updated_at=self.updated_at,
            labels=self.labels,
            cancellation_reason=self.cancellation_reason,
            successor_run_id=self.successor_run_id,
            last_record_id=str(self.last_seq) if self.last_seq else "",
        )


class ToolResultRow(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call's saved result: private scratch of a running run, never a record."""

    run_id: str
    session_id: str  # the run's, for sealing [A2]
    call_key: str
    data: bytes


class StateReader(Protocol):
    """Reads inside the backend's transaction that a decision may need."""

    def session(self, session_id: str) -> SessionRow | None:
        """The stored session, or None (also None when purged)."""
        ...

    def session_purged(self, session_id: str) -> bool:
        """Whether this session id is a tombstone."""
        ...

    def run(self, run_id: str) -> RunRow | None:
        """The stored run, or None (also None when purged)."""
        ...

    def purged_run_session(self, run_id: str) -> str | None:
        """The session id of a purged run, or None if the run was never purged."""
        ...

    def record(self, run_id: str, event_key: str) -> Record | None:
        """The record of this run with this event key, or None."""
        ...

    def running_run_ids(self, session_id: str) -> list[str]:
        """Ids of the session's runs whose status is ``running``."""
        ...

    def purge_receipt(self, session_id: str) -> PurgeReceipt:
        """The receipt a purged session's tombstone keeps [D7] (asked only when purged)."""
        ...

    def session_contents(self, session_id: str) -> tuple[list[RunRow], list[Record]]:
        """The session's runs in start order (checkpoints set) and its records in commit order.

        Asked by a purge, under the same transaction that deletes them [D7].
        """
        ...

    def tool_result(self, run: RunRow, call_key: str) -> bytes | None:
        """The result saved for this call of ``run`` (read after ``run``), or None."""
        ...

    def session_message(self, run_id: str) -> SessionMessage | None:
        """The message submitted for the turn ``run_id``, or None."""
        ...

    def pending_messages(self, session_id: str) -> list[SessionMessage]:
        """The session's messages whose turn has not started, in arrival order."""
        ...

    def latest_message(self, session_id: str) -> SessionMessage | None:
        """The session's newest message (the highest position), or None."""
        ...

    def session_messages(self, session_id: str) -> list[SessionMessage]:
        """Every message of the session, in arrival order."""
        ...

    def derived_copies(self, session_id: str) -> list[DerivedCopy]:
        """[G2] The copies of the session's history other sessions hold, by holding session
        then commit order (its runs' ``transcript_history_copied`` records, decoded).

        Asked by a purge, under the same transaction that deletes the session.
        """
        ...

    def damaged_records(self, run_id: str) -> list[Record]:
        """The records of this run's log whose stored bytes fail their checksum, as stored.

        Read only where a decision is about to refuse because a record it looked
        up by event key is absent, to tell damage (corruption) from a real
        absence; a backend that cannot be damaged returns ``[]``.
        """
        ...


class Plan(msgspec.Struct, Generic[R]):
    """What one operation writes, in order, and what it returns.

    An empty plan (no rows, no records) is a pure read or an exact retry.
    (A Struct, not a dataclass: one is built per write, and its ``__init__`` is C.)
    """

    result: R
    session: SessionRow | None = None  # insert or replace
    runs: list[RunRow] = msgspec.field(default_factory=list)  # insert or replace, in order
    records: list[Record] = msgspec.field(default_factory=list)  # insert, in order, ids set
    purge_session: str = ""  # delete this session's data and leave tombstones
    purge_receipt: PurgeReceipt | None = None  # kept with the tombstone of purge_session
    cascade: list[PurgeReceipt] = msgspec.field(default_factory=list)
    """[G2] more sessions purged with ``purge_session``, each by its receipt (session_id)."""
    tool_results: list[ToolResultRow] = msgspec.field(default_factory=list)  # insert
    messages: list[SessionMessage] = msgspec.field(default_factory=list)  # insert or replace

    @property
    def writes(self) -> bool:
        """Whether applying the plan changes anything."""
        return bool(
            self.session
            or self.runs
            or self.records
            or self.purge_session
            or self.tool_results
            or self.messages
        )

    @property
    def ended_runs(self) -> list[str]:
        """Runs this plan leaves not running: the backend deletes their saved tool
        results in the same transaction, so no archive, receipt or digest sees them."""
        return [row.run_id for row in self.runs if row.status is not RunStatus.RUNNING]
