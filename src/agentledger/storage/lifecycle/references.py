"""[V1]-[V3] a history reference carried by a run start, checked in the start's transaction."""

from __future__ import annotations

from collections.abc import Sequence

from agentledger.errors import (
    RunNotActiveError,
    RunSessionMismatchError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.lifecycle.reads import require_run
from agentledger.storage.state import StateReader
from agentledger.storage.types import Record, RunStart, RunStatus
from agentledger.storage.validation import check_reference_payload

_SOURCE_STATUS = {"next_turn": RunStatus.COMPLETED, "continuation": RunStatus.SUSPENDED}
"""The status a source must have; a fork may branch from a run in any status."""


def check_reference(reader: StateReader, run: RunStart, carried: Sequence[Record]) -> None:
    """Refuse a start whose history reference does not name a record of its session.

    At most one reference per run; the source must exist in the run's own session
    (no reference crosses a session: sessions are purged independently), have the
    status its kind needs, and hold the record it ends at. A next turn and a
    continuation end at the source's last record, a continuation's source is the
    run's predecessor. Records are immutable, so what the reference names never
    changes once accepted.
    """
    found = [(i, r) for i, r in enumerate(carried) if r.type == payloads.TRANSCRIPT_REFERENCED]
    if not found:
        return
    if len(found) > 1:
        raise ValidationError(
            field=f"records[{found[1][0]}].type",
            expected="at most one history reference per run",
            got=payloads.TRANSCRIPT_REFERENCED,
        )
    i, record = found[0]
    field = f"records[{i}].payload"
    reference = check_reference_payload(record, f"records[{i}]")
    if not run.session_id:
        raise ValidationError(
            field=f"{field}.run_id",
            expected="no reference from a run without a session (seed it with messages)",
            got=reference.run_id,
        )
    source = require_run(reader, reference.run_id, f"{field}.run_id")
    if source.session_id != run.session_id:
        raise RunSessionMismatchError(
            run_id=source.run_id, expected=run.session_id, got=source.session_id
        )
    if reference.kind == "continuation" and reference.run_id != run.predecessor_run_id:
        raise ValidationError(
            field=f"{field}.run_id",
            expected=f"the run's predecessor ({run.predecessor_run_id or 'none'})",
            got=reference.run_id,
        )
    wanted = _SOURCE_STATUS.get(reference.kind)
    if wanted is not None and source.status is not wanted:
        raise RunNotActiveError(
            run_id=source.run_id, expected=wanted.value, got=source.status.value
        )
    through = int(reference.through)
    if through > source.last_seq:
        raise ValidationError(
            field=f"{field}.through",
            expected=f"a record of run {source.run_id} (1..{source.last_seq})",
            got=reference.through,
        )
    if wanted is not None and through != source.last_seq:
        raise ValidationError(
            field=f"{field}.through",
            expected=f"the last record of run {source.run_id} ({source.last_seq})",
            got=reference.through,
        )
