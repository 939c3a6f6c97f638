"""Every store decision, written once: what a command writes, returns or refuses.

Each ``plan_*`` function reads through a :class:`StateReader` (the backend's
open transaction), checks the command against the contract of DESIGN.md
section 3, and returns a :class:`Plan`. It never writes: the backend applies
the plan in the same transaction, so a refused command changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import NoReturn

import msgspec

from agentledger.errors import (
    CorruptRecordError,
    RecordConflictError,
    RecordOwnerMismatchError,
    RunCancellationConflictError,
    RunConflictError,
    RunNotActiveError,
    RunNotFoundError,
    RunSessionMismatchError,
    RunSuspensionConflictError,
    RunTerminalConflictError,
    SessionActiveError,
    SessionConflictError,
    SessionEndedError,
    SessionHasActiveRunsError,
    SessionNotFoundError,
    SessionPurgedError,
    SuspensionNotFoundError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.state import Plan, RunRow, SessionRow, StateReader
from agentledger.storage.types import (
    AppendResult,
    Checkpoint,
    ChildRunStart,
    OneShotChildRunStart,
    OneShotRunStart,
    Record,
    RepairOutcome,
    RepairResult,
    RootRunStart,
    RunCancellation,
    RunMeta,
    RunStart,
    RunStatus,
    RunSuspension,
    RunTerminal,
    Session,
    SessionStatus,
    StartOutcome,
    StartResult,
)
from agentledger.storage.validation import (
    MAX_CHECKPOINT_BYTES,
    check_labels,
    check_stored_record,
    check_timestamp,
    decode_payload,
    decode_stored_payload,
    normalize_record,
    record_difference,
    require_id,
    validate_record,
    validate_run_start,
)

__all__ = [
    "check_batch",
    "check_listed",
    "completed_runs",
    "load_run",
    "load_run_suspension",
    "load_session",
    "load_session_status",
    "plan_append",
    "plan_append_batch",
    "plan_cancellation",
    "plan_child_start",
    "plan_create_session",
    "plan_end_session",
    "plan_one_shot_child_start",
    "plan_one_shot_start",
    "plan_purge_session",
    "plan_repair_suspension",
    "plan_repair_terminal",
    "plan_root_start",
    "plan_suspension",
    "plan_terminal",
    "require_run",
    "require_session",
]

_TERMINAL_STATUSES = {
    RunStatus.COMPLETED: ("success", "completed"),
    RunStatus.FAILED: ("failed", "failed"),
    RunStatus.CANCELED: ("canceled", "canceled"),
}
_RESERVED_REASONS = frozenset({payloads.SESSION_ENDED, payloads.ENGINE_CANCELED})


# --------------------------------------------------------------------------- reads


def require_session(reader: StateReader, session_id: str) -> SessionRow:
    """The stored session, or the error that says why there is none."""
    require_id("session_id", session_id)
    session = reader.session(session_id)
    if session is not None:
        return session
    if reader.session_purged(session_id):
        raise SessionPurgedError(session_id=session_id)
    raise SessionNotFoundError(session_id=session_id)


def require_run(reader: StateReader, run_id: str, field: str = "run_id") -> RunRow:
    """The stored run, or RunNotFoundError / SessionPurgedError."""
    require_id(field, run_id)
    run = reader.run(run_id)
    if run is not None:
        return run
    purged = reader.purged_run_session(run_id)
    if purged is not None:
        raise SessionPurgedError(session_id=purged, run_id=run_id)
    raise RunNotFoundError(run_id=run_id)


def load_session(reader: StateReader, session_id: str) -> Session:
    """``SessionAdmin.load_session``."""
    return require_session(reader, session_id).public()


def load_session_status(reader: StateReader, session_id: str) -> SessionStatus:
    """``Store.load_session_status``."""
    return require_session(reader, session_id).status


def load_run(reader: StateReader, run_id: str) -> RunMeta:
    """``Store.load_run``."""
    return require_run(reader, run_id).meta()


def load_run_suspension(reader: StateReader, run_id: str) -> Checkpoint:
    """``Store.load_run_suspension``: the checkpoint of a suspended run."""
    run = require_run(reader, run_id)
    if run.checkpoint is None:
        raise SuspensionNotFoundError(run_id=run_id)
    return run.checkpoint


def _session_status(reader: StateReader, run: RunRow | RunStart) -> SessionStatus | None:
    if not run.session_id:
        return None
    session = reader.session(run.session_id)
    if session is None:  # a run never outlives its session: purge removes both
        raise CorruptRecordError(
            run_id=run.run_id, record_id="", reason=f"session {run.session_id!r} is missing"
        )
    return session.status


def _stored(reader: StateReader, run: RunRow, key: str, what: str) -> Record:
    """A lifecycle record the run row points at; its absence is corruption."""
    record = reader.record(run.run_id, key)
    if record is None:
        raise CorruptRecordError(
            run_id=run.run_id, record_id="", reason=f"{what} record {key!r} is missing"
        )
    return record


# ----------------------------------------------------------------------- listings

_LIFECYCLE_PAYLOADS: dict[
    str,
    type[payloads.RunStarted]
    | type[payloads.RunCompleted]
    | type[payloads.RunSuspended]
    | type[payloads.ChildRunLinked]
    | type[payloads.CancellationIntent],
] = {
    payloads.RUN_STARTED: payloads.RunStarted,
    payloads.RUN_COMPLETED: payloads.RunCompleted,
    payloads.RUN_SUSPENDED: payloads.RunSuspended,
    payloads.CHILD_RUN_LINKED: payloads.ChildRunLinked,
    payloads.CANCELLATION_INTENT: payloads.CancellationIntent,
}


def completed_runs(records: Sequence[Record]) -> set[str]:
    """The runs whose ``run_completed`` is among ``records``: :func:`check_listed` needs
    their statuses."""
    return {record.run_id for record in records if record.type == payloads.RUN_COMPLETED}


def check_listed(
    records: Sequence[Record],
    statuses: Mapping[str, RunStatus | None],
    *,
    ends_log: bool = False,
) -> None:
    """[J1] a listed page's lifecycle records decode strictly and fit their runs.

    Ordinary records are checked by their checksum; only the few lifecycle
    records are decoded here. ``statuses`` holds the status of each run of
    :func:`completed_runs` (None: purged since), which its ``run_completed``
    must agree with. ``ends_log``: the page (of one run) reaches the run's
    newest record, which for an ended run must be its ``run_completed``.

    Raises:
        CorruptRecordError: naming the run, the record and what is wrong.
    """
    for record in records:
        cls = _LIFECYCLE_PAYLOADS.get(record.type)
        if cls is None:
            continue
        payload = decode_stored_payload(record, cls)
        if isinstance(payload, payloads.RunCompleted):
            status = statuses.get(record.run_id)
            if status is None:  # purged since the page was read
                continue
            if _TERMINAL_STATUSES.get(status) != (payload.status, payload.phase):
                raise CorruptRecordError(
                    run_id=record.run_id,
                    record_id=record.id,
                    reason=(
                        f"contradicts its run ({status.value}): run_completed says "
                        f"status {payload.status!r}, phase {payload.phase!r}"
                    ),
                )
    if not (ends_log and records):
        return
    last = records[-1]
    status = statuses.get(last.run_id)
    if status in _TERMINAL_STATUSES and last.type != payloads.RUN_COMPLETED:
        raise CorruptRecordError(
            run_id=last.run_id,
            record_id=last.id,
            reason=(
                f"the run is {status.value} but its log ends with this {last.type!r} "
                "record, not its run_completed"
            ),
        )


# ----------------------------------------------------------------------- sessions


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


def plan_purge_session(reader: StateReader, session_id: str) -> Plan[None]:
    """[D3] delete an ended session with no running run, leaving a tombstone."""
    require_id("session_id", session_id)
    if reader.session_purged(session_id):
        return Plan(None)
    session = require_session(reader, session_id)
    if session.status is not SessionStatus.ENDED:
        raise SessionActiveError(session_id=session_id)
    running = reader.running_run_ids(session_id)
    if running:
        raise SessionHasActiveRunsError(session_id=session_id, run_ids=running)
    return Plan(None, purge_session=session_id)


# ------------------------------------------------------------------------- starts


def _check_owner(record: Record, run_id: str, agent_id: str, session_id: str) -> None:
    for field, expected, got in (
        ("run_id", run_id, record.run_id),
        ("agent_id", agent_id, record.agent_id),
        ("session_id", session_id, record.session_id),
    ):
        if expected != got:
            raise RecordOwnerMismatchError(run_id=run_id, field=field, expected=expected, got=got)


def _check_started(record: Record, run: RunStart) -> None:
    validate_record(record, "started")
    _check_owner(record, run.run_id, run.agent_id, run.session_id)
    if record.timestamp != run.started_at:
        raise ValidationError(
            field="started.timestamp",
            expected=f"run.started_at ({run.started_at})",
            got=record.timestamp,
        )
    payload = decode_payload(record, payloads.RunStarted, "started")
    for name in ("parent_run_id", "predecessor_run_id", "labels"):
        if getattr(payload, name) != getattr(run, name):
            raise ValidationError(
                field=f"started.payload.{name}",
                expected=repr(getattr(run, name)),
                got=getattr(payload, name),
            )


def _check_stop(record: Record, run: RunStart, started: Record) -> None:
    """The candidate ``run_completed`` of a start that finds its session ended [C2]."""
    validate_record(record, "canceled")
    _check_owner(record, run.run_id, run.agent_id, run.session_id)
    if record.event_key == started.event_key:
        raise ValidationError(
            field="canceled.event_key",
            expected="a key other than started's",
            got=record.event_key,
        )
    if record.timestamp != run.started_at:
        raise ValidationError(
            field="canceled.timestamp",
            expected=f"run.started_at ({run.started_at})",
            got=record.timestamp,
        )
    payload = decode_payload(record, payloads.RunCompleted, "canceled")
    _check_completed_payload(
        payload, RunStatus.CANCELED, run.labels, payloads.SESSION_ENDED, "canceled"
    )


def _check_link(record: Record, run: RunStart, parent: RunRow) -> None:
    validate_record(record, "parent_linked")
    _check_owner(record, parent.run_id, parent.agent_id, parent.session_id)
    payload = decode_payload(record, payloads.ChildRunLinked, "parent_linked")
    for name, expected in (("child_run_id", run.run_id), ("child_agent_id", run.agent_id)):
        if getattr(payload, name) != expected:
            raise ValidationError(
                field=f"parent_linked.payload.{name}",
                expected=repr(expected),
                got=getattr(payload, name),
            )
    require_id("parent_linked.payload.tool_name", payload.tool_name)
    require_id("parent_linked.payload.tool_call_id", payload.tool_call_id)


def _check_root_shape(run: RunStart, sessionful: bool, child: bool) -> None:
    validate_run_start(run)
    if sessionful:
        require_id("run.session_id", run.session_id)
    elif run.session_id:
        raise ValidationError(field="run.session_id", expected='"" (one-shot)', got=run.session_id)
    if child:
        require_id("run.parent_run_id", run.parent_run_id)
    elif run.parent_run_id:
        raise ValidationError(
            field="run.parent_run_id", expected='"" (not a child start)', got=run.parent_run_id
        )


def _check_predecessor(reader: StateReader, run: RunStart) -> RunRow | None:
    """[K1]/[K3] a continuation needs a suspended predecessor with no other successor."""
    if not run.predecessor_run_id:
        return None
    pred = require_run(reader, run.predecessor_run_id, "run.predecessor_run_id")
    if pred.session_id != run.session_id:
        raise RunSessionMismatchError(
            run_id=pred.run_id, expected=run.session_id, got=pred.session_id
        )
    for name in ("agent_id", "parent_run_id"):
        if name == "parent_run_id" and _continues(reader, pred.parent_run_id, run.parent_run_id):
            continue  # the parent suspended with its child; its continuation resumes it
        if getattr(pred, name) != getattr(run, name):
            raise RunConflictError(
                run_id=run.run_id,
                field=f"predecessor.{name}",
                expected=getattr(pred, name),
                got=getattr(run, name),
            )
    if pred.status is not RunStatus.SUSPENDED:
        raise RunNotActiveError(run_id=pred.run_id, expected="suspended", got=pred.status.value)
    if pred.successor_run_id and pred.successor_run_id != run.run_id:
        raise RunConflictError(
            run_id=pred.run_id,
            field="successor_run_id",
            expected=pred.successor_run_id,
            got=run.run_id,
        )
    return pred


def _continues(reader: StateReader, run_id: str, later: str) -> bool:
    """Whether ``later`` is ``run_id`` or a continuation of it, through successors [K3].

    A child that suspended suspended its parent; its own continuation then
    runs under the parent's continuation, which counts as the same parent [K1].
    """
    seen: set[str] = set()
    while run_id and later and run_id not in seen:
        if run_id == later:
            return True
        seen.add(run_id)
        row = reader.run(run_id)
        run_id = row.successor_run_id if row is not None else ""
    return False


def _require_parent(reader: StateReader, run: RunStart) -> RunRow:
    parent = require_run(reader, run.parent_run_id, "run.parent_run_id")
    if parent.session_id != run.session_id:
        raise RunSessionMismatchError(
            run_id=parent.run_id, expected=run.session_id, got=parent.session_id
        )
    return parent


def _retry_start(
    reader: StateReader,
    existing: RunRow,
    run: RunStart,
    started: Record,
    link: Record | None,
    stop: Record | None,
) -> Plan[StartResult]:
    """[X1]/[X4] an exact repeat of an accepted start returns the original decision."""
    for name in ("agent_id", "session_id", "parent_run_id", "started_at", "labels"):
        stored_value, given = getattr(existing, name), getattr(run, name)
        if stored_value != given:
            raise RunConflictError(
                run_id=run.run_id, field=f"run.{name}", expected=stored_value, got=given
            )
    stored_started = _stored(reader, existing, existing.started_key, payloads.RUN_STARTED)
    stored_payload = decode_stored_payload(stored_started, payloads.RunStarted)
    if stored_payload.predecessor_run_id != run.predecessor_run_id:
        raise RunConflictError(
            run_id=run.run_id,
            field="run.predecessor_run_id",
            expected=stored_payload.predecessor_run_id,
            got=run.predecessor_run_id,
        )
    _same_or_conflict(RunConflictError, run.run_id, "started", stored_started, started)
    status = _session_status(reader, existing)
    parent_result = None
    if link is not None:
        parent = require_run(reader, existing.parent_run_id)
        stored_link = _stored(reader, parent, existing.link_key, payloads.CHILD_RUN_LINKED)
        decode_stored_payload(stored_link, payloads.ChildRunLinked)
        _same_or_conflict(RunConflictError, run.run_id, "parent_linked", stored_link, link)
        parent_result = AppendResult(id=stored_link.id, inserted=False, session_status=status)
    canceled_result = None
    if existing.start_outcome is StartOutcome.STOP:
        stored_stop = _stored(reader, existing, existing.terminal_key, payloads.RUN_COMPLETED)
        decode_stored_payload(stored_stop, payloads.RunCompleted)
        if stop is not None:
            _same_or_conflict(RunConflictError, run.run_id, "canceled", stored_stop, stop)
        canceled_result = AppendResult(id=stored_stop.id, inserted=False, session_status=status)
    return Plan(
        StartResult(
            outcome=existing.start_outcome,
            run_status=existing.status,
            started=AppendResult(id=stored_started.id, inserted=False, session_status=status),
            canceled=canceled_result,
            parent_record=parent_result,
        )
    )


def _same_or_conflict(
    error: type[RunConflictError]
    | type[RunCancellationConflictError]
    | type[RunSuspensionConflictError]
    | type[RunTerminalConflictError]
    | type[RecordConflictError],
    run_id: str,
    what: str,
    stored: Record,
    given: Record,
) -> None:
    differs = record_difference(stored, given)
    if differs:
        check_stored_record(stored)  # damage is corruption; only a sound record conflicts
        raise error(
            run_id=run_id,
            field=f"{what}.{differs}",
            expected=getattr(stored, differs),
            got=getattr(given, differs),
        )


def _new_start(
    reader: StateReader,
    run: RunStart,
    started: Record,
    link: Record | None,
    parent: RunRow | None,
    stop: Record | None,
) -> Plan[StartResult]:
    """Write a first start: link, ``run_started`` and, if the session ended, [C2]."""
    predecessor = _check_predecessor(reader, run)
    session_status = _session_status(reader, run)
    plan: Plan[StartResult]
    records: list[Record] = []
    rows: list[RunRow] = []
    parent_result = None
    link_key = ""
    if link is not None and parent is not None:
        if reader.record(parent.run_id, link.event_key) is not None:
            raise RecordConflictError(
                run_id=parent.run_id,
                field="parent_linked.event_key",
                expected="a key not yet used on the parent",
                got=link.event_key,
            )
        link_id = str(parent.last_seq + 1)
        records.append(normalize_record(link, link_id))
        rows.append(msgspec.structs.replace(parent, last_seq=parent.last_seq + 1))
        parent_result = AppendResult(id=link_id, inserted=True, session_status=session_status)
        link_key = link.event_key
    ended = session_status is SessionStatus.ENDED
    started_at = check_timestamp("run.started_at", run.started_at)
    records.append(normalize_record(started, "1"))
    canceled_result = None
    if ended and stop is not None:
        records.append(normalize_record(stop, "2"))
        canceled_result = AppendResult(id="2", inserted=True, session_status=session_status)
    row = RunRow(
        run_id=run.run_id,
        agent_id=run.agent_id,
        session_id=run.session_id,
        parent_run_id=run.parent_run_id,
        status=RunStatus.CANCELED if canceled_result else RunStatus.RUNNING,
        start_outcome=StartOutcome.STOP if canceled_result else StartOutcome.PROCEED,
        started_at=started_at,
        updated_at=started_at,
        labels=dict(run.labels),
        cancellation_reason=payloads.SESSION_ENDED if canceled_result else "",
        started_key=started.event_key,
        link_key=link_key,
        terminal_key=stop.event_key if canceled_result and stop else "",
        last_seq=2 if canceled_result else 1,
    )
    rows.append(row)
    if predecessor is not None:
        rows.append(
            msgspec.structs.replace(predecessor, successor_run_id=run.run_id, updated_at=started_at)
        )
    plan = Plan(
        StartResult(
            outcome=row.start_outcome,
            run_status=row.status,
            started=AppendResult(id="1", inserted=True, session_status=session_status),
            canceled=canceled_result,
            parent_record=parent_result,
        ),
        runs=rows,
        records=records,
    )
    return plan


def _guard_new_run_id(reader: StateReader, run_id: str) -> None:
    purged = reader.purged_run_session(run_id)
    if purged is not None:
        raise SessionPurgedError(session_id=purged, run_id=run_id)


def plan_root_start(reader: StateReader, cmd: RootRunStart) -> Plan[StartResult]:
    """[L1]/[O1]/[C2]/[K1] start a root run in a session."""
    run = cmd.run
    _check_root_shape(run, sessionful=True, child=False)
    _check_started(cmd.started, run)
    _check_stop(cmd.canceled, run, cmd.started)
    _guard_new_run_id(reader, run.run_id)
    require_session(reader, run.session_id)
    existing = reader.run(run.run_id)
    if existing is not None:
        return _retry_start(reader, existing, run, cmd.started, None, cmd.canceled)
    return _new_start(reader, run, cmd.started, None, None, cmd.canceled)


def plan_child_start(reader: StateReader, cmd: ChildRunStart) -> Plan[StartResult]:
    """[L2]/[O2] link a child on its running parent's log and start it, together."""
    run = cmd.run
    _check_root_shape(run, sessionful=True, child=True)
    _check_started(cmd.started, run)
    _check_stop(cmd.canceled, run, cmd.started)
    _guard_new_run_id(reader, run.run_id)
    require_session(reader, run.session_id)
    parent = _require_parent(reader, run)
    _check_link(cmd.parent_linked, run, parent)
    existing = reader.run(run.run_id)
    if existing is not None:
        return _retry_start(reader, existing, run, cmd.started, cmd.parent_linked, cmd.canceled)
    if parent.status is not RunStatus.RUNNING:
        raise RunNotActiveError(run_id=parent.run_id, expected="running", got=parent.status.value)
    return _new_start(reader, run, cmd.started, cmd.parent_linked, parent, cmd.canceled)


def plan_one_shot_start(reader: StateReader, cmd: OneShotRunStart) -> Plan[StartResult]:
    """[L3] start a run that belongs to no session."""
    run = cmd.run
    _check_root_shape(run, sessionful=False, child=False)
    _check_started(cmd.started, run)
    _guard_new_run_id(reader, run.run_id)
    existing = reader.run(run.run_id)
    if existing is not None:
        return _retry_start(reader, existing, run, cmd.started, None, None)
    return _new_start(reader, run, cmd.started, None, None, None)


def plan_one_shot_child_start(reader: StateReader, cmd: OneShotChildRunStart) -> Plan[StartResult]:
    """[L4] link and start a sessionless child of a running sessionless parent."""
    run = cmd.run
    _check_root_shape(run, sessionful=False, child=True)
    _check_started(cmd.started, run)
    _guard_new_run_id(reader, run.run_id)
    parent = _require_parent(reader, run)
    _check_link(cmd.parent_linked, run, parent)
    existing = reader.run(run.run_id)
    if existing is not None:
        return _retry_start(reader, existing, run, cmd.started, cmd.parent_linked, None)
    if parent.status is not RunStatus.RUNNING:
        raise RunNotActiveError(run_id=parent.run_id, expected="running", got=parent.status.value)
    return _new_start(reader, run, cmd.started, cmd.parent_linked, parent, None)


# ------------------------------------------------------------------------ records


def _append_to(run: RunRow, record: Record, **changes: object) -> tuple[RunRow, Record]:
    seq = run.last_seq + 1
    return (
        msgspec.structs.replace(run, last_seq=seq, **changes),
        normalize_record(record, str(seq)),
    )


def _require_fresh_key(reader: StateReader, run: RunRow, record: Record) -> None:
    if reader.record(run.run_id, record.event_key) is not None:
        raise RecordConflictError(
            run_id=run.run_id,
            field="event_key",
            expected="a key not yet used on this run",
            got=record.event_key,
        )


def _require_running(run: RunRow) -> None:
    if run.status is not RunStatus.RUNNING:
        raise RunNotActiveError(run_id=run.run_id, expected="running", got=run.status.value)


def _owned_run(reader: StateReader, run_id: str, record: Record) -> RunRow:
    """The run a lifecycle record belongs to, checking the record names it [L8]."""
    require_id("run_id", run_id)
    if record.run_id != run_id:
        raise RecordOwnerMismatchError(
            run_id=run_id, field="run_id", expected=run_id, got=record.run_id
        )
    run = require_run(reader, run_id)
    _check_owner(record, run.run_id, run.agent_id, run.session_id)
    return run


def _check_ordinary(record: Record, field: str) -> None:
    validate_record(record, field)
    if record.type in payloads.LIFECYCLE_TYPES:
        raise ValidationError(
            field=f"{field}.type",
            expected="an ordinary (non-lifecycle) record type",
            got=record.type,
        )


def plan_append(reader: StateReader, record: Record) -> Plan[AppendResult]:
    """[L8]/[X1] append an ordinary record; an exact repeat returns its original id."""
    _check_ordinary(record, "record")
    run = _owned_run(reader, record.run_id, record)
    status = _session_status(reader, run)
    stored = reader.record(run.run_id, record.event_key)
    if stored is not None:
        _same_or_conflict(RecordConflictError, run.run_id, "record", stored, record)
        return Plan(AppendResult(id=stored.id, inserted=False, session_status=status))
    _require_running(run)
    row, new = _append_to(run, record)
    return Plan(
        AppendResult(id=new.id, inserted=True, session_status=status), runs=[row], records=[new]
    )


def check_batch(records: object) -> list[Record]:
    """[B1] a non-empty sequence of ordinary records of one run, each valid as given.

    The first check of :func:`plan_append_batch`; a remote client (``StoreClient``)
    runs it before sending, so what the wire cannot carry is refused as the store would.
    """
    if not isinstance(records, Sequence) or isinstance(records, str | bytes):
        raise ValidationError(
            field="records", expected="a sequence of Records", got=type(records).__name__
        )
    if not records:
        raise ValidationError(field="records", expected="at least one record", got=0)
    batch = list(records)
    for i, record in enumerate(batch):
        _check_ordinary(record, f"records[{i}]")
        if record.run_id != batch[0].run_id:
            raise ValidationError(
                field=f"records[{i}].run_id",
                expected=f"{batch[0].run_id!r} (one run per batch)",
                got=record.run_id,
            )
    return batch


def plan_append_batch(reader: StateReader, records: Sequence[Record]) -> Plan[list[AppendResult]]:
    """[B1] append ordinary records of one run, in order, all or none.

    Each record is inserted or is an exact retry [X1] (of a stored record, or of
    an earlier record of the same batch); the first refusal is raised and
    nothing is written.
    """
    batch = check_batch(records)
    run = _owned_run(reader, batch[0].run_id, batch[0])
    for record in batch[1:]:
        _check_owner(record, run.run_id, run.agent_id, run.session_id)
    status = _session_status(reader, run)
    results: list[AppendResult] = []
    written: list[Record] = []
    fresh: dict[str, Record] = {}  # event key -> record this batch inserts
    for record in batch:
        stored = fresh.get(record.event_key) or reader.record(run.run_id, record.event_key)
        if stored is not None:
            _same_or_conflict(RecordConflictError, run.run_id, "record", stored, record)
            results.append(AppendResult(id=stored.id, inserted=False, session_status=status))
            continue
        _require_running(run)
        run, new = _append_to(run, record)
        fresh[record.event_key] = new
        written.append(new)
        results.append(AppendResult(id=new.id, inserted=True, session_status=status))
    if not written:
        return Plan(results)
    return Plan(results, runs=[run], records=written)


def plan_cancellation(reader: StateReader, cmd: RunCancellation) -> Plan[AppendResult]:
    """[L5]/[C1] the first cancellation reason and its intent record, together."""
    reason = require_id("reason", cmd.reason)
    if reason in _RESERVED_REASONS:
        raise ValidationError(
            field="reason",
            expected=f"a reason other than the reserved {sorted(_RESERVED_REASONS)}",
            got=reason,
        )
    validate_record(cmd.record)
    payload = decode_payload(cmd.record, payloads.CancellationIntent, "record")
    if payload.reason != reason:
        raise ValidationError(
            field="record.payload.reason", expected=repr(reason), got=payload.reason
        )
    run = _owned_run(reader, cmd.run_id, cmd.record)
    status = _session_status(reader, run)
    if run.cancel_key:
        if run.cancellation_reason != reason:
            raise RunCancellationConflictError(
                run_id=run.run_id,
                field="cancellation_reason",
                expected=run.cancellation_reason,
                got=reason,
            )
        if cmd.record.event_key != run.cancel_key:
            raise RunCancellationConflictError(
                run_id=run.run_id,
                field="record.event_key",
                expected=run.cancel_key,
                got=cmd.record.event_key,
            )
        stored = _stored(reader, run, run.cancel_key, payloads.CANCELLATION_INTENT)
        decode_stored_payload(stored, payloads.CancellationIntent)
        _same_or_conflict(RunCancellationConflictError, run.run_id, "record", stored, cmd.record)
        return Plan(AppendResult(id=stored.id, inserted=False, session_status=status))
    _require_running(run)
    _require_fresh_key(reader, run, cmd.record)
    row, new = _append_to(
        run,
        cmd.record,
        cancellation_reason=reason,
        cancel_key=cmd.record.event_key,
        updated_at=check_timestamp("record.timestamp", cmd.record.timestamp),
    )
    return Plan(
        AppendResult(id=new.id, inserted=True, session_status=status), runs=[row], records=[new]
    )


def _check_suspension(reader: StateReader, cmd: RunSuspension) -> RunRow:
    if not isinstance(cmd.checkpoint, Checkpoint):
        raise ValidationError(field="checkpoint", expected="a Checkpoint", got=cmd.checkpoint)
    require_id("checkpoint.id", cmd.checkpoint.id)
    if not isinstance(cmd.checkpoint.data, bytes):
        raise ValidationError(field="checkpoint.data", expected="bytes", got=cmd.checkpoint.data)
    if len(cmd.checkpoint.data) > MAX_CHECKPOINT_BYTES:
        raise ValidationError(
            field="checkpoint.data",
            expected=f"at most {MAX_CHECKPOINT_BYTES} bytes",
            got=f"{len(cmd.checkpoint.data)} bytes",
        )
    validate_record(cmd.record)
    payload = decode_payload(cmd.record, payloads.RunSuspended, "record")
    if payload.suspension_id != cmd.checkpoint.id:
        raise ValidationError(
            field="record.payload.suspension_id",
            expected=repr(cmd.checkpoint.id),
            got=payload.suspension_id,
        )
    if payload.pending_count < 0:
        raise ValidationError(
            field="record.payload.pending_count", expected=">= 0", got=payload.pending_count
        )
    return _owned_run(reader, cmd.run_id, cmd.record)


def _suspension_retry(reader: StateReader, run: RunRow, cmd: RunSuspension) -> Record:
    """The stored suspension record if ``cmd`` repeats it exactly, else a conflict."""
    if cmd.record.event_key != run.suspension_key:
        raise RunSuspensionConflictError(
            run_id=run.run_id,
            field="record.event_key",
            expected=run.suspension_key,
            got=cmd.record.event_key,
        )
    stored = _stored(reader, run, run.suspension_key, payloads.RUN_SUSPENDED)
    decode_stored_payload(stored, payloads.RunSuspended)
    _same_or_conflict(RunSuspensionConflictError, run.run_id, "record", stored, cmd.record)
    if run.checkpoint != cmd.checkpoint:
        raise RunSuspensionConflictError(
            run_id=run.run_id, field="checkpoint", expected=run.checkpoint, got=cmd.checkpoint
        )
    return stored


def _suspend(run: RunRow, cmd: RunSuspension) -> tuple[RunRow, Record]:
    return _append_to(
        run,
        cmd.record,
        status=RunStatus.SUSPENDED,
        checkpoint=cmd.checkpoint,
        suspension_key=cmd.record.event_key,
        updated_at=check_timestamp("record.timestamp", cmd.record.timestamp),
    )


def plan_suspension(reader: StateReader, cmd: RunSuspension) -> Plan[AppendResult]:
    """[L6] checkpoint, ``suspended`` status and ``run_suspended`` record, together."""
    run = _check_suspension(reader, cmd)
    status = _session_status(reader, run)
    if run.suspension_key:
        stored = _suspension_retry(reader, run, cmd)
        return Plan(AppendResult(id=stored.id, inserted=False, session_status=status))
    _require_running(run)
    _require_fresh_key(reader, run, cmd.record)
    row, new = _suspend(run, cmd)
    return Plan(
        AppendResult(id=new.id, inserted=True, session_status=status), runs=[row], records=[new]
    )


def _check_completed_payload(
    payload: payloads.RunCompleted,
    status: RunStatus,
    labels: dict[str, str],
    reason: str,
    field: str,
) -> None:
    """A ``run_completed`` payload must agree with its status, labels and reason."""
    want_status, want_phase = _TERMINAL_STATUSES[status]
    if payload.status != want_status:
        raise ValidationError(
            field=f"{field}.payload.status", expected=repr(want_status), got=payload.status
        )
    if payload.phase != want_phase:
        raise ValidationError(
            field=f"{field}.payload.phase", expected=repr(want_phase), got=payload.phase
        )
    if payload.labels != labels:
        raise ValidationError(
            field=f"{field}.payload.labels", expected=repr(labels), got=payload.labels
        )
    if payload.failure is not None and status is not RunStatus.FAILED:
        raise ValidationError(
            field=f"{field}.payload.failure", expected="absent unless failed", got=payload.failure
        )
    if status is RunStatus.CANCELED:
        got = payload.cancellation.reason if payload.cancellation else None
        if got != reason:
            raise ValidationError(
                field=f"{field}.payload.cancellation.reason", expected=repr(reason), got=got
            )
    elif payload.cancellation is not None:
        raise ValidationError(
            field=f"{field}.payload.cancellation",
            expected="absent unless canceled",
            got=payload.cancellation,
        )


def _check_terminal(reader: StateReader, cmd: RunTerminal) -> RunRow:
    if cmd.status not in _TERMINAL_STATUSES:
        raise ValidationError(
            field="status", expected="completed, failed or canceled", got=cmd.status
        )
    validate_record(cmd.record)
    payload = decode_payload(cmd.record, payloads.RunCompleted, "record")
    run = _owned_run(reader, cmd.run_id, cmd.record)
    reason = run.cancellation_reason or payloads.ENGINE_CANCELED
    _check_completed_payload(payload, RunStatus(cmd.status), run.labels, reason, "record")
    return run


def _terminal_retry(reader: StateReader, run: RunRow, cmd: RunTerminal) -> Record | None:
    """The stored terminal record if ``cmd`` repeats it exactly; None if it differs."""
    if run.status != cmd.status or cmd.record.event_key != run.terminal_key:
        return None
    stored = _stored_terminal(reader, run)
    return None if record_difference(stored, cmd.record) else stored


def _stored_terminal(reader: StateReader, run: RunRow) -> Record:
    """The run's ``run_completed``, decoded strictly and checked against the run [J1].

    A stored record that contradicts its run (another status, labels or reason)
    is corruption, not a conflict: an operator should restore it, not retry.
    """
    stored = _stored(reader, run, run.terminal_key, payloads.RUN_COMPLETED)
    payload = decode_stored_payload(stored, payloads.RunCompleted)
    if run.status not in _TERMINAL_STATUSES:
        raise CorruptRecordError(
            run_id=run.run_id,
            record_id=stored.id,
            reason=f"a run_completed record on a run that is {run.status.value}",
        )
    reason = run.cancellation_reason or payloads.ENGINE_CANCELED
    try:
        _check_completed_payload(payload, run.status, run.labels, reason, "record")
    except ValidationError as e:
        raise CorruptRecordError(
            run_id=run.run_id,
            record_id=stored.id,
            reason=(
                f"contradicts its run ({run.status.value}): {e.field} should be "
                f"{e.expected}, found {e.got!r}"
            ),
        ) from e
    return stored


def _end(run: RunRow, cmd: RunTerminal) -> tuple[RunRow, Record]:
    return _append_to(
        run,
        cmd.record,
        status=RunStatus(cmd.status),
        terminal_key=cmd.record.event_key,
        updated_at=check_timestamp("record.timestamp", cmd.record.timestamp),
    )


def plan_terminal(reader: StateReader, cmd: RunTerminal) -> Plan[AppendResult]:
    """[L7] the final status and its ``run_completed`` record, together."""
    run = _check_terminal(reader, cmd)
    status = _session_status(reader, run)
    if run.terminal_key:
        stored = _terminal_retry(reader, run, cmd)
        if stored is None:
            _raise_terminal_conflict(reader, run, cmd)
        return Plan(AppendResult(id=stored.id, inserted=False, session_status=status))
    _require_running(run)
    _require_fresh_key(reader, run, cmd.record)
    row, new = _end(run, cmd)
    return Plan(
        AppendResult(id=new.id, inserted=True, session_status=status), runs=[row], records=[new]
    )


def _raise_terminal_conflict(reader: StateReader, run: RunRow, cmd: RunTerminal) -> NoReturn:
    if run.status != cmd.status:
        raise RunTerminalConflictError(
            run_id=run.run_id, field="status", expected=run.status.value, got=str(cmd.status)
        )
    if cmd.record.event_key != run.terminal_key:
        raise RunTerminalConflictError(
            run_id=run.run_id,
            field="record.event_key",
            expected=run.terminal_key,
            got=cmd.record.event_key,
        )
    stored = _stored_terminal(reader, run)
    differs = record_difference(stored, cmd.record) or "payload"
    raise RunTerminalConflictError(
        run_id=run.run_id,
        field=f"record.{differs}",
        expected=getattr(stored, differs),
        got=getattr(cmd.record, differs),
    )


def _standing_record(reader: StateReader, run: RunRow) -> Record:
    """The lifecycle record that ended a run: its terminal or its suspension."""
    if run.terminal_key:
        return _stored_terminal(reader, run)
    if run.suspension_key:
        record = _stored(reader, run, run.suspension_key, payloads.RUN_SUSPENDED)
        decode_stored_payload(record, payloads.RunSuspended)
        return record
    raise CorruptRecordError(
        run_id=run.run_id,
        record_id="",
        reason=f"run is {run.status.value} but has no terminal or suspension record",
    )


def plan_repair_terminal(reader: StateReader, cmd: RunTerminal) -> Plan[RepairResult]:
    """[E1] store a missing terminal only while running; never override another ending."""
    run = _check_terminal(reader, cmd)
    if run.status is RunStatus.RUNNING:
        _require_fresh_key(reader, run, cmd.record)
        row, new = _end(run, cmd)
        return Plan(
            RepairResult(outcome=RepairOutcome.STORED, status=row.status, record=new),
            runs=[row],
            records=[new],
        )
    if run.terminal_key:
        stored = _terminal_retry(reader, run, cmd)
        if stored is not None:
            return Plan(
                RepairResult(outcome=RepairOutcome.ALREADY_STORED, status=run.status, record=stored)
            )
    return Plan(
        RepairResult(
            outcome=RepairOutcome.DIFFERENT_TERMINAL,
            status=run.status,
            record=_standing_record(reader, run),
        )
    )


def plan_repair_suspension(reader: StateReader, cmd: RunSuspension) -> Plan[RepairResult]:
    """[E1] store a missing suspension only while running; never override another ending."""
    run = _check_suspension(reader, cmd)
    if run.status is RunStatus.RUNNING:
        _require_fresh_key(reader, run, cmd.record)
        row, new = _suspend(run, cmd)
        return Plan(
            RepairResult(outcome=RepairOutcome.STORED, status=row.status, record=new),
            runs=[row],
            records=[new],
        )
    if run.suspension_key:
        try:
            stored = _suspension_retry(reader, run, cmd)
        except RunSuspensionConflictError:
            pass
        else:
            return Plan(
                RepairResult(outcome=RepairOutcome.ALREADY_STORED, status=run.status, record=stored)
            )
    return Plan(
        RepairResult(
            outcome=RepairOutcome.DIFFERENT_TERMINAL,
            status=run.status,
            record=_standing_record(reader, run),
        )
    )
