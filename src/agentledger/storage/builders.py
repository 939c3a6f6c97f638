"""Build valid store commands for one run, with deterministic event keys.

The runtime, the conformance suite and third-party callers all need the same
well-formed commands; building them in one place keeps their records in
agreement with the contract (timestamps, labels, reasons) [J1].
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Literal

import msgspec

from agentledger.errors import ValidationError
from agentledger.storage import payloads
from agentledger.storage.types import (
    Checkpoint,
    ChildRunStart,
    OneShotChildRunStart,
    OneShotRunStart,
    Record,
    RootRunStart,
    RunCancellation,
    RunStart,
    RunStatus,
    RunSuspension,
    RunTerminal,
)
from agentledger.storage.validation import validate_run_start

__all__ = ["RecordBuilder"]

_OUTCOMES: dict[
    RunStatus,
    tuple[Literal["success", "failed", "canceled"], Literal["completed", "failed", "canceled"]],
] = {
    RunStatus.COMPLETED: ("success", "completed"),
    RunStatus.FAILED: ("failed", "failed"),
    RunStatus.CANCELED: ("canceled", "canceled"),
}


class RecordBuilder:
    """Commands and records for the run ``run``, all stamped with its identity.

    Default event keys are stable per run (``run_started``, ``run_completed`` ...),
    so building the same command twice gives an exact retry [X1].
    """

    def __init__(self, run: RunStart, *, turn_id: str = "") -> None:
        self.run = run
        self.turn_id = turn_id

    def record(self, type: str, payload: bytes, *, event_key: str, at: datetime) -> Record:
        """An ordinary record of this run."""
        return Record(
            run_id=self.run.run_id,
            agent_id=self.run.agent_id,
            session_id=self.run.session_id,
            turn_id=self.turn_id,
            event_key=event_key,
            type=type,
            timestamp=at,
            payload=payload,
        )

    def follows(self, previous_run_id: str, through: str, *, at: datetime) -> Record:
        """The record saying this run's transcript is the next turn after ``previous_run_id``'s,
        read through its record ``through`` (a conversation by reference)."""
        reference = payloads.TranscriptReference(
            kind="next_turn", run_id=previous_run_id, through=through
        )
        return self.record(
            payloads.TRANSCRIPT_REFERENCED,
            reference.encode(),
            event_key="transcript:referenced",
            at=at,
        )

    def _encode(self, build: Callable[[], payloads._Payload]) -> bytes:
        """A lifecycle payload's bytes; what cannot be encoded raises the store's typed error."""
        try:
            return build().encode()
        except (TypeError, ValueError, msgspec.EncodeError) as e:  # incl. UnicodeEncodeError
            validate_run_start(self.run)  # raises the store's own error for a bad run
            raise ValidationError(
                field="payload", expected="text without lone surrogates", got=str(e)
            ) from e

    def _labels(self) -> dict[str, str]:
        try:
            return dict(self.run.labels)
        except (TypeError, ValueError) as e:
            validate_run_start(self.run)
            raise ValidationError(field="run.labels", expected="a dict", got=str(e)) from e

    def _started(self) -> Record:
        encoded = self._encode(
            lambda: payloads.RunStarted(
                parent_run_id=self.run.parent_run_id,
                predecessor_run_id=self.run.predecessor_run_id,
                labels=dict(self.run.labels),
            )
        )
        return self.record(
            payloads.RUN_STARTED,
            encoded,
            event_key="run_started",
            at=self.run.started_at,
        )

    def _session_ended(self) -> Record:
        return self.completed(
            RunStatus.CANCELED, at=self.run.started_at, reason=payloads.SESSION_ENDED
        )

    def _link(
        self, parent_agent_id: str, tool_name: str, tool_call_id: str, at: datetime | None
    ) -> Record:
        payload = payloads.ChildRunLinked(
            tool_name=tool_name,
            tool_call_id=tool_call_id,
            child_run_id=self.run.run_id,
            child_agent_id=self.run.agent_id,
        )
        return Record(
            run_id=self.run.parent_run_id,
            agent_id=parent_agent_id,
            session_id=self.run.session_id,
            turn_id=self.turn_id,
            event_key=f"child_run_linked:{self.run.run_id}",
            type=payloads.CHILD_RUN_LINKED,
            timestamp=at or self.run.started_at,
            payload=self._encode(lambda: payload),
        )

    def root_start(self) -> RootRunStart:
        """[L1] start this root run."""
        return RootRunStart(run=self.run, started=self._started(), canceled=self._session_ended())

    def child_start(
        self,
        *,
        parent_agent_id: str,
        tool_name: str,
        tool_call_id: str,
        linked_at: datetime | None = None,
    ) -> ChildRunStart:
        """[L2] start this run as a child of ``run.parent_run_id``."""
        return ChildRunStart(
            run=self.run,
            parent_linked=self._link(parent_agent_id, tool_name, tool_call_id, linked_at),
            started=self._started(),
            canceled=self._session_ended(),
        )

    def one_shot_start(self) -> OneShotRunStart:
        """[L3] start this sessionless run."""
        return OneShotRunStart(run=self.run, started=self._started())

    def one_shot_child_start(
        self,
        *,
        parent_agent_id: str,
        tool_name: str,
        tool_call_id: str,
        linked_at: datetime | None = None,
    ) -> OneShotChildRunStart:
        """[L4] start this sessionless run as a child of ``run.parent_run_id``."""
        return OneShotChildRunStart(
            run=self.run,
            parent_linked=self._link(parent_agent_id, tool_name, tool_call_id, linked_at),
            started=self._started(),
        )

    def cancellation(
        self, reason: str, *, at: datetime, event_key: str = "cancellation_intent"
    ) -> RunCancellation:
        """[L5] record ``reason`` as this run's cancellation request."""
        payload = payloads.CancellationIntent(reason=reason)
        record = self.record(
            payloads.CANCELLATION_INTENT, self._encode(lambda: payload), event_key=event_key, at=at
        )
        return RunCancellation(run_id=self.run.run_id, reason=reason, record=record)

    def suspension(
        self,
        checkpoint: Checkpoint,
        *,
        at: datetime,
        pending_count: int = 1,
        required_tools: tuple[str, ...] = (),
        version: int = 1,
        event_key: str = "run_suspended",
    ) -> RunSuspension:
        """[L6] suspend this run with ``checkpoint``."""
        payload = payloads.RunSuspended(
            suspension_id=checkpoint.id,
            version=version,
            pending_count=pending_count,
            required_tools=required_tools,
        )
        record = self.record(
            payloads.RUN_SUSPENDED, self._encode(lambda: payload), event_key=event_key, at=at
        )
        return RunSuspension(run_id=self.run.run_id, checkpoint=checkpoint, record=record)

    def completed(
        self,
        status: RunStatus,
        *,
        at: datetime,
        reason: str = "",
        failure: payloads.Failure | None = None,
        event_key: str = "run_completed",
    ) -> Record:
        """The ``run_completed`` record for ``status``.

        For ``canceled``, ``reason`` is the run's cancellation reason, or
        ``engine_canceled`` when it has none [C3].
        """
        wire_status, phase = _OUTCOMES[status]
        note = None
        if status is RunStatus.CANCELED:
            note = payloads.CancellationNote(reason=reason or payloads.ENGINE_CANCELED)
        payload = payloads.RunCompleted(
            status=wire_status,
            phase=phase,
            failure=failure,
            cancellation=note,
            labels=self._labels(),
        )
        return self.record(
            payloads.RUN_COMPLETED, self._encode(lambda: payload), event_key=event_key, at=at
        )

    def terminal(
        self,
        status: RunStatus,
        *,
        at: datetime,
        reason: str = "",
        failure: payloads.Failure | None = None,
        event_key: str = "run_completed",
    ) -> RunTerminal:
        """[L7] end this run with ``status``."""
        record = self.completed(status, at=at, reason=reason, failure=failure, event_key=event_key)
        return RunTerminal(run_id=self.run.run_id, status=status, record=record)
