"""A message while a run is busy: the decision that orders a session's messages.

A message submitted to a session is kept in the session's ordered list of
messages, in the store's transaction, with the turn it follows and what was
decided for it (:class:`MessageFate`). Two messages at the same moment get one
order because this decision and its write share one transaction. A run started
for a message claims it in its start's transaction: only the first message
whose turn has not started may start, and only once the turn it follows has
ended, so exactly one start of each message wins.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime

import msgspec

from agentledger.errors import (
    RunConflictError,
    RunSessionMismatchError,
    SessionBusyError,
    SessionEndedError,
    SessionPurgedError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.lifecycle.appends import carry, check_batch
from agentledger.storage.lifecycle.guards import owned_run
from agentledger.storage.lifecycle.reads import require_run, require_session, run_session_status
from agentledger.storage.state import Plan, StateReader
from agentledger.storage.types import (
    AppendResult,
    BusyPolicy,
    MessageFate,
    MessageSubmission,
    Record,
    RunStart,
    RunStatus,
    SessionMessage,
    SessionStatus,
    TurnAppend,
)
from agentledger.storage.validation import (
    DEFAULT_LIMITS,
    SizeLimits,
    check_labels,
    check_timestamp,
    require_id,
)

__all__ = [
    "MESSAGE_STEERED",
    "SteeredMark",
    "claim_message",
    "is_user_message",
    "latest_running_turn",
    "list_session_messages",
    "load_pending_messages",
    "plan_append_turn",
    "plan_submit_message",
    "steered_records",
]

MESSAGE_STEERED = "session_message_steered"
"""The record that says a steering message joined the run: its run id, position and turn."""


class SteeredMark(msgspec.Struct, frozen=True, kw_only=True):
    """The payload of ``session_message_steered``: which message joined the run, where it
    stood in the session, and that it was steered (not started as a turn of its own)."""

    message_run_id: str
    position: int
    turn_id: str
    submitted_at: datetime
    fate: str = "steered"


_COMPARED = (
    "session_id",
    "turn_id",
    "agent_id",
    "message",
    "if_busy",
    "submitted_at",
    "labels",
)


def _check_submission(sub: MessageSubmission, limits: SizeLimits) -> BusyPolicy:
    if not isinstance(sub, MessageSubmission):
        raise ValidationError(field="submission", expected="a MessageSubmission", got=sub)
    for field in ("session_id", "run_id", "turn_id", "agent_id"):
        require_id(field, getattr(sub, field))
    if sub.after:
        require_id("after", sub.after)
    try:
        policy = BusyPolicy(sub.if_busy)
    except ValueError:
        expected = "one of " + ", ".join(repr(p.value) for p in BusyPolicy)
        raise ValidationError(field="if_busy", expected=expected, got=sub.if_busy) from None
    if not isinstance(sub.message, bytes) or not sub.message:
        raise ValidationError(field="message", expected="the JSON of one user message", got="")
    if len(sub.message) > limits.max_payload_bytes:
        raise ValidationError(
            field="message",
            expected=f"at most {limits.max_payload_bytes} bytes (max_payload_bytes)",
            got=f"{len(sub.message)} bytes",
        )
    if not is_user_message(sub.message):
        raise ValidationError(
            field="message", expected="the JSON of one user message", got=sub.message[:80]
        )
    check_timestamp("submitted_at", sub.submitted_at)
    check_labels("labels", sub.labels)
    return policy


def is_user_message(data: bytes) -> bool:
    """Whether ``data`` is the JSON of one user message (what a submitted message holds)."""
    try:
        decoded = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return False
    return isinstance(decoded, dict) and decoded.get("role") == "user"


def latest_running_turn(reader: StateReader, session_id: str) -> str:
    """The session's newest running root run ("" when none runs)."""
    newest = None
    for run_id in reader.running_run_ids(session_id):
        row = reader.run(run_id)
        if row is None or row.parent_run_id:
            continue
        if newest is None or (row.started_at, row.run_id) > (newest.started_at, newest.run_id):
            newest = row
    return "" if newest is None else newest.run_id


def _retry(stored: SessionMessage, sub: MessageSubmission) -> Plan[SessionMessage]:
    for field in _COMPARED:
        expected, got = getattr(stored, field), getattr(sub, field)
        if expected != got:
            raise RunConflictError(
                run_id=sub.run_id, field=f"message.{field}", expected=expected, got=got
            )
    if stored.requested_after != sub.after:
        raise RunConflictError(
            run_id=sub.run_id,
            field="message.after",
            expected=stored.requested_after,
            got=sub.after,
        )
    return Plan(stored)


def plan_submit_message(
    reader: StateReader, sub: MessageSubmission, *, limits: SizeLimits = DEFAULT_LIMITS
) -> Plan[SessionMessage]:
    """Keep a message in its session's order and decide its fate, in one transaction.

    Not busy (no turn running, no message waiting): fate ``start``. Busy:
    ``reject`` raises :class:`SessionBusyError` and stores nothing; ``queue``
    waits behind the last waiting message or the running turn; ``interrupt``
    waits for the running run, which the caller cancels naming this message;
    ``steer`` is marked for the running run (fate ``steering``, also behind
    other steering messages for it): the run's next planner turn takes it
    (:func:`plan_append_turn`); if the run ends first, it waits like a queued
    message.

    Raises:
        SessionBusyError: busy and ``reject``.
        SessionEndedError, SessionPurgedError, SessionNotFoundError: no new work.
        RunConflictError: the run id is taken, or a retry differs.
        ValidationError: the submission is malformed.
    """
    policy = _check_submission(sub, limits)
    purged = reader.purged_run_session(sub.run_id)
    if purged is not None:
        raise SessionPurgedError(session_id=purged, run_id=sub.run_id)
    session = require_session(reader, sub.session_id)
    stored = reader.session_message(sub.run_id)
    if stored is not None:
        return _retry(stored, sub)
    if session.status is not SessionStatus.ACTIVE:
        raise SessionEndedError(session_id=sub.session_id)
    if reader.run(sub.run_id) is not None:
        raise RunConflictError(
            run_id=sub.run_id, field="run_id", expected="a run id not yet used", got=sub.run_id
        )
    running = latest_running_turn(reader, sub.session_id)
    pending = reader.pending_messages(sub.session_id)
    latest = reader.latest_message(sub.session_id)
    waiting = [m.run_id for m in pending]
    if pending or running:
        if sub.after and sub.after not in (running, *waiting):
            raise ValidationError(
                field="after",
                expected=f"the session's latest turn {(waiting or [running])[-1]!r} "
                "(or a turn still to end) while the session is busy",
                got=sub.after,
            )
        if policy is BusyPolicy.REJECT:
            raise SessionBusyError(
                session_id=sub.session_id,
                run_id=running or waiting[0],
                message_run_id=sub.run_id,
            )
        after = waiting[-1] if waiting else running
        fate = MessageFate.QUEUED
        steering = all(
            m.fate is MessageFate.STEERING and m.running_run_id == running for m in pending
        )
        if running and steering and policy is BusyPolicy.STEER:
            fate = MessageFate.STEERING
        elif running and policy is BusyPolicy.INTERRUPT:
            fate = MessageFate.INTERRUPTING
    else:
        after = sub.after
        if after:
            source = require_run(reader, after, "after")
            if source.session_id != sub.session_id:
                raise RunSessionMismatchError(
                    run_id=after, expected=sub.session_id, got=source.session_id
                )
        elif latest is not None and reader.run(latest.run_id) is not None:
            after = latest.run_id  # a bare message follows the session's latest turn
        fate = MessageFate.START
    message = SessionMessage(
        session_id=sub.session_id,
        position=(latest.position if latest is not None else 0) + 1,
        run_id=sub.run_id,
        turn_id=sub.turn_id,
        agent_id=sub.agent_id,
        message=sub.message,
        if_busy=policy,
        submitted_at=sub.submitted_at,
        requested_after=sub.after,
        labels=dict(sub.labels),
        fate=fate,
        after=after,
        running_run_id=running,
    )
    return Plan(message, messages=[message])


def _referenced(carried: Sequence[Record]) -> str:
    for record in carried:
        if record.type == payloads.TRANSCRIPT_REFERENCED:
            with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                return payloads.TranscriptReference.decode(record.payload).run_id
    return ""


def claim_message(
    reader: StateReader, run: RunStart, carried: Sequence[Record]
) -> SessionMessage | None:
    """The message a new root run starts, marked started; None when it starts none.

    Only the first waiting message of its session may start, only once the
    turn it was queued after has ended, and only following that turn (by
    reference), so of two processes starting it, one wins. (A run started
    without a message, with its own history, neither waits nor holds the queue.)

    Raises:
        SessionBusyError: the turn ahead still runs, or a message waits ahead of it.
        RunConflictError: the start differs from the message (agent, turn followed), or
            the message was taken by the run it steered.
    """
    message = reader.session_message(run.run_id)
    if message is None:
        return None
    if message.agent_id != run.agent_id or message.session_id != run.session_id:
        field = "agent_id" if message.agent_id != run.agent_id else "session_id"
        raise RunConflictError(
            run_id=run.run_id,
            field=f"run.{field}",
            expected=getattr(message, field),
            got=getattr(run, field),
        )
    if message.fate is MessageFate.STEERED:  # it joined the run it steered: no turn of its own
        raise RunConflictError(
            run_id=run.run_id,
            field="message.fate",
            expected="a message waiting for its own turn",
            got=f"steered into {message.running_run_id}",
        )
    pending = reader.pending_messages(run.session_id)
    if pending and pending[0].run_id != run.run_id:
        raise SessionBusyError(
            session_id=run.session_id, run_id=pending[0].run_id, message_run_id=run.run_id
        )
    if message.after and _referenced(carried) != message.after:
        raise RunConflictError(
            run_id=run.run_id,
            field="records.transcript_messages_referenced",
            expected=f"a reference to the turn the message follows, {message.after!r}",
            got=_referenced(carried) or "no reference",
        )
    if message.after:
        source = reader.run(message.after)
        if source is not None and source.status is RunStatus.RUNNING:
            raise SessionBusyError(
                session_id=run.session_id, run_id=message.after, message_run_id=run.run_id
            )
    return msgspec.structs.replace(message, started=True)


def load_pending_messages(reader: StateReader, session_id: str) -> list[SessionMessage]:
    """The session's messages whose turn has not started, in arrival order."""
    require_session(reader, session_id)
    return reader.pending_messages(session_id)


def list_session_messages(reader: StateReader, session_id: str) -> list[SessionMessage]:
    """Every message submitted to the session, in arrival order, with its fate."""
    require_session(reader, session_id)
    return reader.session_messages(session_id)


def steered_records(run: Record, message: SessionMessage) -> list[Record]:
    """The records of a steering message joining the run: the user message, then its
    provenance (which message, where it stood in the session, that it was steered)."""
    provenance = msgspec.json.encode(
        SteeredMark(
            message_run_id=message.run_id,
            position=message.position,
            turn_id=message.turn_id,
            submitted_at=message.submitted_at,
        )
    )
    base = msgspec.structs.replace(run, id="")
    return [
        msgspec.structs.replace(
            base,
            type=payloads.TRANSCRIPT_APPENDED,
            event_key=f"steer:{message.run_id}:messages",
            payload=b"[" + message.message + b"]",
        ),
        msgspec.structs.replace(
            base, type=MESSAGE_STEERED, event_key=f"steer:{message.run_id}", payload=provenance
        ),
    ]


def plan_append_turn(
    reader: StateReader, records: Sequence[Record], *, limits: SizeLimits = DEFAULT_LIMITS
) -> Plan[TurnAppend]:
    """A planner turn's first write: ``records`` appended as ``append_run_records`` does,
    and the steering messages waiting for the run taken, in the same transaction.

    Each steering message for this (running, root, sessionful) run becomes a user
    message in its log after ``records`` (which end with the last step's tool
    results, if any, so no tool use is left without its result before it), with a
    ``session_message_steered`` record naming it, and is marked taken (fate
    ``steered``, started): it no longer waits, so no start can claim it, and a
    message queued behind it now follows the run. A message taken here has no
    turn of its own; one the run did not take before it ended becomes the next
    turn. A retried write whose records are all stored takes what waits now.

    Raises:
        as ``append_run_records``.
    """
    batch = check_batch(records, limits)
    run = owned_run(reader, batch[0].run_id, batch[0])
    status = run_session_status(reader, run)
    run, results, written = carry(reader, run, batch, status)
    steered: list[SessionMessage] = []
    landed: list[AppendResult] = []
    changed: list[SessionMessage] = []
    if run.session_id and not run.parent_run_id and status is SessionStatus.ACTIVE:
        pending = reader.pending_messages(run.session_id)
        taken = {
            m.run_id: m
            for m in pending
            if m.fate is MessageFate.STEERING and m.running_run_id == run.run_id
        }
        for message in taken.values():
            run, placed, more = carry(reader, run, steered_records(batch[-1], message), status)
            landed.extend(placed)
            written.extend(more)
            done = msgspec.structs.replace(message, fate=MessageFate.STEERED, started=True)
            steered.append(done)
            changed.append(done)
        for message in pending:
            if message.run_id not in taken and message.after in taken:
                follows = message.after
                while follows in taken:  # the turn the taken message would have followed
                    follows = taken[follows].after
                changed.append(msgspec.structs.replace(message, after=follows))
    result = TurnAppend(results=results, steered=steered, steered_records=landed)
    if not written:
        return Plan(result, messages=changed)
    return Plan(result, runs=[run], records=written, messages=changed)
