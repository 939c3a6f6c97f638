"""Stream events: what a run tells its listeners, one event per stored record.

Every event is derived from the record that was stored (:func:`event_from_record`),
and its ``key`` is ``"<run_id>/<event_key>"``. A retried activity, or
``ensure_run_completion`` redelivering a final record [E2], therefore sends
an event with the same key and the same content: consumers drop keys they
have seen, and redelivery is safe.

Seeded transcript messages are not published: they existed before the run
and are never new output [R1].

One kind of event has no record: :class:`ModelDelta`, model output streamed
while the model answers (text, thinking, tool calls and their input), so a
UI can show tokens live. Its key names the planner turn, the model call
(``attempt``: a retried turn streams again under a new one) and its place
in that call. The assistant message it makes up is recorded once, as
``transcript_messages_appended``, after the model finished.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, TypeAlias

import msgspec

from agentledger.errors import CorruptRecordError, TranscriptError, ValidationError
from agentledger.providers.model import (
    ModelStreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStart,
)
from agentledger.runtime import records as rt
from agentledger.storage import payloads
from agentledger.storage.lifecycle import messages
from agentledger.storage.types import Record
from agentledger.transcript import Message, decode_messages

__all__ = [
    "CancellationRequested",
    "ChildRunLinked",
    "MessageSteered",
    "MessageSubmitted",
    "MessagesAppended",
    "ModelDelta",
    "ModelUsageReported",
    "PhaseChanged",
    "PlannerNoted",
    "PromptRendered",
    "RunCompleted",
    "RunEvent",
    "RunStarted",
    "RunSuspended",
    "ToolCallAnswered",
    "ToolCallScheduled",
    "ToolCallStarted",
    "ToolResultReceived",
    "delta_event",
    "event_from_record",
]


class _Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Fields every event has: its stable key and the run it belongs to."""

    key: str
    run_id: str
    agent_id: str
    session_id: str
    turn_id: str
    timestamp: datetime


class RunStarted(_Event, frozen=True, kw_only=True, tag="run_started"):
    """A run started (a child names its parent, a continuation its predecessor)."""

    parent_run_id: str = ""
    predecessor_run_id: str = ""
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class PromptRendered(_Event, frozen=True, kw_only=True, tag="prompt_rendered"):
    """The run rendered a prompt."""

    prompt_id: str
    version: str


class PhaseChanged(_Event, frozen=True, kw_only=True, tag="run_phase_changed"):
    """The run entered a non-terminal phase."""

    phase: rt.Phase


class MessagesAppended(_Event, frozen=True, kw_only=True, tag="transcript_messages_appended"):
    """New transcript messages: the user's input, an assistant message, tool results."""

    messages: tuple[Message, ...]


class ToolCallScheduled(_Event, frozen=True, kw_only=True, tag="tool_call_scheduled"):
    """A tool call (or a child run) is about to run; ``effect`` is its tool's effect class."""

    tool_call_id: str
    tool_name: str
    input: dict[str, Any]
    effect: str = "retry"


class ToolCallStarted(_Event, frozen=True, kw_only=True, tag="tool_call_started"):
    """A ``once`` tool call is about to be invoked (its ``attempt``-th time)."""

    tool_call_id: str
    tool_name: str
    idempotency_key: str
    attempt: int


class ToolCallAnswered(_Event, frozen=True, kw_only=True, tag="tool_call_answered"):
    """The host decided a tool call in doubt: ``happened`` (with ``result``), ``retry`` or
    ``failed`` (with ``reason``); ``by`` says who."""

    tool_call_id: str
    tool_name: str
    idempotency_key: str
    decision: str
    by: str = ""
    result: Any = None
    reason: str = ""


class ToolResultReceived(_Event, frozen=True, kw_only=True, tag="tool_result_received"):
    """A tool call finished (``is_error`` when it failed or was interrupted)."""

    tool_call_id: str
    tool_name: str
    content: Any
    is_error: bool = False


class PlannerNoted(_Event, frozen=True, kw_only=True, tag="planner_note"):
    """A planner remark."""

    text: str
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class ModelUsageReported(_Event, frozen=True, kw_only=True, tag="model_usage"):
    """Tokens used by one model call."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


class ChildRunLinked(_Event, frozen=True, kw_only=True, tag="child_run_linked"):
    """A tool call of this run started a child run."""

    tool_name: str
    tool_call_id: str
    child_run_id: str
    child_agent_id: str


class CancellationRequested(_Event, frozen=True, kw_only=True, tag="cancellation_requested"):
    """Someone asked to cancel the run [C1]."""

    reason: str


class RunSuspended(_Event, frozen=True, kw_only=True, tag="run_suspended"):
    """The run is waiting for outside input (phase ``suspended``)."""

    suspension_id: str
    pending_count: int
    required_tools: tuple[str, ...]


class RunCompleted(_Event, frozen=True, kw_only=True, tag="run_completed"):
    """The run ended: ``phase`` is ``completed``, ``failed`` or ``canceled``."""

    status: str
    phase: str
    failure: payloads.Failure | None = None
    reason: str = ""


class ModelDelta(_Event, frozen=True, kw_only=True, tag="model_delta"):
    """Model output as it arrives (not a record; the assistant message is recorded once).

    ``kind`` is ``text`` or ``thinking`` (``text`` holds the fragment),
    ``tool_use`` (a tool call began: ``tool_call_id``, ``tool_name``) or
    ``tool_input`` (``text`` is a fragment of that call's JSON input).
    ``index`` is the part of the assistant message being built.
    """

    turn: int
    """The planner turn (1, 2, ...) whose model call this is."""
    attempt: str
    """Identifies one model call; a retried turn streams again under another."""
    seq: int
    """0, 1, ... in the order this call produced them."""
    kind: Literal["text", "thinking", "tool_use", "tool_input"]
    index: int
    text: str = ""
    tool_call_id: str = ""
    tool_name: str = ""


class MessageSubmitted(_Event, frozen=True, kw_only=True, tag="message_submitted"):
    """A message reached a session (``run_id`` is its turn's run, started later if it waits).

    ``fate``: ``start`` (nothing ran ahead of it), ``queued`` (it waits for the
    turn ``after``), ``interrupting`` (it cancels ``running_run_id`` and follows
    it) or ``steering`` (meant for ``running_run_id``: its next planner turn takes
    it, see :class:`MessageSteered`; if the run ends first, it becomes the next turn).
    """

    position: int
    fate: str
    if_busy: str
    after: str = ""
    running_run_id: str = ""


class MessageSteered(_Event, frozen=True, kw_only=True, tag="message_steered"):
    """A steering message joined the running run ``run_id`` at a planner turn: its user
    message follows in the run's transcript; it starts no turn of its own.
    ``message_run_id`` and ``position`` name the message as the session keeps it."""

    message_run_id: str
    position: int


RunEvent: TypeAlias = (
    RunStarted
    | PromptRendered
    | PhaseChanged
    | MessagesAppended
    | ToolCallScheduled
    | ToolCallStarted
    | ToolCallAnswered
    | ToolResultReceived
    | PlannerNoted
    | ModelUsageReported
    | ChildRunLinked
    | CancellationRequested
    | RunSuspended
    | RunCompleted
    | ModelDelta
    | MessageSubmitted
    | MessageSteered
)
"""Any stream event (tagged by ``type`` in JSON)."""


def _base(record: Record) -> dict[str, Any]:
    return {
        "key": f"{record.run_id}/{record.event_key}",
        "run_id": record.run_id,
        "agent_id": record.agent_id,
        "session_id": record.session_id,
        "turn_id": record.turn_id,
        "timestamp": record.timestamp,
    }


def _project(record: Record) -> RunEvent | None:
    base = _base(record)
    match record.type:
        case payloads.RUN_STARTED:
            started = payloads.RunStarted.decode(record.payload)
            return RunStarted(
                **base,
                parent_run_id=started.parent_run_id,
                predecessor_run_id=started.predecessor_run_id,
                labels=started.labels,
            )
        case payloads.RUN_COMPLETED:
            done = payloads.RunCompleted.decode(record.payload)
            reason = done.cancellation.reason if done.cancellation else ""
            return RunCompleted(
                **base, status=done.status, phase=done.phase, failure=done.failure, reason=reason
            )
        case payloads.RUN_SUSPENDED:
            held = payloads.RunSuspended.decode(record.payload)
            return RunSuspended(
                **base,
                suspension_id=held.suspension_id,
                pending_count=held.pending_count,
                required_tools=held.required_tools,
            )
        case payloads.CHILD_RUN_LINKED:
            link = payloads.ChildRunLinked.decode(record.payload)
            return ChildRunLinked(
                **base,
                tool_name=link.tool_name,
                tool_call_id=link.tool_call_id,
                child_run_id=link.child_run_id,
                child_agent_id=link.child_agent_id,
            )
        case payloads.CANCELLATION_INTENT:
            intent = payloads.CancellationIntent.decode(record.payload)
            return CancellationRequested(**base, reason=intent.reason)
        case rt.TRANSCRIPT_APPENDED:
            return MessagesAppended(**base, messages=tuple(decode_messages(record.payload)))
        case rt.RUN_PHASE_CHANGED:
            phase = rt.decode_payload(record, rt.PhasePayload)
            return PhaseChanged(**base, phase=phase.phase)
        case rt.PROMPT_RENDERED:
            prompt = rt.decode_payload(record, rt.PromptPayload)
            return PromptRendered(**base, prompt_id=prompt.prompt_id, version=prompt.version)
        case rt.TOOL_CALL_SCHEDULED:
            call = rt.decode_payload(record, rt.ToolScheduledPayload)
            return ToolCallScheduled(
                **base,
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
                input=call.input,
                effect=call.effect,
            )
        case rt.TOOL_CALL_STARTED:
            began = rt.decode_payload(record, rt.ToolStartedPayload)
            return ToolCallStarted(
                **base,
                tool_call_id=began.tool_call_id,
                tool_name=began.tool_name,
                idempotency_key=began.key,
                attempt=began.attempt,
            )
        case rt.TOOL_CALL_ANSWERED:
            said = rt.decode_payload(record, rt.ToolAnsweredPayload)
            return ToolCallAnswered(
                **base,
                tool_call_id=said.tool_call_id,
                tool_name=said.tool_name,
                idempotency_key=said.key,
                decision=said.decision,
                by=said.by,
                result=said.result,
                reason=said.reason,
            )
        case rt.TOOL_RESULT_RECEIVED:
            res = rt.decode_payload(record, rt.ToolResultPayload)
            return ToolResultReceived(
                **base,
                tool_call_id=res.tool_call_id,
                tool_name=res.tool_name,
                content=res.content,
                is_error=res.is_error,
            )
        case rt.PLANNER_NOTE:
            note = rt.decode_payload(record, rt.NotePayload)
            return PlannerNoted(**base, text=note.text, labels=note.labels)
        case messages.MESSAGE_STEERED:
            mark = msgspec.json.decode(record.payload, type=messages.SteeredMark)
            return MessageSteered(
                **base, message_run_id=mark.message_run_id, position=mark.position
            )
        case rt.MODEL_USAGE:
            usage = rt.decode_payload(record, rt.UsagePayload)
            return ModelUsageReported(**base, **msgspec.structs.asdict(usage))
    return None


def event_from_record(record: Record) -> RunEvent | None:
    """The stream event of a stored record, or None for records that publish nothing.

    Raises:
        CorruptRecordError: the record's payload does not fit its type.
    """
    try:
        return _project(record)
    except (ValidationError, TranscriptError, msgspec.ValidationError, msgspec.DecodeError) as e:
        raise CorruptRecordError(
            run_id=record.run_id, record_id=record.id, reason=f"{record.type}: {e}"
        ) from e


def delta_event(
    base: dict[str, Any], *, turn: int, attempt: str, seq: int, delta: ModelStreamEvent
) -> ModelDelta | None:
    """The stream event of one model stream event (None for the final ``StreamEnd``).

    ``base`` holds the run's identity and the time (``run_id``, ``agent_id``,
    ``session_id``, ``turn_id``, ``timestamp``); the key is derived here.
    """
    common: dict[str, Any] = {
        **base,
        "key": f"{base['run_id']}/turn:{turn}:delta:{attempt}:{seq}",
        "turn": turn,
        "attempt": attempt,
        "seq": seq,
        "index": getattr(delta, "index", 0),
    }
    if isinstance(delta, TextDelta):
        return ModelDelta(**common, kind="text", text=delta.text)
    if isinstance(delta, ThinkingDelta):
        return ModelDelta(**common, kind="thinking", text=delta.text)
    if isinstance(delta, ToolUseStart):
        return ModelDelta(**common, kind="tool_use", tool_call_id=delta.id, tool_name=delta.name)
    if isinstance(delta, ToolInputDelta):
        return ModelDelta(**common, kind="tool_input", text=delta.partial_json)
    return None
