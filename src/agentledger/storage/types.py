"""The runtime store's vocabulary: sessions, runs, records, commands and results.

All types are immutable msgspec Structs built with keyword arguments. An
absent id (no session, no parent, no predecessor) is the empty string; times
are timezone-aware UTC datetimes with millisecond precision.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

import msgspec

__all__ = [
    "AppendResult",
    "BusyPolicy",
    "Checkpoint",
    "ChildRunStart",
    "CopiedFrom",
    "DerivedCopy",
    "MessageFate",
    "MessageSubmission",
    "OneShotChildRunStart",
    "OneShotRunStart",
    "Page",
    "PurgeReceipt",
    "Record",
    "RepairOutcome",
    "RepairResult",
    "RootRunStart",
    "RunCancellation",
    "RunMeta",
    "RunStart",
    "RunStatus",
    "RunSuspension",
    "RunTerminal",
    "Session",
    "SessionMessage",
    "SessionPage",
    "SessionStatus",
    "StartOutcome",
    "StartResult",
    "TranscriptSegment",
    "TurnAppend",
]


class SessionStatus(StrEnum):
    """Whether a session still accepts new work. Purged is a tombstone, not a status."""

    ACTIVE = "active"
    ENDED = "ended"


class RunStatus(StrEnum):
    """Where a run stands. Every status but ``running`` is terminal for new records."""

    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"


class StartOutcome(StrEnum):
    """The decision a start made: go on with planner work, or stop (session ended)."""

    PROCEED = "proceed"
    STOP = "stop"


class RepairOutcome(StrEnum):
    """What a repair did: stored its record, found it stored, or found another ending."""

    STORED = "stored"
    ALREADY_STORED = "already_stored"
    DIFFERENT_TERMINAL = "different_terminal"


class Session(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A conversation or workflow over time; owns many runs.

    ``labels`` are fixed when the session is created [D6]: hosts filter
    listings by them (``tenant=acme``), and they never change afterwards.
    """

    id: str
    status: SessionStatus
    created_at: datetime
    ended_at: datetime | None = None  # None while the session is active
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class SessionPage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One page of ``list_sessions``, newest first [D6].

    ``next_cursor`` is opaque and bound to the listing's filter; ``""`` means
    there is nothing more.
    """

    sessions: list[Session]
    next_cursor: str


class Record(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """One immutable entry of a run's ordered log.

    ``event_key`` is the record's stable logical identity: ``(run_id, event_key)``
    is unique, and writing the same key again is either an exact retry or a conflict.
    Its fields are strings, bytes and a time, so it can be in no reference cycle and
    the garbage collector need not track it (a reload of 10,000 records collects less).
    """

    run_id: str
    agent_id: str
    session_id: str  # "" for one-shot runs
    turn_id: str
    event_key: str
    type: str
    timestamp: datetime  # UTC, millisecond precision
    payload: bytes  # non-empty UTF-8 JSON, kept byte for byte
    id: str = ""  # assigned by the store: "1", "2", ... per run


class RunStart(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The identity of a run being started."""

    run_id: str
    agent_id: str
    session_id: str = ""
    parent_run_id: str = ""
    predecessor_run_id: str = ""  # set for a continuation of a suspended run
    started_at: datetime
    labels: dict[str, str] = msgspec.field(default_factory=dict)

    @classmethod
    def of(cls, meta: RunMeta, *, predecessor_run_id: str = "") -> RunStart:
        """The start of the stored run ``meta``, for the records written to it later.

        ``RunMeta`` does not keep the predecessor: pass it (from the run's
        ``run_started`` record) when the records need it.
        """
        return cls(
            run_id=meta.run_id,
            agent_id=meta.agent_id,
            session_id=meta.session_id,
            parent_run_id=meta.parent_run_id,
            predecessor_run_id=predecessor_run_id,
            started_at=meta.started_at,
            labels=dict(meta.labels),
        )


class RunMeta(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the store knows of a run now. The predecessor lives only in its records."""

    run_id: str
    agent_id: str
    session_id: str
    parent_run_id: str
    status: RunStatus
    start_outcome: StartOutcome
    started_at: datetime
    updated_at: datetime
    labels: dict[str, str]
    cancellation_reason: str  # "" unless a cancellation was recorded or the session had ended
    successor_run_id: str  # "" until a continuation of this (suspended) run starts
    last_record_id: str = ""  # the newest record on the run's log ("" before its first)


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The private bytes a suspended run needs to continue."""

    id: str
    data: bytes


class RootRunStart(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Start a root run in a session; ``canceled`` is stored only if the session ended.

    ``records`` (ordinary, of the new run) follow ``started`` in the same
    transaction when the start proceeds; a stopped start [C2] writes none.
    """

    run: RunStart
    started: Record
    canceled: Record
    records: tuple[Record, ...] = ()  # ordinary records of the new run, written after started


class ChildRunStart(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Start a child run: the link on the parent's log, then the child's start."""

    run: RunStart
    parent_linked: Record
    started: Record
    canceled: Record
    records: tuple[Record, ...] = ()  # ordinary records of the new run, written after started


class OneShotRunStart(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Start a run that belongs to no session."""

    run: RunStart
    started: Record
    records: tuple[Record, ...] = ()  # ordinary records of the new run, written after started


class OneShotChildRunStart(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Start a sessionless child of a sessionless parent."""

    run: RunStart
    parent_linked: Record
    started: Record
    records: tuple[Record, ...] = ()  # ordinary records of the new run, written after started


class RunCancellation(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Record the first cancellation reason of a running run with its intent record."""

    run_id: str
    reason: str
    record: Record


class RunSuspension(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Suspend a running run: checkpoint, status and ``run_suspended`` record together.

    ``records`` (ordinary, of this run) are written first, in the same transaction.
    """

    run_id: str
    checkpoint: Checkpoint
    record: Record
    records: tuple[Record, ...] = ()  # ordinary records written just before ``record``


class RunTerminal(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """End a running run with a final status and its ``run_completed`` record.

    ``records`` (ordinary, of this run) are written first, in the same transaction.
    """

    run_id: str
    status: RunStatus
    record: Record
    records: tuple[Record, ...] = ()  # ordinary records written just before ``record``


class AppendResult(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """Where a record landed; ``inserted`` is False for an exact retry.

    A suspension or terminal that carried ``records`` reports where they
    landed in ``records`` (sent only when non-empty, so older clients decode it).
    """

    id: str
    inserted: bool
    session_status: SessionStatus | None  # None for runs without a session
    records: tuple[AppendResult, ...] = ()  # the carried records', in order


class TurnAppend(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a planner turn's first write did: where its records landed (``results``, as
    ``append_run_records``) and the steering messages the run took in the same
    transaction (``steered``, each now fate ``steered``, in arrival order; their
    records follow the turn's in the run's log)."""

    results: list[AppendResult]
    steered: list[SessionMessage] = msgspec.field(default_factory=list)
    steered_records: list[AppendResult] = msgspec.field(default_factory=list)
    """Where each steered message's two records landed (its user message, then its
    ``session_message_steered`` provenance), in the order of ``steered``."""


class StartResult(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """A start's original decision, the run's current status and the records' ids.

    Fields left at their defaults are not sent, so older clients decode it.
    """

    outcome: StartOutcome
    run_status: RunStatus
    started: AppendResult
    canceled: AppendResult | None = None  # set when the outcome is stop
    parent_record: AppendResult | None = None  # set for child starts
    records: tuple[AppendResult, ...] = ()  # the carried records' (none when stopped)


class RepairResult(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a repair found, the run's status after it and the record that stands."""

    outcome: RepairOutcome
    status: RunStatus
    record: Record


class Page(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One page of records in commit order; ``next_cursor`` is "" when there is no more."""

    records: tuple[Record, ...]
    next_cursor: str


class TranscriptSegment(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One run's part of a transcript chain [V4]: its transcript records (message arrays,
    its history reference, windows) from record ``first`` through ``through``, in log
    order (``first`` is "1" but where a windowed chain ends [V5])."""

    run_id: str
    through: str
    records: tuple[Record, ...]
    first: str = "1"


class CopiedFrom(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """[G2] Where a run's copied history came from: the payload of
    ``transcript_history_copied``."""

    session_id: str
    """The source run's session ("" for a sessionless source)."""
    run_id: str
    """The run whose transcript was copied."""
    through: str
    """The last record of the source the copy holds (its id)."""

    def encode(self) -> bytes:
        """The record payload."""
        return msgspec.json.encode(self)


class DerivedCopy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """[G2] A copy of a session's words held in another session."""

    session_id: str
    """The session holding the copy."""
    run_id: str
    """The run whose history is the copy."""
    source: CopiedFrom
    """What it was copied from."""
    summary: str = ""
    """"": the copy itself. Else the record of ``run_id`` (a ``transcript_window_applied``)
    whose compaction summary restates the copy: a derivation of a derivation, in the
    same session as the copy (a transcript chain never leaves its session)."""


class PurgeReceipt(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """[D7] What one purge deleted: counts, payload and checkpoint bytes, and a digest.

    ``digest`` is the ``session_digest`` of the session's image as the purge
    transaction read it (see :mod:`agentledger.storage.session_image`), so it
    matches an archive of the same session. A repeated purge returns the same
    receipt: the tombstone keeps it. A tombstone older than receipts keeps none:
    its receipt has ``digest == ""`` and every count, ``bytes`` and
    ``purged_at`` None (unknown, never invented).
    """

    session_id: str
    runs: int | None  # runs deleted
    records: int | None  # records deleted
    checkpoints: int | None  # checkpoints deleted
    bytes: int | None  # record payload bytes + checkpoint data bytes deleted
    digest: str  # "sha256:<hex>", or "" when unknown
    purged_at: datetime | None  # UTC, millisecond precision; None when unknown
    messages: int | None = None  # messages submitted to the session deleted (queued or not)
    cascaded: list[str] = msgspec.field(default_factory=list)
    """[G2] Sessions holding copies of this one's history, purged with it (``cascade``)."""
    derived: list[DerivedCopy] = msgspec.field(default_factory=list)
    """[G2] Copies of this session's history other sessions still hold (no ``cascade``)."""
    search_entries: int | None = None  # search index entries deleted (None: unknown)

    @property
    def known(self) -> bool:
        """Whether the purge recorded what it deleted (False for a pre-receipt tombstone)."""
        return bool(self.digest)


class BusyPolicy(StrEnum):
    """What a message does when its session's latest turn is still running."""

    REJECT = "reject"  # refused with SessionBusyError naming the running run; nothing stored
    QUEUE = "queue"  # started as the next turn when the turns ahead of it have ended
    INTERRUPT = "interrupt"  # the running run is canceled; the message's turn follows it
    STEER = "steer"  # meant for the running run; for now its next turn, like queue


class MessageFate(StrEnum):
    """What the store decided for a submitted message, in the transaction that stored it."""

    START = "start"  # nothing ran ahead of it: its turn may start at once
    QUEUED = "queued"  # it waits for the turn ahead of it (``after``) to end
    INTERRUPTING = "interrupting"  # it waits for ``running_run_id``, which it cancels
    STEERING = "steering"  # meant for ``running_run_id``; its next planner turn takes it
    STEERED = "steered"  # taken by ``running_run_id`` at a planner turn: no turn of its own


class MessageSubmission(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A user message for a session, given its turn's run id and turn id when submitted.

    ``message`` is the JSON of one user message; ``after`` names the turn it
    follows when the caller knows it ("" lets the store choose the session's
    latest turn). An exact retry returns the stored message; the same
    ``run_id`` with anything else different is a conflict.
    """

    session_id: str
    run_id: str
    turn_id: str
    agent_id: str
    message: bytes
    if_busy: BusyPolicy
    submitted_at: datetime
    after: str = ""
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class SessionMessage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A submitted message as the session keeps it, in arrival order (``position``, from 1).

    ``after`` is the turn its turn follows (the running run, the message ahead
    of it, or the caller's ``after``); ``running_run_id`` the run that was
    running when it arrived ("" when none); ``started`` whether its run has
    started (its start claimed it, in the start's transaction).
    """

    session_id: str
    position: int
    run_id: str
    turn_id: str
    agent_id: str
    message: bytes
    if_busy: BusyPolicy
    submitted_at: datetime
    requested_after: str
    labels: dict[str, str]
    fate: MessageFate
    after: str
    running_run_id: str
    started: bool = False
