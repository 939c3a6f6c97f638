"""Closing runs whose workflow is gone, and checking the lifecycle of closed ones [E2].

A run stays ``running`` in the store when its workflow died before writing
its final record (a crashed process, a terminal write that kept failing).
:func:`ensure_run_completion` gives such a run its one final record, built
only from stored facts and the engine's closing time, so calling it again
(from anywhere) writes nothing new and returns the same record. A run that
died inside a ``once`` tool call is not failed: it is suspended with that
call in doubt, for the host to decide (see :mod:`agentledger.runtime.doubt`).
"""

from __future__ import annotations

import msgspec

from agentledger.engine.base import Engine, WorkflowInfo, WorkflowStatus
from agentledger.errors import CorruptRecordError, TranscriptError, ValidationError
from agentledger.runtime.checkpoint import suspension
from agentledger.runtime.doubt import in_doubt_step
from agentledger.runtime.events import event_from_record
from agentledger.runtime.records import RecordSpec
from agentledger.runtime.stream import StreamSink
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.protocol import Store
from agentledger.storage.replay import build_messages_from_run_log, replay_run_log_events
from agentledger.storage.types import (
    Record,
    RepairOutcome,
    RepairResult,
    RunMeta,
    RunStart,
    RunStatus,
    SessionStatus,
    StartOutcome,
)
from agentledger.storage.validation import MAX_PAGE_LIMIT, decode_stored_payload
from agentledger.transcript import Message, ToolResultPart, ToolUsePart, validate_planner_transcript

__all__ = ["Completion", "check_lifecycle", "ensure_run_completion"]

LOST = "the run's workflow ended without writing a final record"


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    """What ``ensure_run_completion`` found or did."""

    run_id: str
    status: RunStatus
    """The run's status afterwards (``running`` if its workflow is still going)."""
    record: Record | None
    """The run's final record (``run_completed`` or ``run_suspended``), None while running."""
    repaired: bool = False
    """Whether this call closed the run."""
    delivered: bool = False
    """Whether the final event was sent to the stream."""


async def _records(store: Store, run_id: str) -> list[Record]:
    records: list[Record] = []
    cursor = ""
    while True:
        page = await store.list_run_records(run_id, cursor=cursor, limit=MAX_PAGE_LIMIT)
        records.extend(page.records)
        if not page.next_cursor:
            return records
        cursor = page.next_cursor


def _corrupt(run_id: str, record_id: str, reason: str) -> CorruptRecordError:
    return CorruptRecordError(run_id=run_id, record_id=record_id, reason=reason)


def _valid(run_id: str, messages: list[Message], *, pending: bool) -> list[Message]:
    """The run's transcript, valid [T5]; ``pending``: tool uses may still wait for results."""
    try:
        validate_planner_transcript(messages, allow_pending=pending)
    except TranscriptError as e:
        raise _corrupt(run_id, "", f"transcript: {e}") from e
    return messages


async def run_transcript(store: Store, run_id: str, records: list[Record]) -> list[Message]:
    """The transcript of a run whose ``records`` were read: replayed from them, or, when its
    history is a reference [V1]/[V2], from its whole chain (one more read)."""
    if any(r.type == payloads.TRANSCRIPT_REFERENCED for r in records):
        return await build_messages_from_run_log(store, run_id, full=True)
    return replay_run_log_events(records)


def check_lifecycle(
    meta: RunMeta, records: list[Record], transcript: list[Message] | None = None
) -> Record:
    """Check a closed run's stored lifecycle and return its final record.

    ``transcript`` is the run's replayed transcript when the caller has it
    (see :func:`run_transcript`); otherwise it is replayed from ``records``.

    Raises:
        CorruptRecordError: the records contradict the contract (first record,
            one final record at the end, cancellation provenance [C1]-[C3],
            a decodable and valid transcript).
    """
    run_id = meta.run_id
    if not records or records[0].type != payloads.RUN_STARTED:
        raise _corrupt(
            run_id, records[0].id if records else "", "the first record is not run_started"
        )
    decode_stored_payload(records[0], payloads.RunStarted)
    finals = [r for r in records if r.type in (payloads.RUN_COMPLETED, payloads.RUN_SUSPENDED)]
    if len(finals) != 1 or finals[0] is not records[-1]:
        raise _corrupt(run_id, records[-1].id, "a closed run needs one final record, at the end")
    final = finals[0]
    intents = [r for r in records if r.type == payloads.CANCELLATION_INTENT]
    if len(intents) > 1:
        raise _corrupt(run_id, intents[1].id, "more than one cancellation intent")
    intent = decode_stored_payload(intents[0], payloads.CancellationIntent) if intents else None
    if intent is not None and intent.reason != meta.cancellation_reason:
        raise _corrupt(run_id, intents[0].id, "the intent's reason differs from the run's")
    if final.type == payloads.RUN_SUSPENDED:
        decode_stored_payload(final, payloads.RunSuspended)
        if meta.status is not RunStatus.SUSPENDED:
            raise _corrupt(run_id, final.id, f"run_suspended but the run is {meta.status}")
    else:
        done = decode_stored_payload(final, payloads.RunCompleted)
        expected = {"success": RunStatus.COMPLETED, "failed": RunStatus.FAILED}.get(
            done.status, RunStatus.CANCELED
        )
        if meta.status is not expected:
            raise _corrupt(
                run_id, final.id, f"run_completed says {done.status}, run is {meta.status}"
            )
        if done.status == "canceled":
            _check_provenance(meta, records, final, done, intent is not None)
    if transcript is None:
        transcript = replay_run_log_events(records)
    _valid(run_id, transcript, pending=final.type == payloads.RUN_SUSPENDED)
    return final


def _check_provenance(
    meta: RunMeta, records: list[Record], final: Record, done: payloads.RunCompleted, intent: bool
) -> None:
    """The only three valid ways a run gets canceled [C1] [C2] [C3]."""
    reason = done.cancellation.reason if done.cancellation else ""
    if reason == payloads.SESSION_ENDED:
        ok = meta.start_outcome is StartOutcome.STOP and len(records) == 2 and not intent
    elif reason == payloads.ENGINE_CANCELED:
        ok = not intent and not meta.cancellation_reason
    else:
        ok = intent and reason == meta.cancellation_reason
    if not ok:
        raise _corrupt(meta.run_id, final.id, f"cancellation {reason!r} has no valid provenance")


def _dangling(messages: list[Message]) -> list[ToolUsePart]:
    """Tool uses of a trailing assistant group that no result answers yet."""
    uses: list[ToolUsePart] = []
    for message in reversed(messages):
        if message.role != "assistant":
            break
        uses[:0] = [p for p in message.parts if isinstance(p, ToolUsePart)]
    return uses


async def _repair(
    store: Store, meta: RunMeta, records: list[Record], info: WorkflowInfo | None
) -> RepairResult:
    if not records or records[0].type != payloads.RUN_STARTED:
        raise _corrupt(meta.run_id, "", "a running run without a run_started record")
    started = decode_stored_payload(records[0], payloads.RunStarted)
    run = RunStart.of(meta, predecessor_run_id=started.predecessor_run_id)
    builder = RecordBuilder(run, turn_id=records[0].turn_id)
    at = (
        info.closed_at if info is not None and info.closed_at is not None else records[-1].timestamp
    )
    canceled = bool(meta.cancellation_reason) or (info is not None and info.cancel_requested)
    text = (
        "interrupted: the run was canceled before this tool call finished"
        if canceled
        else f"interrupted: {LOST}"
    )
    transcript = await run_transcript(store, meta.run_id, records)
    dangling = _dangling(_valid(meta.run_id, transcript, pending=True))
    doubtful = await in_doubt_step(store, meta, records, dangling) if not canceled else None
    if doubtful is not None:  # a once call started without an outcome: ask, don't fail
        if doubtful.results:
            await store.append_run_records(
                [
                    builder.record(s.type, s.payload, event_key=s.event_key, at=at)
                    for s in doubtful.results
                ]
            )
        return await store.repair_run_suspension(
            suspension(run, records[0].turn_id, at, doubtful.checkpoint)
        )
    if dangling:
        results = tuple(
            ToolResultPart(tool_use_id=u.id, content=text, is_error=True) for u in dangling
        )
        specs = [RecordSpec.result("repair", u.id, u.name, text, True) for u in dangling]
        specs.append(
            RecordSpec.appended("repair:tool_results", Message(role="user", parts=results))
        )
        await store.append_run_records(
            [builder.record(s.type, s.payload, event_key=s.event_key, at=at) for s in specs]
        )
    if canceled:
        cmd = builder.terminal(RunStatus.CANCELED, at=at, reason=meta.cancellation_reason)
    else:
        kind = "workflow_lost" if info is None else "workflow_failed"
        details = {"engine_error": info.error} if info is not None and info.error else None
        failure = payloads.Failure(message=LOST, kind=kind, details=details)
        cmd = builder.terminal(RunStatus.FAILED, at=at, failure=failure)
    return await store.repair_run_terminal(cmd)


async def ensure_run_completion(
    store: Store, engine: Engine, stream: StreamSink | None, run_id: str
) -> Completion:
    """[E2] give a run whose workflow is gone its final record; redeliver a closed run's.

    Raises:
        ValidationError: the run's session is active and there is no stream.
        CorruptRecordError: stored data contradicts the contract.
    """
    meta = await store.load_run(run_id)
    if meta.session_id:
        active = await store.load_session_status(meta.session_id) is SessionStatus.ACTIVE
        if active and stream is None:
            raise ValidationError(
                field="stream",
                expected="a stream sink",
                got=None,
                message=(
                    f"ensure_run_completion({run_id!r}) needs a stream: session "
                    f"{meta.session_id!r} is active, so someone may still be waiting for "
                    "this run's final event, and it must be delivered. Build the runtime "
                    "with Runtime(store, stream=...) (e.g. a QueueSink, or the sink your UI "
                    "reads); once the session is over (store.end_session), no stream is needed "
                    "and the records are kept without delivery."
                ),
            )
        deliver = active
    else:
        deliver = stream is not None
    repaired = False
    if meta.status is RunStatus.RUNNING:
        info = await engine.describe(run_id)
        if info is not None and info.status is WorkflowStatus.RUNNING:
            return Completion(run_id=run_id, status=RunStatus.RUNNING, record=None)
        repair = await _repair(store, meta, await _records(store, run_id), info)
        record, repaired = repair.record, repair.outcome is RepairOutcome.STORED
        meta = await store.load_run(run_id)
    else:
        records = await _records(store, run_id)
        record = check_lifecycle(meta, records, await run_transcript(store, run_id, records))
    if deliver and stream is not None:
        event = event_from_record(record)
        if event is not None:
            await stream.send(event)
    return Completion(
        run_id=run_id, status=meta.status, record=record, repaired=repaired, delivered=deliver
    )
