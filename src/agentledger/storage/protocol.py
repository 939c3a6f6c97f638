"""The store protocols: ``Store`` for workers, ``SessionAdmin`` for hosts, and the
``VerifiedTranscripts`` capability some backends add for replay."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from agentledger.storage.accounting import LabelUsage, UsageTotals
from agentledger.storage.derivation import DerivedCopy
from agentledger.storage.search import SearchPage
from agentledger.storage.session_image import SessionImage
from agentledger.storage.types import (
    AppendResult,
    Checkpoint,
    ChildRunStart,
    MessageSubmission,
    OneShotChildRunStart,
    OneShotRunStart,
    Page,
    PurgeReceipt,
    Record,
    RepairResult,
    RootRunStart,
    RunCancellation,
    RunMeta,
    RunStatus,
    RunSuspension,
    RunTerminal,
    Session,
    SessionMessage,
    SessionPage,
    SessionStatus,
    StartResult,
    TranscriptSegment,
    TurnAppend,
)

__all__ = [
    "DEFAULT_PAGE_LIMIT",
    "DEFAULT_SEARCH_LIMIT",
    "AdminStore",
    "SessionAdmin",
    "Store",
    "VerifiedTranscripts",
]

DEFAULT_PAGE_LIMIT = 100
DEFAULT_SEARCH_LIMIT = 50


@runtime_checkable
class Store(Protocol):
    """Every runtime write and read a worker makes. One implementation owns them all.

    Each lifecycle method stores a state change and the record proving it in
    one operation; exact retries return the original ids; any other difference
    is a :class:`~agentledger.errors.ConflictError`, never an overwrite.
    """

    async def start_root_run(self, cmd: RootRunStart, /) -> StartResult:
        """[L1] Save a root run and its ``run_started`` (or [C2] stop) together."""
        ...

    async def start_child_run(self, cmd: ChildRunStart, /) -> StartResult:
        """[L2] Save the parent link, the child run and its ``run_started`` together."""
        ...

    async def start_one_shot_run(self, cmd: OneShotRunStart, /) -> StartResult:
        """[L3] Save a run with no session and its ``run_started``."""
        ...

    async def start_one_shot_child_run(self, cmd: OneShotChildRunStart, /) -> StartResult:
        """[L4] Save the link and start of a sessionless child together."""
        ...

    async def append_run_record(self, record: Record, /) -> AppendResult:
        """[L8] Append an ordinary record to a running run's log."""
        ...

    async def append_run_records(self, records: Sequence[Record], /) -> list[AppendResult]:
        """[B1] Append ordinary records of one run, in order, in one transaction.

        All are accepted (each inserted or an exact retry) or none: the first
        refusal is raised and the store is unchanged. One result per record.
        """
        ...

    async def append_turn_records(self, records: Sequence[Record], /) -> TurnAppend:
        """A planner turn's first write: ``records`` appended as ``append_run_records``
        does and, in the same transaction, the steering messages waiting for the run
        (a running root run of a session) taken: each becomes a user message in the
        run's log after ``records``, with a ``session_message_steered`` record naming
        it, and is marked ``steered`` (it no longer waits, so it never starts a turn of
        its own). A message the run does not take before it ends starts the next turn.
        """
        ...

    async def record_run_cancellation(self, cmd: RunCancellation, /) -> AppendResult:
        """[L5] Save the first cancellation reason and its intent record."""
        ...

    async def record_run_suspension(self, cmd: RunSuspension, /) -> AppendResult:
        """[L6] Save the checkpoint, ``suspended`` status and ``run_suspended`` record."""
        ...

    async def record_run_terminal(self, cmd: RunTerminal, /) -> AppendResult:
        """[L7] Save the final status and its ``run_completed`` record."""
        ...

    async def repair_run_suspension(self, cmd: RunSuspension, /) -> RepairResult:
        """[E1] Store a missing suspension only while the run is still running."""
        ...

    async def repair_run_terminal(self, cmd: RunTerminal, /) -> RepairResult:
        """[E1] Store a missing terminal only while the run is still running."""
        ...

    async def save_tool_result(self, run_id: str, call_key: str, data: bytes, /) -> bytes:
        """Save a running run's tool call result unless one is saved; return the kept bytes.

        The first save wins: a later one (another attempt that also ran the
        tool) gets the stored bytes back. Private scratch, never a record: the
        run's suspension or terminal deletes it in its own transaction.
        """
        ...

    async def load_tool_result(self, run_id: str, call_key: str, /) -> bytes | None:
        """The result :meth:`save_tool_result` kept for this call of a running run, or None."""
        ...

    async def load_run(self, run_id: str, /) -> RunMeta:
        """The run's current meta."""
        ...

    async def load_session_status(self, session_id: str, /) -> SessionStatus:
        """Whether the session still accepts new work."""
        ...

    async def load_run_suspension(self, run_id: str, /) -> Checkpoint:
        """The checkpoint a suspended run stored."""
        ...

    async def list_run_records(
        self, run_id: str, /, cursor: str = "", limit: int = DEFAULT_PAGE_LIMIT
    ) -> Page:
        """[L9] One page of a run's records in commit order."""
        ...

    async def load_transcript_chain(
        self, run_id: str, /, *, windowed: bool = False
    ) -> tuple[TranscriptSegment, ...]:
        """[V4] The transcript records of ``run_id`` and of each run its history reaches.

        The first segment is the run itself through its newest record; each next
        one is the source the previous segment's reference names, through the
        record it names. Each run's records through its cut are checked as a
        listing of them is (checksums, gaps, lifecycle payloads). Read in a
        bounded number of statements, however long the chain. ``windowed`` [V5]:
        the chain ends where the window that governs the run's model input
        starts (see :mod:`agentledger.storage.transcript_chain`).
        """
        ...

    async def list_session_run_records(
        self, session_id: str, /, cursor: str = "", limit: int = DEFAULT_PAGE_LIMIT
    ) -> Page:
        """[L9] One page of a session's records, its runs interleaved as committed."""
        ...

    async def submit_message(self, sub: MessageSubmission, /) -> SessionMessage:
        """Keep a message in its session's order and decide its fate, in one transaction."""
        ...

    async def load_pending_messages(self, session_id: str, /) -> list[SessionMessage]:
        """The session's messages whose turn has not started, in arrival order."""
        ...

    async def list_session_messages(self, session_id: str, /) -> list[SessionMessage]:
        """Every message submitted to the session, in arrival order, with its fate."""
        ...

    async def load_session_usage(self, session_id: str, /) -> UsageTotals:
        """[G3] The session's bytes, records, runs and tokens, kept as its records were written.

        One read of counters the writes keep in their own transactions, never a scan
        (see :mod:`agentledger.storage.accounting`).
        """
        ...

    async def load_run_usage(self, run_id: str, /) -> UsageTotals:
        """[G3] The run's bytes, records and tokens (``runs`` is 1), kept as written."""
        ...

    async def search(
        self,
        text: str,
        /,
        *,
        labels: Mapping[str, str] | None = None,
        session_id: str | None = None,
        limit: int = DEFAULT_SEARCH_LIMIT,
        cursor: str | None = None,
    ) -> SearchPage:
        """[G1] One page of the messages holding every word of ``text`` (whole words,
        any case), newest first, within the sessions carrying ``labels`` (or the one
        ``session_id``); the page says how many sealed sessions it could not see."""
        ...


@runtime_checkable
class SessionAdmin(Protocol):
    """Session administration: the host's, never a worker's [D1]."""

    async def create_session(
        self,
        session_id: str,
        /,
        created_at: datetime | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Session:
        """[D4] [D6] Create a session with fixed labels; an exact retry returns it unchanged.

        Omitted, ``created_at`` is the store's clock (UTC, to the millisecond).
        A retry must repeat the labels (else ``SessionConflictError``); the
        creation time of the first create stays, whatever a retry gives.
        """
        ...

    async def load_session(self, session_id: str, /) -> Session:
        """The session as stored."""
        ...

    async def end_session(self, session_id: str, /, ended_at: datetime) -> Session:
        """[D2] Stop new work in the session; idempotent."""
        ...

    async def purge_session(
        self, session_id: str, /, expected_digest: str = "", cascade: bool = False
    ) -> PurgeReceipt:
        """[D3] [D7] Delete an ended session with no running run, leaving a tombstone.

        Returns what was deleted; purging again returns the same receipt. With
        ``expected_digest`` (an archive's [A1]), only if the session's digest is
        still that one; else ``SessionConflictError`` (``field="digest"``), and
        nothing is deleted.

        [G2] Without ``cascade`` the receipt lists (``derived``) the copies of the
        session's history other sessions hold, and the copies of those copies (a
        fork of a fork), each naming its own source: they remain. With ``cascade``
        each session holding one is purged whole in the same transaction (it must be
        ended with no running run, as any purged session; else nothing is deleted)
        and named in ``cascaded``, each with its own tombstone and receipt. Through
        the service only a host may purge, and a scoped host only within its scope.
        """
        ...

    async def import_session(self, image: SessionImage, /) -> None:
        """[A1] Write an ended session exactly as imaged (a restore), in one transaction.

        Refused, changing nothing, if the session id or any run id is held or
        purged here, or the image contradicts itself (see
        :func:`agentledger.storage.session_import.plan_import_session`).
        """
        ...

    async def list_runs_by_session(
        self, session_id: str, /, statuses: Iterable[RunStatus] = ()
    ) -> list[RunMeta]:
        """The session's runs in start order, optionally only those with these statuses."""
        ...

    async def list_sessions(
        self,
        statuses: Iterable[SessionStatus] = (),
        labels: Mapping[str, str] | None = None,
        cursor: str = "",
        limit: int = DEFAULT_PAGE_LIMIT,
    ) -> SessionPage:
        """[D6] One page of sessions, newest first (``created_at``, then id, descending).

        Only sessions with one of ``statuses`` (if any) carrying every one of
        ``labels``; ``cursor`` is a ``next_cursor`` of the same filter.
        """
        ...

    async def usage_by_label(
        self, key: str = "", labels: Mapping[str, str] | None = None
    ) -> list[LabelUsage]:
        """[G3] UsageTotals totals of the sessions carrying ``labels``: one per value of label
        ``key``, by value (sessions without the label are left out), or one total when
        ``key`` is "". One query over the per-session counters.
        """
        ...

    async def list_derived_copies(self, session_id: str, /) -> list[DerivedCopy]:
        """[G2] The copies of the session's history held in other sessions: each run whose
        history was copied from one of its runs (a fork into another session), by holding
        session, then in commit order. Answered for a purged session too: the copies a
        purge left behind.
        """
        ...


@runtime_checkable
class AdminStore(Store, SessionAdmin, Protocol):
    """Both protocols on one object that can be closed: what a ``Target`` opens.

    Every backend (``MemoryStore``, ``SQLiteStore``, ``PostgresStore``) and
    ``StoreClient`` is one; the CLI, the service and workers hold this type.
    """

    async def close(self) -> None:
        """Release the store; every later call raises ``StoreClosedError``."""
        ...


@runtime_checkable
class VerifiedTranscripts(Protocol):
    """A store whose transcript records replay may decode without re-checking them [R2].

    Declared by ``SQLiteStore`` and ``PostgresStore``. When
    :attr:`transcripts_verified` is true, the store verifies every record's
    checksum as it reads it and validated every transcript record strictly on
    write (a database holding records from before that check says False; see the
    backends' ``transcripts_checked`` migrations), so the bytes it returns are
    the bytes that were checked, and checking them again proves nothing new.
    """

    @property
    def transcripts_verified(self) -> bool:
        """Whether replay may trust this store's transcript payloads (fixed at open)."""
        ...

    async def verified_transcript_payloads(self, run_id: str, /) -> list[bytes]:
        """The payloads of a run's transcript records, in log order, as plaintext.

        Reads and checks the run's whole log exactly as paging
        ``list_run_records`` through it would (same errors, checksums, gaps and
        lifecycle checks), without building a ``Record`` per transcript row.
        """
        ...
