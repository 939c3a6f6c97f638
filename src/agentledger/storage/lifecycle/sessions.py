"""[D1]-[D7] session decisions: create, end, purge."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

import msgspec

from agentledger.errors import (
    AccessDeniedError,
    SessionActiveError,
    SessionConflictError,
    SessionEndedError,
    SessionHasActiveRunsError,
    SessionPurgedError,
    ValidationError,
)
from agentledger.storage.lifecycle.reads import require_session
from agentledger.storage.receipts import purge_receipt
from agentledger.storage.session_image import SessionImage
from agentledger.storage.state import Plan, SessionRow, StateReader
from agentledger.storage.types import (
    DerivedCopy,
    PurgeReceipt,
    Session,
    SessionStatus,
)
from agentledger.storage.validation import (
    check_labels,
    check_timestamp,
    require_id,
)


def plan_create_session(
    reader: StateReader,
    session_id: str,
    created_at: datetime | None = None,
    labels: Mapping[str, str] | None = None,
) -> Plan[Session]:
    """[D4] [D6] create, or return the active session unchanged; an ended one is an error.

    Labels are fixed by the first create: a retry must repeat them, else
    :class:`SessionConflictError`. The creation time is the first create's
    too, but it is not compared: a retry that omits it (the store's clock,
    now to the millisecond) or gives another returns the stored session.
    """
    require_id("session_id", session_id)
    created_at = _now_ms() if created_at is None else check_timestamp("created_at", created_at)
    wanted = check_labels("labels", {} if labels is None else labels)
    if reader.session_purged(session_id):
        raise SessionPurgedError(session_id=session_id)
    existing = reader.session(session_id)
    if existing is not None:
        if existing.status is SessionStatus.ENDED:
            raise SessionEndedError(session_id=session_id)
        if existing.labels != wanted:
            raise SessionConflictError(
                session_id=session_id, field="labels", expected=existing.labels, got=wanted
            )
        return Plan(existing.public())
    row = SessionRow(
        id=session_id, status=SessionStatus.ACTIVE, created_at=created_at, labels=wanted
    )
    return Plan(row.public(), session=row)


def _now_ms() -> datetime:
    """The store's clock for an omitted creation time: now, UTC, to the millisecond."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def plan_end_session(reader: StateReader, session_id: str, ended_at: datetime) -> Plan[Session]:
    """[D2] end a session; ending an ended session returns it unchanged."""
    ended_at = check_timestamp("ended_at", ended_at)
    session = require_session(reader, session_id)
    if session.status is SessionStatus.ENDED:
        return Plan(session.public())
    row = msgspec.structs.replace(session, status=SessionStatus.ENDED, ended_at=ended_at)
    return Plan(row.public(), session=row)


def plan_purge_session(
    reader: StateReader,
    session_id: str,
    expected_digest: str = "",
    cascade: bool = False,
    scope: Mapping[str, str] | None = None,
) -> Plan[PurgeReceipt]:
    """[D3] [D7] delete an ended session with no running run, leaving a tombstone.

    The receipt is computed from what this transaction deletes and kept with
    the tombstone; purging a purged session returns that same receipt. With
    ``expected_digest`` (an archive's session digest [A1]), the purge happens
    only if the session is still exactly what was archived: a run started
    after the end ([C2]) since then makes it a ``SessionConflictError``.

    [G2] Without ``cascade`` the receipt lists the copies of the session's history
    (and of theirs, transitively: a fork of a fork)
    other sessions hold (they remain). With it, each session holding one is purged
    whole in the same transaction, under the same rules (ended, no running run),
    and named in the receipt; one that breaks a rule, or whose labels are outside
    ``scope`` (a scoped token's labels), refuses the whole purge.
    """
    require_id("session_id", session_id)
    if not isinstance(expected_digest, str):
        raise ValidationError(
            field="expected_digest", expected="a session digest or ''", got=expected_digest
        )
    if not isinstance(cascade, bool):
        raise ValidationError(field="cascade", expected="a bool", got=cascade)
    if reader.session_purged(session_id):
        return Plan(reader.purge_receipt(session_id))
    receipt = _receipt(reader, session_id)
    if expected_digest and receipt.digest != expected_digest:
        raise SessionConflictError(
            session_id=session_id, field="digest", expected=receipt.digest, got=expected_digest
        )
    copies = derived_closure(reader, session_id)
    if not cascade:
        receipt = msgspec.structs.replace(receipt, derived=copies)
        return Plan(receipt, purge_session=session_id, purge_receipt=receipt)
    holders = list(dict.fromkeys(c.session_id for c in copies))
    wanted = dict(scope or {})
    for holder in holders:
        labels = require_session(reader, holder).labels
        if any(labels.get(k) != v for k, v in wanted.items()):
            raise AccessDeniedError(
                operation="purge_session",
                status=403,
                reason=f"session {holder!r} holds a copy of {session_id!r} but is outside "
                f"the token's scope {wanted}",
            )
    cascaded = [_receipt(reader, holder) for holder in holders]
    receipt = msgspec.structs.replace(receipt, cascaded=holders)
    return Plan(receipt, purge_session=session_id, purge_receipt=receipt, cascade=cascaded)


def derived_closure(reader: StateReader, session_id: str) -> list[DerivedCopy]:
    """[G2] The copies of the session's words other sessions hold, transitively: the
    copies of its history, then the copies of theirs (a fork of a fork), each naming
    its own source; a holder is followed once, so a cycle of forks ends."""
    seen = {session_id}
    found: list[DerivedCopy] = []
    queue = [session_id]
    while queue:
        source = queue.pop(0)
        new = [c for c in reader.derived_copies(source) if c.session_id not in seen]
        found.extend(new)
        for holder in dict.fromkeys(c.session_id for c in new):
            seen.add(holder)
            queue.append(holder)
    return found


def _receipt(reader: StateReader, session_id: str) -> PurgeReceipt:
    """The receipt of purging the session now, if it may be: ended, no running run."""
    session = require_session(reader, session_id)
    if session.status is not SessionStatus.ENDED:
        raise SessionActiveError(session_id=session_id)
    running = reader.running_run_ids(session_id)
    if running:
        raise SessionHasActiveRunsError(session_id=session_id, run_ids=running)
    runs, records = reader.session_contents(session_id)
    image = SessionImage(
        session=session.public(),
        runs=[run.meta() for run in runs],
        records=records,
        checkpoints={run.run_id: run.checkpoint for run in runs if run.checkpoint is not None},
        messages=reader.session_messages(session_id),
    )
    return purge_receipt(image, purged_at=_now_ms())
