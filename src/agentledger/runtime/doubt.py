"""Calls in doubt found by repair: a ``once`` call started, its process gone, no outcome.

A run whose process died inside a ``once`` tool stays ``running`` with a
``tool_call_started`` record and no result. :func:`in_doubt_step` reads the
run's last tool step from its records (and the results its parallel calls
saved privately) and says how to suspend it instead of failing it: the
results to record first, and the same step checkpoint the run loop writes
when an activity finds its call in doubt, so the host answers it with
``ToolHappened``, ``ToolRetry`` or ``ToolFailed`` and the continuation goes on.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentledger.errors import CorruptRecordError, ValidationError
from agentledger.runtime import records as rt
from agentledger.runtime.checkpoint import InDoubtToolCall, RunCheckpoint, step_checkpoint
from agentledger.runtime.planner import ToolCall, ToolOutcome
from agentledger.storage import payloads
from agentledger.storage.protocol import Store
from agentledger.storage.types import Record, RunMeta
from agentledger.storage.validation import decode_stored_payload
from agentledger.transcript import ToolUsePart

__all__ = ["DoubtfulStep", "in_doubt_step"]


class DoubtfulStep(msgspec.Struct, frozen=True, kw_only=True):
    """How to suspend a run whose step holds calls in doubt: record ``results`` (saved
    privately, not yet records), then suspend with ``checkpoint``."""

    results: tuple[rt.RecordSpec, ...]
    checkpoint: RunCheckpoint


def _decode(record: Record, kind: Any) -> Any:
    return rt.decode_payload(record, kind)


def _step_of(event_key: str) -> str:
    return rt.parse_event_key(event_key).step


async def in_doubt_step(
    store: Store, meta: RunMeta, records: list[Record], dangling: list[ToolUsePart]
) -> DoubtfulStep | None:
    """The suspension of a run whose unanswered tool uses ``dangling`` include a ``once``
    call started without an outcome (None when none is in doubt).

    Raises:
        CorruptRecordError: a started, scheduled or result record (or a saved result)
            does not decode.
    """
    ids = {u.id for u in dangling}
    started: dict[str, tuple[Record, rt.ToolStartedPayload]] = {}
    steps: dict[str, str] = {}
    scheduled: set[str] = set()  # calls this run scheduled (not a predecessor)
    recorded: dict[str, ToolOutcome] = {}
    for record in records:
        if record.type == rt.TOOL_CALL_STARTED:
            began: rt.ToolStartedPayload = _decode(record, rt.ToolStartedPayload)
            if began.tool_call_id in ids:
                started[began.tool_call_id] = (record, began)  # the latest attempt wins
                steps[began.tool_call_id] = _step_of(record.event_key)
        elif record.type == rt.TOOL_CALL_SCHEDULED:
            call: rt.ToolScheduledPayload = _decode(record, rt.ToolScheduledPayload)
            if call.tool_call_id in ids:
                scheduled.add(call.tool_call_id)
                steps.setdefault(call.tool_call_id, _step_of(record.event_key))
        elif record.type == rt.TOOL_RESULT_RECEIVED:
            res: rt.ToolResultPayload = _decode(record, rt.ToolResultPayload)
            if res.tool_call_id in ids:
                recorded[res.tool_call_id] = ToolOutcome(
                    tool_call_id=res.tool_call_id,
                    tool_name=res.tool_name,
                    content=res.content,
                    is_error=res.is_error,
                )
    if not any(u.id in started and u.id not in recorded for u in dangling):
        return None
    owed: list[rt.RecordSpec] = []
    doubts: list[InDoubtToolCall] = []
    for use in dangling:
        if use.id in recorded:
            continue
        step = steps.get(use.id, "resume")
        key = rt.RecordSpec.result(step, use.id, use.name, None, False).event_key
        saved = await store.load_tool_result(meta.run_id, key)
        if saved is not None:  # it ran: its result becomes a record before the suspension
            try:
                outcome: ToolOutcome = rt.decode_json(saved, ToolOutcome)
            except (msgspec.ValidationError, msgspec.DecodeError) as e:
                raise CorruptRecordError(
                    run_id=meta.run_id, record_id=f"tool_result:{key}", reason=str(e)
                ) from e
            recorded[use.id] = outcome
            owed.append(
                rt.RecordSpec.result(step, use.id, use.name, outcome.content, outcome.is_error)
            )
        elif use.id in started:
            record, began = started[use.id]
            doubts.append(
                InDoubtToolCall(
                    tool_name=began.tool_name,
                    tool_call_id=use.id,
                    key=began.key,
                    input=dict(use.input),
                    started_at=record.timestamp,
                    attempt=began.attempt,
                )
            )
    if not doubts:
        return None
    calls = tuple(ToolCall(id=u.id, name=u.name, input=dict(u.input)) for u in dangling)
    origin = "" if scheduled else await _origin(store, records)
    step = steps.get(dangling[0].id, "")
    turn = rt.step_turn(step)
    checkpoint = step_checkpoint(
        agent_id=meta.agent_id,
        turn=turn,
        calls=calls,
        results=tuple(recorded[c.id] for c in calls if c.id in recorded),
        in_doubt=tuple(doubts),
        origin_run_id=origin,
    )
    return DoubtfulStep(results=tuple(owed), checkpoint=checkpoint)


async def _origin(store: Store, records: list[Record]) -> str:
    """The run that scheduled a continuation's step: its predecessor's step origin."""
    started = decode_stored_payload(records[0], payloads.RunStarted)
    predecessor = started.predecessor_run_id
    if not predecessor:
        return ""
    stored = await store.load_run_suspension(predecessor)
    try:
        checkpoint = RunCheckpoint.decode(stored.data)
    except ValidationError as e:
        raise CorruptRecordError(run_id=predecessor, record_id="", reason=f"checkpoint: {e}") from e
    return checkpoint.origin_run_id or predecessor
