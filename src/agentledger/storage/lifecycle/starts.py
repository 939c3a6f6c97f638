"""[L1]-[L4], [O1]/[O2], [K1]-[K3]: run starts and their exact retries."""

from __future__ import annotations

import msgspec

from agentledger.errors import (
    RecordConflictError,
    RunConflictError,
    RunNotActiveError,
    RunSessionMismatchError,
    SessionPurgedError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.lifecycle.appends import carry, check_records, retried_records
from agentledger.storage.lifecycle.checks import check_sizes
from agentledger.storage.lifecycle.guards import (
    check_completed_payload,
    check_owner,
    same_or_conflict,
)
from agentledger.storage.lifecycle.messages import claim_message
from agentledger.storage.lifecycle.reads import (
    require_run,
    require_session,
    run_session_status,
    stored_record,
)
from agentledger.storage.lifecycle.references import check_reference
from agentledger.storage.state import Plan, RunRow, StateReader
from agentledger.storage.types import (
    AppendResult,
    ChildRunStart,
    OneShotChildRunStart,
    OneShotRunStart,
    Record,
    RootRunStart,
    RunStart,
    RunStatus,
    SessionStatus,
    StartOutcome,
    StartResult,
)
from agentledger.storage.validation import (
    DEFAULT_LIMITS,
    SizeLimits,
    check_timestamp,
    decode_payload,
    decode_stored_payload,
    normalize_record,
    require_id,
    validate_record,
    validate_run_start,
)


def _check_started(record: Record, run: RunStart) -> None:
    validate_record(record, "started")
    check_owner(record, run.run_id, run.agent_id, run.session_id)
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
    check_owner(record, run.run_id, run.agent_id, run.session_id)
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
    check_completed_payload(
        payload, RunStatus.CANCELED, run.labels, payloads.SESSION_ENDED, "canceled"
    )


def _check_carried(records: object, run: RunStart) -> list[Record]:
    """The new run's ordinary records a start carries: checked as a batch [B1]."""
    carried = check_records(records, run.run_id, start=True)
    for record in carried:
        check_owner(record, run.run_id, run.agent_id, run.session_id)
    return carried


def _check_link(record: Record, run: RunStart, parent: RunRow) -> None:
    validate_record(record, "parent_linked")
    check_owner(record, parent.run_id, parent.agent_id, parent.session_id)
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


def _retried_carried(reader: StateReader, existing: RunRow, carried: list[Record]) -> list[Record]:
    """[L10] the stored records a start's retry carries: all its first write did, in order.

    Each is repeated exactly (:func:`retried_records`), and together they are the
    records the first write stored after ``run_started`` (ids 2, 3 ...), none
    missing, none more, in the same order: a retry that carries fewer (even a
    leading part), more or reordered records is another start, a conflict.
    A record the start wrote once (repeated in the batch, or ``run_started``
    repeated) counts once.
    """
    stored = retried_records(RunConflictError, reader, existing, carried)
    seen = {existing.started_key}
    ids: list[int] = []
    for record in stored:
        if record.event_key not in seen:
            seen.add(record.event_key)
            ids.append(int(record.id))
    want = existing.start_records
    if ids != list(range(2, len(ids) + 2)) or (want >= 0 and len(ids) != want):
        count = "" if want < 0 else f"{want} "
        raise RunConflictError(
            run_id=existing.run_id,
            field="records",
            expected=f"the {count}records its first write carried, all, in the same order",
            got=f"records with ids {ids}",
        )
    return stored


def _retry_start(
    reader: StateReader,
    existing: RunRow,
    run: RunStart,
    started: Record,
    link: Record | None,
    stop: Record | None,
    carried: list[Record],
) -> Plan[StartResult]:
    """[X1]/[X4] an exact repeat of an accepted start returns the original decision."""
    for name in ("agent_id", "session_id", "parent_run_id", "started_at", "labels"):
        stored_value, given = getattr(existing, name), getattr(run, name)
        if stored_value != given:
            raise RunConflictError(
                run_id=run.run_id, field=f"run.{name}", expected=stored_value, got=given
            )
    stored_started = stored_record(reader, existing, existing.started_key, payloads.RUN_STARTED)
    stored_payload = decode_stored_payload(stored_started, payloads.RunStarted)
    if stored_payload.predecessor_run_id != run.predecessor_run_id:
        raise RunConflictError(
            run_id=run.run_id,
            field="run.predecessor_run_id",
            expected=stored_payload.predecessor_run_id,
            got=run.predecessor_run_id,
        )
    same_or_conflict(RunConflictError, run.run_id, "started", stored_started, started)
    status = run_session_status(reader, existing)
    parent_result = None
    if link is not None:
        parent = require_run(reader, existing.parent_run_id)
        stored_link = stored_record(reader, parent, existing.link_key, payloads.CHILD_RUN_LINKED)
        decode_stored_payload(stored_link, payloads.ChildRunLinked)
        same_or_conflict(RunConflictError, run.run_id, "parent_linked", stored_link, link)
        parent_result = AppendResult(id=stored_link.id, inserted=False, session_status=status)
    canceled_result = None
    if existing.start_outcome is StartOutcome.STOP:
        stored_stop = stored_record(reader, existing, existing.terminal_key, payloads.RUN_COMPLETED)
        decode_stored_payload(stored_stop, payloads.RunCompleted)
        if stop is not None:
            same_or_conflict(RunConflictError, run.run_id, "canceled", stored_stop, stop)
        canceled_result = AppendResult(id=stored_stop.id, inserted=False, session_status=status)
    carried_results: tuple[AppendResult, ...] = ()
    if existing.start_outcome is StartOutcome.PROCEED:
        stored = _retried_carried(reader, existing, carried)
        carried_results = tuple(
            AppendResult(id=r.id, inserted=False, session_status=status) for r in stored
        )
    return Plan(
        StartResult(
            outcome=existing.start_outcome,
            run_status=existing.status,
            started=AppendResult(id=stored_started.id, inserted=False, session_status=status),
            canceled=canceled_result,
            parent_record=parent_result,
            records=carried_results,
        )
    )


def _new_start(
    reader: StateReader,
    run: RunStart,
    started: Record,
    link: Record | None,
    parent: RunRow | None,
    stop: Record | None,
    carried: list[Record],
) -> Plan[StartResult]:
    """Write a first start: link, ``run_started``, then its records or, if the session
    ended, [C2]."""
    predecessor = _check_predecessor(reader, run)
    check_reference(reader, run, carried)
    session_status = run_session_status(reader, run)
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
    first = normalize_record(started, "1")
    records.append(first)
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
        start_records=0,
    )
    carried_results: list[AppendResult] = []
    if not canceled_result and carried:
        row, carried_results, written = carry(
            reader, row, carried, session_status, taken=[first], new_run=True
        )
        row = msgspec.structs.replace(row, start_records=len(written))
        records.extend(written)
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
            records=tuple(carried_results),
        ),
        runs=rows,
        records=records,
    )
    return plan


def _guard_new_run_id(reader: StateReader, run_id: str) -> None:
    purged = reader.purged_run_session(run_id)
    if purged is not None:
        raise SessionPurgedError(session_id=purged, run_id=run_id)


def plan_root_start(
    reader: StateReader, cmd: RootRunStart, *, limits: SizeLimits = DEFAULT_LIMITS
) -> Plan[StartResult]:
    """[L1]/[O1]/[C2]/[K1] start a root run in a session."""
    check_sizes(cmd, limits)
    run = cmd.run
    _check_root_shape(run, sessionful=True, child=False)
    _check_started(cmd.started, run)
    _check_stop(cmd.canceled, run, cmd.started)
    carried = _check_carried(cmd.records, run)
    _guard_new_run_id(reader, run.run_id)
    require_session(reader, run.session_id)
    existing = reader.run(run.run_id)
    if existing is not None:
        return _retry_start(reader, existing, run, cmd.started, None, cmd.canceled, carried)
    claimed = claim_message(reader, run, carried)  # a queued turn starts only in its turn
    plan = _new_start(reader, run, cmd.started, None, None, cmd.canceled, carried)
    if claimed is not None:
        plan.messages.append(claimed)
    return plan


def plan_child_start(
    reader: StateReader, cmd: ChildRunStart, *, limits: SizeLimits = DEFAULT_LIMITS
) -> Plan[StartResult]:
    """[L2]/[O2] link a child on its running parent's log and start it, together."""
    check_sizes(cmd, limits)
    run = cmd.run
    _check_root_shape(run, sessionful=True, child=True)
    _check_started(cmd.started, run)
    _check_stop(cmd.canceled, run, cmd.started)
    carried = _check_carried(cmd.records, run)
    _guard_new_run_id(reader, run.run_id)
    require_session(reader, run.session_id)
    parent = _require_parent(reader, run)
    _check_link(cmd.parent_linked, run, parent)
    existing = reader.run(run.run_id)
    if existing is not None:
        return _retry_start(
            reader, existing, run, cmd.started, cmd.parent_linked, cmd.canceled, carried
        )
    if parent.status is not RunStatus.RUNNING:
        raise RunNotActiveError(run_id=parent.run_id, expected="running", got=parent.status.value)
    return _new_start(reader, run, cmd.started, cmd.parent_linked, parent, cmd.canceled, carried)


def plan_one_shot_start(
    reader: StateReader, cmd: OneShotRunStart, *, limits: SizeLimits = DEFAULT_LIMITS
) -> Plan[StartResult]:
    """[L3] start a run that belongs to no session."""
    check_sizes(cmd, limits)
    run = cmd.run
    _check_root_shape(run, sessionful=False, child=False)
    _check_started(cmd.started, run)
    carried = _check_carried(cmd.records, run)
    _guard_new_run_id(reader, run.run_id)
    existing = reader.run(run.run_id)
    if existing is not None:
        return _retry_start(reader, existing, run, cmd.started, None, None, carried)
    return _new_start(reader, run, cmd.started, None, None, None, carried)


def plan_one_shot_child_start(
    reader: StateReader, cmd: OneShotChildRunStart, *, limits: SizeLimits = DEFAULT_LIMITS
) -> Plan[StartResult]:
    """[L4] link and start a sessionless child of a running sessionless parent."""
    check_sizes(cmd, limits)
    run = cmd.run
    _check_root_shape(run, sessionful=False, child=True)
    _check_started(cmd.started, run)
    carried = _check_carried(cmd.records, run)
    _guard_new_run_id(reader, run.run_id)
    parent = _require_parent(reader, run)
    _check_link(cmd.parent_linked, run, parent)
    existing = reader.run(run.run_id)
    if existing is not None:
        return _retry_start(reader, existing, run, cmd.started, cmd.parent_linked, None, carried)
    if parent.status is not RunStatus.RUNNING:
        raise RunNotActiveError(run_id=parent.run_id, expected="running", got=parent.status.value)
    return _new_start(reader, run, cmd.started, cmd.parent_linked, parent, None, carried)
