"""The decision to import a whole ended session verbatim (for restore [A1]), written once.

:func:`plan_import_session` checks a :class:`SessionImage` against the store
(through the backend's transaction) and against itself, then returns a
:class:`Plan` that writes the session row, its runs (with the lifecycle keys
derived from their records), every record with its id, in session order, and
the session's submitted messages, started or waiting, with their fates.
A backend applies it like any other plan, so a refused import changes nothing.
It lives beside :mod:`agentledger.storage.lifecycle` only because that module
is long enough already.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentledger.errors import (
    CorruptRecordError,
    RunConflictError,
    SessionActiveError,
    SessionConflictError,
    SessionPurgedError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.invariants import run_problems
from agentledger.storage.lifecycle import check_listed
from agentledger.storage.lifecycle.messages import is_user_message
from agentledger.storage.session_image import SessionImage
from agentledger.storage.state import Plan, RunRow, SessionRow, StateReader
from agentledger.storage.transcript_chain import decode_reference
from agentledger.storage.types import (
    Checkpoint,
    Record,
    RunMeta,
    RunStatus,
    SessionMessage,
    SessionStatus,
)
from agentledger.storage.validation import (
    DEFAULT_LIMITS,
    SizeLimits,
    check_labels,
    check_stored_record,
    check_timestamp,
    decode_stored_payload,
    normalize_record,
    require_id,
)

__all__ = ["plan_import_session"]


def _bad(run_id: str, record_id: str, reason: str) -> CorruptRecordError:
    return CorruptRecordError(run_id=run_id, record_id=record_id, reason=f"in the image: {reason}")


def _check_session(image: SessionImage) -> str:
    if not isinstance(image, SessionImage):
        raise ValidationError(field="image", expected="a SessionImage", got=type(image).__name__)
    session = image.session
    session_id = require_id("image.session.id", session.id)
    if session.status is not SessionStatus.ENDED or session.ended_at is None:
        raise SessionActiveError(session_id=session_id)  # only ended sessions are imported
    check_timestamp("image.session.created_at", session.created_at)
    check_timestamp("image.session.ended_at", session.ended_at)
    check_labels("image.session.labels", session.labels)
    return session_id


def _check_against_store(reader: StateReader, image: SessionImage, session_id: str) -> None:
    if reader.session_purged(session_id):
        raise SessionPurgedError(session_id=session_id)
    existing = reader.session(session_id)
    if existing is not None:
        raise SessionConflictError(
            session_id=session_id,
            field="id",
            expected="a session this store never held",
            got=session_id,
        )
    for run in image.runs:
        purged = reader.purged_run_session(run.run_id)
        if purged is not None:
            raise SessionPurgedError(session_id=purged, run_id=run.run_id)
        if reader.run(run.run_id) is not None:
            raise RunConflictError(
                run_id=run.run_id,
                field="run_id",
                expected="a run id this store never held",
                got=run.run_id,
            )
    for message in image.messages:
        purged = reader.purged_run_session(message.run_id)
        if purged is not None:
            raise SessionPurgedError(session_id=purged, run_id=message.run_id)
        if reader.session_message(message.run_id) is not None or (
            not message.started and reader.run(message.run_id) is not None
        ):
            raise RunConflictError(
                run_id=message.run_id,
                field="message.run_id",
                expected="a message run id this store never held",
                got=message.run_id,
            )


def _run_row(run: RunMeta, log: Sequence[Record], link_key: str, cp: Checkpoint | None) -> RunRow:
    """The stored run: its meta plus the lifecycle keys its records carry [X2]."""
    keys = {"started_key": "", "cancel_key": "", "suspension_key": "", "terminal_key": ""}
    by_type = {
        payloads.RUN_STARTED: "started_key",
        payloads.CANCELLATION_INTENT: "cancel_key",
        payloads.RUN_SUSPENDED: "suspension_key",
        payloads.RUN_COMPLETED: "terminal_key",
    }
    for record in log:
        name = by_type.get(record.type)
        if name is None:
            continue
        if keys[name]:
            raise _bad(run.run_id, record.id, f"a second {record.type} record")
        keys[name] = record.event_key
    return RunRow(
        run_id=run.run_id,
        agent_id=run.agent_id,
        session_id=run.session_id,
        parent_run_id=run.parent_run_id,
        status=run.status,
        start_outcome=run.start_outcome,
        started_at=run.started_at,
        updated_at=run.updated_at,
        labels=run.labels,
        cancellation_reason=run.cancellation_reason,
        successor_run_id=run.successor_run_id,
        link_key=link_key,
        checkpoint=cp,
        last_seq=len(log),
        started_key=keys["started_key"],
        cancel_key=keys["cancel_key"],
        suspension_key=keys["suspension_key"],
        terminal_key=keys["terminal_key"],
        start_records=-1,  # unknown: the image does not say; a retry is checked record by record
    )


def _check_runs(
    image: SessionImage, session_id: str, limits: SizeLimits
) -> dict[str, list[Record]]:
    """Each run belongs to the session, once, with a parent before it; its log as imaged."""
    logs: dict[str, list[Record]] = {}
    for i, run in enumerate(image.runs):
        require_id(f"image.runs[{i}].run_id", run.run_id)
        if run.run_id in logs:
            raise _bad(run.run_id, "", "the run is listed twice")
        if run.session_id != session_id:
            raise _bad(run.run_id, "", f"session_id is {run.session_id!r}, not {session_id!r}")
        if run.parent_run_id and run.parent_run_id not in logs:
            raise _bad(run.run_id, "", f"parent {run.parent_run_id!r} is not an earlier run")
        if run.status is RunStatus.RUNNING:
            raise _bad(run.run_id, "", "status is running in an ended session")
        check_timestamp(f"image.runs[{i}].started_at", run.started_at)
        check_timestamp(f"image.runs[{i}].updated_at", run.updated_at)
        check_labels(f"image.runs[{i}].labels", run.labels)
        logs[run.run_id] = []
    for run_id, checkpoint in image.checkpoints.items():
        if run_id not in logs:
            raise _bad(run_id, "", "a checkpoint of a run that is not in the image")
        if len(checkpoint.data) > limits.max_checkpoint_bytes:
            raise ValidationError(
                field=f"image.checkpoints[{run_id!r}].data",
                expected=f"at most {limits.max_checkpoint_bytes} bytes (this store's cap)",
                got=f"{len(checkpoint.data)} bytes",
            )
    for record in image.records:
        log = logs.get(record.run_id)
        if log is None:
            raise _bad(record.run_id, record.id, "a record of a run that is not in the image")
        if record.session_id != session_id:
            raise _bad(record.run_id, record.id, f"session_id is {record.session_id!r}")
        if record.id != str(len(log) + 1):
            raise _bad(record.run_id, record.id, f"record ids skip: want {len(log) + 1}")
        check_stored_record(record)
        log.append(record)
    return logs


def _check_run_log(run: RunMeta, log: list[Record], checkpoint: Checkpoint | None) -> None:
    """The run's status agrees with its records: the checks ``agentledger check`` makes."""
    agents = {record.agent_id for record in log}
    if agents - {run.agent_id}:
        raise _bad(run.run_id, "", f"records of another agent: {sorted(agents - {run.agent_id})}")
    keys = [record.event_key for record in log]
    if len(set(keys)) != len(keys):
        raise _bad(run.run_id, "", "two records share an event key")
    types = [record.type for record in log]
    problems = run_problems(
        run.run_id,
        run.status.value,
        len(log),
        run.session_id,
        run.parent_run_id,
        count=len(log),
        first=1 if log else 0,
        newest=len(log),
        started_first=int(bool(log) and log[0].type == payloads.RUN_STARTED),
        started=types.count(payloads.RUN_STARTED),
        completed=types.count(payloads.RUN_COMPLETED),
        suspended=types.count(payloads.RUN_SUSPENDED),
        has_checkpoint=int(checkpoint is not None),
        has_session=1,
        has_parent=1,
    )
    if problems:
        raise _bad(run.run_id, "", "; ".join(problems))
    check_listed(log, {run.run_id: run.status}, ends_log=True)
    started = decode_stored_payload(log[0], payloads.RunStarted)
    if started.parent_run_id != run.parent_run_id:
        raise _bad(run.run_id, "1", f"run_started names parent {started.parent_run_id!r}")


_SOURCE_STATUS = {"next_turn": RunStatus.COMPLETED, "continuation": RunStatus.SUSPENDED}
"""The status a reference's source must have (as at the start; both are final)."""


def _check_references(image: SessionImage, logs: dict[str, list[Record]]) -> None:
    """[V3] each history reference names an earlier run of the image, through one of its
    records, as the store checked when the run started: else replay could not follow it.

    Runs are imaged in start order, so the source of a reference (which existed
    when its run started) comes before it; this also rules out a cycle.
    """
    order = {run.run_id: i for i, run in enumerate(image.runs)}
    statuses = {run.run_id: run.status for run in image.runs}
    for run in image.runs:
        found = [r for r in logs[run.run_id] if r.type == payloads.TRANSCRIPT_REFERENCED]
        if len(found) > 1:
            raise _bad(run.run_id, found[1].id, "a second history reference")
        for record in found:
            reference = decode_reference(record)
            source, through = reference.run_id, int(reference.through)
            log = logs.get(source)
            wanted = _SOURCE_STATUS.get(reference.kind)
            if log is None or order[source] >= order[run.run_id]:
                problem = (
                    f"its history reference names run {source!r}, not an earlier run of "
                    "this session's image (a reference never leaves its session)"
                )
            elif through > len(log):
                problem = (
                    f"its history reference names record {through} of run {source!r}, "
                    f"whose log ends at {len(log)}"
                )
            elif wanted is not None and statuses[source] is not wanted:
                problem = (
                    f"its {reference.kind} history reference names run {source!r}, "
                    f"which is {statuses[source].value}, not {wanted.value}"
                )
            else:
                continue
            raise _bad(run.run_id, record.id, problem)


def _message_problem(message: SessionMessage, runs: dict[str, RunMeta], turns: set[str]) -> str:
    """What is wrong with one imaged message against the image's runs ("" if nothing)."""
    run = runs.get(message.run_id)
    if message.started and run is None:
        return "the message says its run started, but the run is not in the image"
    if not message.started and run is not None:
        return "the message says its run has not started, but the run is in the image"
    if run is not None and (run.parent_run_id or run.agent_id != message.agent_id):
        return f"its run is not a root run of agent {message.agent_id!r}"
    for field in ("after", "running_run_id"):
        named = getattr(message, field)
        if named and named not in turns:
            return f"its {field} names {named!r}, not a run or message of this session's image"
    if not is_user_message(message.message):
        return "its message is not the JSON of one user message"
    return ""


def _check_messages(image: SessionImage, session_id: str, limits: SizeLimits) -> None:
    """[Q1] The imaged messages, as the store kept them: in the session, at positions
    1..n in arrival order, each run id once, started exactly when their run is imaged."""
    runs = {run.run_id: run for run in image.runs}
    turns = set(runs) | {m.run_id for m in image.messages}
    seen: set[str] = set()
    for i, message in enumerate(image.messages):
        if not isinstance(message, SessionMessage):
            raise ValidationError(
                field=f"image.messages[{i}]", expected="a SessionMessage", got=message
            )
        for field in ("run_id", "turn_id", "agent_id"):
            require_id(f"image.messages[{i}].{field}", getattr(message, field))
        check_timestamp(f"image.messages[{i}].submitted_at", message.submitted_at)
        check_labels(f"image.messages[{i}].labels", message.labels)
        if len(message.message) > limits.max_payload_bytes:
            raise ValidationError(
                field=f"image.messages[{i}].message",
                expected=f"at most {limits.max_payload_bytes} bytes (max_payload_bytes)",
                got=f"{len(message.message)} bytes",
            )
        if message.run_id in seen:
            problem = "the message's run id is listed twice"
        elif message.session_id != session_id:
            problem = f"the message's session_id is {message.session_id!r}, not {session_id!r}"
        elif message.position != i + 1:
            problem = f"the message is at position {message.position}, not {i + 1}"
        else:
            problem = _message_problem(message, runs, turns)
        if problem:
            raise _bad(message.run_id, "", problem)
        seen.add(message.run_id)


def _link_keys(logs: dict[str, list[Record]]) -> dict[str, str]:
    """Each child's ``child_run_linked`` key on its parent's log."""
    links: dict[str, str] = {}
    for log in logs.values():
        for record in log:
            if record.type == payloads.CHILD_RUN_LINKED:
                link = decode_stored_payload(record, payloads.ChildRunLinked)
                links[link.child_run_id] = record.event_key
    return links


def plan_import_session(
    reader: StateReader, image: SessionImage, *, limits: SizeLimits = DEFAULT_LIMITS
) -> Plan[None]:
    """Write an ended session exactly as imaged: session, runs, checkpoints, records.

    Refused, changing nothing: a session that is not ended
    (:class:`SessionActiveError`); a session id this store holds
    (:class:`SessionConflictError`) or purged (:class:`SessionPurgedError`); a
    run id it holds (:class:`RunConflictError`) or purged; an image that
    contradicts itself (:class:`CorruptRecordError` naming the run and record,
    or :class:`ValidationError` naming the field), a history reference that
    leaves the image or names a record its source does not hold included, and a
    message at the wrong position, listed twice, or started without its run in
    the image; a message run id the store holds (:class:`RunConflictError`).
    """
    session_id = _check_session(image)
    logs = _check_runs(image, session_id, limits)
    _check_references(image, logs)
    _check_messages(image, session_id, limits)
    links = _link_keys(logs)
    rows: list[RunRow] = []
    for run in image.runs:
        checkpoint = image.checkpoints.get(run.run_id)
        _check_run_log(run, logs[run.run_id], checkpoint)
        link_key = links.get(run.run_id, "")
        if run.parent_run_id and not link_key:
            raise _bad(run.run_id, "", "no child_run_linked on its parent's log")
        rows.append(_run_row(run, logs[run.run_id], link_key, checkpoint))
    _check_against_store(reader, image, session_id)
    session = image.session
    row = SessionRow(
        id=session_id,
        status=session.status,
        created_at=check_timestamp("image.session.created_at", session.created_at),
        ended_at=check_timestamp("image.session.ended_at", session.ended_at),
        labels=dict(session.labels),
    )
    records = [normalize_record(r, r.id) for r in image.records]
    return Plan(None, session=row, runs=rows, records=records, messages=list(image.messages))
