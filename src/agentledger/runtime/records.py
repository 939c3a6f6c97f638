"""The runtime's ordinary record types, their payloads and their event keys.

Lifecycle records (``run_started``, ``run_completed`` ...) are built by
:class:`~agentledger.storage.RecordBuilder`; everything else a run writes is
defined here. Event keys are deterministic from the run's step
(``turn:2:tool:call_1:result``), so a retried activity writes the very same
record and the store answers with an exact retry [X1]. Building a
:class:`RecordSpec` is pure computation: the run loop does it, an activity
stores it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

import msgspec

from agentledger.storage import payloads
from agentledger.storage.payloads import TranscriptReference
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
    "encode_json",
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


class RecordSpec(msgspec.Struct, frozen=True, kw_only=True):
    """An ordinary record to write: everything but the run identity and the time."""

    type: str
    event_key: str
    payload: bytes

    # ---------------------------------------------------------------- builders

    @classmethod
    def phase(cls, phase: Phase, turn: int = 0) -> RecordSpec:
        """The run entered ``phase`` (``turn`` 0 is before the first planner turn)."""
        key = f"phase:{phase}" if turn == 0 else f"turn:{turn}:phase:{phase}"
        return cls(
            type=RUN_PHASE_CHANGED, event_key=key, payload=encode_json(PhasePayload(phase=phase))
        )

    @classmethod
    def prompt(cls, prompt_id: str, version: str, text: str) -> RecordSpec:
        """The run rendered this prompt."""
        payload = PromptPayload(prompt_id=prompt_id, version=version, text=text)
        return cls(
            type=PROMPT_RENDERED, event_key=f"prompt:{prompt_id}", payload=encode_json(payload)
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
            type=TRANSCRIPT_APPENDED, event_key=f"{key}:messages", payload=encode_messages(messages)
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
            event_key=f"{step}:tool:{call_id}:scheduled",
            payload=encode_json(payload),
        )

    @classmethod
    def started(cls, step: str, call_id: str, name: str, key: str, attempt: int) -> RecordSpec:
        """A ``once`` call is about to be invoked, for the ``attempt``-th time."""
        payload = ToolStartedPayload(tool_call_id=call_id, tool_name=name, key=key, attempt=attempt)
        return cls(
            type=TOOL_CALL_STARTED,
            event_key=f"{step}:tool:{call_id}:started:{attempt}",
            payload=encode_json(payload),
        )

    @classmethod
    def answered(cls, step: str, answer: ToolAnsweredPayload) -> RecordSpec:
        """The host decided a call in doubt."""
        return cls(
            type=TOOL_CALL_ANSWERED,
            event_key=f"{step}:tool:{answer.tool_call_id}:answered",
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
            event_key=f"{step}:tool:{call_id}:result",
            payload=encode_json(payload),
        )

    @classmethod
    def note(cls, turn: int, index: int, text: str, labels: dict[str, str]) -> RecordSpec:
        """A planner note of turn ``turn``."""
        return cls(
            type=PLANNER_NOTE,
            event_key=f"turn:{turn}:note:{index}",
            payload=encode_json(NotePayload(text=text, labels=labels)),
        )

    @classmethod
    def usage(cls, turn: int, index: int, usage: UsagePayload) -> RecordSpec:
        """Token usage of a model call in turn ``turn``."""
        return cls(
            type=MODEL_USAGE, event_key=f"turn:{turn}:usage:{index}", payload=encode_json(usage)
        )
