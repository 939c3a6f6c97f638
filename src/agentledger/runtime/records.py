"""The runtime's ordinary record types, their payloads and their event keys.

Lifecycle records (``run_started``, ``run_completed`` ...) are built by
:class:`~agentledger.storage.RecordBuilder`; everything else a run writes is
defined here. Event keys are deterministic from the run's step
(``turn:2:tool:call_1:result``), so a retried activity writes the very same
record and the store answers with an exact retry [X1]. Building a
:class:`RecordSpec` is pure computation: the run loop does it, an activity
stores it.

The key grammar is owned here: the ``*_key`` builders make every event key a
run writes, and :func:`parse_event_key` reads one back as an :class:`EventKey`;
:func:`decode_payload` reads a stored payload with the checks its writer made.
Nothing else builds or parses these keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, TypeVar, cast

import msgspec

from agentledger.errors import CorruptRecordError
from agentledger.storage import payloads
from agentledger.storage.payloads import TranscriptReference
from agentledger.storage.types import Record
from agentledger.storage.validation import decode_stored_payload
from agentledger.transcript import JsonNumber, Message, encode_messages

__all__ = [
    "MODEL_USAGE",
    "PLANNER_NOTE",
    "PROMPT_RENDERED",
    "RUN_PHASE_CHANGED",
    "TOOL_CALL_ANSWERED",
    "TOOL_CALL_SCHEDULED",
    "TOOL_CALL_STARTED",
    "TOOL_RESULT_RECEIVED",
    "TRANSCRIPT_APPENDED",
    "TRANSCRIPT_REFERENCED",
    "TRANSCRIPT_SEEDED",
    "EventKey",
    "KeyKind",
    "NotePayload",
    "Phase",
    "PhasePayload",
    "PromptPayload",
    "RecordSpec",
    "ToolAnsweredPayload",
    "ToolResultPayload",
    "ToolScheduledPayload",
    "ToolStartedPayload",
    "UsagePayload",
    "decode_json",
    "decode_payload",
    "encode_json",
    "history_key",
    "history_usage_key",
    "messages_key",
    "note_key",
    "parse_event_key",
    "phase_key",
    "prompt_key",
    "step_turn",
    "tool_key",
    "turn_step",
    "usage_key",
    "window_key",
]

RUN_PHASE_CHANGED = "run_phase_changed"
TOOL_CALL_SCHEDULED = "tool_call_scheduled"
TOOL_RESULT_RECEIVED = "tool_result_received"
TOOL_CALL_STARTED = "tool_call_started"
TOOL_CALL_ANSWERED = "tool_call_answered"
PLANNER_NOTE = "planner_note"
MODEL_USAGE = "model_usage"
PROMPT_RENDERED = payloads.PROMPT_RENDERED
TRANSCRIPT_SEEDED = payloads.TRANSCRIPT_SEEDED
TRANSCRIPT_REFERENCED = payloads.TRANSCRIPT_REFERENCED
TRANSCRIPT_APPENDED = payloads.TRANSCRIPT_APPENDED


class Phase(StrEnum):
    """Where a run is. Terminal phases are carried by the terminal records.

    ``completed``, ``failed`` and ``canceled`` are the ``phase`` of
    ``run_completed``; ``suspended`` is ``run_suspended``. The others are
    ``run_phase_changed`` records.
    """

    PROMPTED = "prompted"  # the run has its prompt and its input
    PLANNING = "planning"  # the first planner turn
    EXECUTING_TOOLS = "executing_tools"  # tool calls (and child runs) are running
    SYNTHESIZING = "synthesizing"  # a planner turn after tool results or outside input
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    SUSPENDED = "suspended"


def _enc_hook(value: Any) -> Any:
    if isinstance(value, JsonNumber):
        return msgspec.Raw(value.literal.encode("ascii"))
    raise TypeError(f"not JSON: {type(value).__name__}")


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook, decimal_format="number")
_DECODERS: dict[Any, msgspec.json.Decoder[Any]] = {}


def _float_hook(literal: str) -> JsonNumber:
    return JsonNumber(literal)


def encode_json(value: Any) -> bytes:
    """Compact JSON that keeps exact numbers (JsonNumber literals) as written."""
    return _ENCODER.encode(value)


def decode_json(data: bytes, type: Any = Any) -> Any:
    """Decode runtime payload JSON strictly; non-integer numbers become JsonNumbers."""
    decoder = _DECODERS.get(type)
    if decoder is None:
        decoder = _DECODERS[type] = msgspec.json.Decoder(type, float_hook=_float_hook)
    return decoder.decode(data)


class _Payload(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A runtime record payload: one JSON object with known fields only."""


class PhasePayload(_Payload, frozen=True, kw_only=True):
    """``run_phase_changed``: the phase the run entered."""

    phase: Phase


class PromptPayload(_Payload, frozen=True, kw_only=True):
    """``prompt_rendered``: which prompt (and version) the run used, and its text [D5]."""

    prompt_id: str
    version: str
    text: str


class ToolScheduledPayload(_Payload, frozen=True, kw_only=True, omit_defaults=True):
    """``tool_call_scheduled``: a call about to run (or a child run about to start).

    ``effect`` is the tool's effect class; it is left out for ``retry`` (the
    default), so such a record has the very bytes it had before effects existed.
    """

    tool_call_id: str
    tool_name: str
    input: dict[str, Any]
    effect: Literal["retry", "keyed", "once"] = "retry"


class ToolStartedPayload(_Payload, frozen=True, kw_only=True):
    """``tool_call_started``: a ``once`` call is about to be invoked (attempt ``attempt``)."""

    tool_call_id: str
    tool_name: str
    key: str
    attempt: int


class ToolAnsweredPayload(_Payload, frozen=True, kw_only=True, omit_defaults=True):
    """``tool_call_answered``: the host's decision on a call in doubt, and who gave it.

    ``result`` goes with ``happened``, ``reason`` with ``failed``.
    """

    tool_call_id: str
    tool_name: str
    key: str
    decision: Literal["happened", "retry", "failed"]
    by: str = ""
    result: Any = None
    reason: str = ""


class ToolResultPayload(_Payload, frozen=True, kw_only=True):
    """``tool_result_received``: what a call returned (error text when ``is_error``)."""

    tool_call_id: str
    tool_name: str
    content: Any
    is_error: bool = False


class NotePayload(_Payload, frozen=True, kw_only=True):
    """``planner_note``: a planner's remark."""

    text: str
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class UsagePayload(_Payload, frozen=True, kw_only=True):
    """``model_usage``: tokens of one model call."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


# ------------------------------------------------------------------------------ event keys


class KeyKind(StrEnum):
    """What a runtime event key names."""

    PHASE = "phase"  # ``phase:<phase>`` or ``turn:N:phase:<phase>``
    PROMPT = "prompt"  # ``prompt:<prompt id>``
    SEEDED = "seeded"  # ``transcript:seeded``
    REFERENCED = "referenced"  # ``transcript:referenced``
    MESSAGES = "messages"  # ``<step>:messages``
    TOOL = "tool"  # ``<step>:tool:<call id>:<stage>`` (``started:<attempt>``)
    NOTE = "note"  # ``turn:N:note:<index>``
    USAGE = "usage"  # ``turn:N:usage:<index>``, or ``turn:N:history:usage`` (a summariser)
    WINDOW = "window"  # ``turn:N:window``
    OTHER = "other"  # not a key the run loop writes (a lifecycle record's, for one)


@dataclass(frozen=True)
class EventKey:
    """An event key read back (:func:`parse_event_key`).

    ``turn`` is the planner turn the key belongs to (0: before the first turn,
    or a step outside turns such as ``resume``); ``step`` the step prefix
    (``turn:2``, ``resume:answer``); ``index`` a note's or usage's number (None
    for a compaction's summariser usage, ``history`` true); ``call_id`` and
    ``stage`` a tool call's id and what its record says (``scheduled``,
    ``started``, ``answered``, ``result``); ``attempt`` a ``started`` record's
    attempt; ``name`` a phase's or prompt's name.
    """

    kind: KeyKind
    turn: int = 0
    step: str = ""
    index: int | None = None
    call_id: str = ""
    stage: str = ""
    attempt: int = 0
    name: str = ""
    history: bool = False


_TOOL_STAGES = frozenset({"scheduled", "answered", "result"})


def turn_step(turn: int) -> str:
    """The step prefix of planner turn ``turn`` (``turn:3``)."""
    return f"turn:{turn}"


def phase_key(phase: Phase | str, turn: int = 0) -> str:
    """The key of a ``run_phase_changed`` record (``turn`` 0: before the first turn)."""
    return f"phase:{phase}" if turn == 0 else f"{turn_step(turn)}:phase:{phase}"


def prompt_key(prompt_id: str) -> str:
    """The key of a ``prompt_rendered`` record."""
    return f"prompt:{prompt_id}"


def messages_key(step: str) -> str:
    """The key of the messages accepted at ``step`` (``input``, ``turn:2:assistant`` ...)."""
    return f"{step}:messages"


def tool_key(step: str, call_id: str, stage: str, attempt: int = 0) -> str:
    """The key of a tool call's record at ``stage`` (``started`` takes its ``attempt``)."""
    suffix = f"started:{attempt}" if stage == "started" else stage
    return f"{step}:tool:{call_id}:{suffix}"


def note_key(turn: int, index: int) -> str:
    """The key of planner note ``index`` of turn ``turn``."""
    return f"{turn_step(turn)}:note:{index}"


def usage_key(turn: int, index: int) -> str:
    """The key of model call ``index``'s usage in turn ``turn``."""
    return f"{turn_step(turn)}:usage:{index}"


def history_key(turn: int) -> str:
    """Where turn ``turn``'s compaction summary is saved among the run's per-call results."""
    return f"{turn_step(turn)}:history"


def history_usage_key(turn: int) -> str:
    """The key of the usage of the summariser that compacted turn ``turn``'s history."""
    return f"{history_key(turn)}:usage"


def window_key(turn: int) -> str:
    """The key of the ``transcript_window_applied`` record of turn ``turn``."""
    return f"{turn_step(turn)}:window"


def _number(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() else None


def step_turn(step: str) -> int:
    """The turn a step prefix belongs to (0 outside turns)."""
    head, _, rest = step.partition(":")
    if head != "turn":
        return 0
    return _number(rest.partition(":")[0]) or 0


def parse_event_key(key: str) -> EventKey:
    """What the event key ``key`` names; a key the run loop never writes is ``OTHER``."""
    other = EventKey(KeyKind.OTHER)
    if key == "transcript:seeded":
        return EventKey(KeyKind.SEEDED)
    if key == "transcript:referenced":
        return EventKey(KeyKind.REFERENCED)
    if key.startswith("phase:"):
        return EventKey(KeyKind.PHASE, name=key[len("phase:") :])
    if key.startswith("prompt:"):
        return EventKey(KeyKind.PROMPT, name=key[len("prompt:") :])
    if ":tool:" in key:
        step, _, rest = key.partition(":tool:")
        call_id, _, stage = rest.rpartition(":")
        attempt = 0
        if stage not in _TOOL_STAGES:
            call_id, _, started = call_id.rpartition(":")
            number = _number(stage)
            if started != "started" or number is None:
                return other
            stage, attempt = "started", number
        if not call_id:
            return other
        return EventKey(
            KeyKind.TOOL,
            turn=step_turn(step),
            step=step,
            call_id=call_id,
            stage=stage,
            attempt=attempt,
        )
    if key.endswith(":messages"):
        step = key[: -len(":messages")]
        return EventKey(KeyKind.MESSAGES, turn=step_turn(step), step=step) if step else other
    parts = key.split(":")
    if len(parts) < 3 or parts[0] != "turn" or _number(parts[1]) is None:
        return other
    turn, step, tail = int(parts[1]), turn_step(int(parts[1])), parts[2:]
    match tail:
        case ["phase", name] if name:
            return EventKey(KeyKind.PHASE, turn=turn, step=step, name=name)
        case ["note", index] if _number(index) is not None:
            return EventKey(KeyKind.NOTE, turn=turn, step=step, index=int(index))
        case ["usage", index] if _number(index) is not None:
            return EventKey(KeyKind.USAGE, turn=turn, step=step, index=int(index))
        case ["history", "usage"]:
            return EventKey(KeyKind.USAGE, turn=turn, step=step, history=True)
        case ["window"]:
            return EventKey(KeyKind.WINDOW, turn=turn, step=step)
    return other


# ---------------------------------------------------------------------- stored payloads

_P = TypeVar("_P", bound=msgspec.Struct)

_RECORD_TYPES: dict[type[Any], str] = {
    PhasePayload: RUN_PHASE_CHANGED,
    PromptPayload: PROMPT_RENDERED,
    ToolScheduledPayload: TOOL_CALL_SCHEDULED,
    ToolStartedPayload: TOOL_CALL_STARTED,
    ToolAnsweredPayload: TOOL_CALL_ANSWERED,
    ToolResultPayload: TOOL_RESULT_RECEIVED,
    NotePayload: PLANNER_NOTE,
    UsagePayload: MODEL_USAGE,
}


def decode_payload(record: Record, type: type[_P]) -> _P:
    """The payload of a stored ``record`` as ``type``, checked as its writer checked it.

    ``type`` is a runtime payload (this module's) or a storage one
    (:mod:`agentledger.storage.payloads`, decoded by the store's own
    :func:`~agentledger.storage.validation.decode_stored_payload`). The
    record's type must be the one ``type`` is written as.

    Raises:
        CorruptRecordError: the payload is not a valid ``type`` (damaged data is
            reported, never read as empty).
    """
    if isinstance(getattr(type, "record_type", None), str):  # a storage payload
        return cast(_P, decode_stored_payload(record, cast(Any, type)))
    expected = _RECORD_TYPES.get(type)
    if expected is not None and record.type != expected:
        raise CorruptRecordError(
            run_id=record.run_id,
            record_id=record.id,
            reason=f"expected type {expected!r}, found {record.type!r}",
        )
    try:
        return cast(_P, decode_json(record.payload, type))
    except msgspec.DecodeError as e:  # msgspec.ValidationError is one
        raise CorruptRecordError(
            run_id=record.run_id,
            record_id=record.id,
            reason=f"{record.type} payload is not a valid {type.__name__}: {e}",
        ) from e


class RecordSpec(msgspec.Struct, frozen=True, kw_only=True):
    """An ordinary record to write: everything but the run identity and the time."""

    type: str
    event_key: str
    payload: bytes

    # ---------------------------------------------------------------- builders

    @classmethod
    def phase(cls, phase: Phase, turn: int = 0) -> RecordSpec:
        """The run entered ``phase`` (``turn`` 0 is before the first planner turn)."""
        return cls(
            type=RUN_PHASE_CHANGED,
            event_key=phase_key(phase, turn),
            payload=encode_json(PhasePayload(phase=phase)),
        )

    @classmethod
    def prompt(cls, prompt_id: str, version: str, text: str) -> RecordSpec:
        """The run rendered this prompt."""
        payload = PromptPayload(prompt_id=prompt_id, version=version, text=text)
        return cls(
            type=PROMPT_RENDERED, event_key=prompt_key(prompt_id), payload=encode_json(payload)
        )

    @classmethod
    def seeded(cls, messages: tuple[Message, ...] | list[Message]) -> RecordSpec:
        """Messages that existed before the run [R1]."""
        return cls(
            type=TRANSCRIPT_SEEDED, event_key="transcript:seeded", payload=encode_messages(messages)
        )

    @classmethod
    def referenced(cls, reference: TranscriptReference) -> RecordSpec:
        """The run's history as a reference to another run's transcript [V1]/[V2]."""
        key = "transcript:referenced"
        return cls(type=TRANSCRIPT_REFERENCED, event_key=key, payload=reference.encode())

    @classmethod
    def appended(cls, key: str, *messages: Message) -> RecordSpec:
        """Messages accepted during the run, under the step key ``key`` [R1]."""
        return cls(
            type=TRANSCRIPT_APPENDED, event_key=messages_key(key), payload=encode_messages(messages)
        )

    @classmethod
    def scheduled(
        cls,
        step: str,
        call_id: str,
        name: str,
        input: dict[str, Any],
        effect: Literal["retry", "keyed", "once"] = "retry",
    ) -> RecordSpec:
        """A tool call is about to run."""
        payload = ToolScheduledPayload(
            tool_call_id=call_id, tool_name=name, input=input, effect=effect
        )
        return cls(
            type=TOOL_CALL_SCHEDULED,
            event_key=tool_key(step, call_id, "scheduled"),
            payload=encode_json(payload),
        )

    @classmethod
    def started(cls, step: str, call_id: str, name: str, key: str, attempt: int) -> RecordSpec:
        """A ``once`` call is about to be invoked, for the ``attempt``-th time."""
        payload = ToolStartedPayload(tool_call_id=call_id, tool_name=name, key=key, attempt=attempt)
        return cls(
            type=TOOL_CALL_STARTED,
            event_key=tool_key(step, call_id, "started", attempt),
            payload=encode_json(payload),
        )

    @classmethod
    def answered(cls, step: str, answer: ToolAnsweredPayload) -> RecordSpec:
        """The host decided a call in doubt."""
        return cls(
            type=TOOL_CALL_ANSWERED,
            event_key=tool_key(step, answer.tool_call_id, "answered"),
            payload=encode_json(answer),
        )

    @classmethod
    def result(cls, step: str, call_id: str, name: str, content: Any, is_error: bool) -> RecordSpec:
        """A tool call's result arrived."""
        payload = ToolResultPayload(
            tool_call_id=call_id, tool_name=name, content=content, is_error=is_error
        )
        return cls(
            type=TOOL_RESULT_RECEIVED,
            event_key=tool_key(step, call_id, "result"),
            payload=encode_json(payload),
        )

    @classmethod
    def note(cls, turn: int, index: int, text: str, labels: dict[str, str]) -> RecordSpec:
        """A planner note of turn ``turn``."""
        return cls(
            type=PLANNER_NOTE,
            event_key=note_key(turn, index),
            payload=encode_json(NotePayload(text=text, labels=labels)),
        )

    @classmethod
    def usage(cls, turn: int, index: int, usage: UsagePayload) -> RecordSpec:
        """Token usage of a model call in turn ``turn``."""
        return cls(type=MODEL_USAGE, event_key=usage_key(turn, index), payload=encode_json(usage))
