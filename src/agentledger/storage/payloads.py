"""Record types and the typed JSON payloads of lifecycle records [J1].

Lifecycle payloads decode as exactly one JSON object of a fixed shape:
unknown fields, missing required fields, a second JSON value and invalid
UTF-8 are all rejected with a :class:`~agentledger.errors.ValidationError`.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal, Self

import msgspec

from agentledger.errors import ValidationError

__all__ = [
    "CANCELLATION_INTENT",
    "CHILD_RUN_LINKED",
    "ENGINE_CANCELED",
    "LIFECYCLE_TYPES",
    "PROMPT_RENDERED",
    "RESERVED_REASONS",
    "RUN_COMPLETED",
    "RUN_STARTED",
    "RUN_SUSPENDED",
    "SESSION_ENDED",
    "TRANSCRIPT_APPENDED",
    "TRANSCRIPT_REFERENCED",
    "TRANSCRIPT_SEEDED",
    "TRANSCRIPT_TYPES",
    "TRANSCRIPT_WINDOW",
    "CancellationIntent",
    "CancellationNote",
    "ChildRunLinked",
    "Failure",
    "RunCompleted",
    "RunStarted",
    "RunSuspended",
    "TranscriptPosition",
    "TranscriptReference",
    "TranscriptWindow",
    "WindowReplaces",
]

RUN_STARTED = "run_started"
RUN_COMPLETED = "run_completed"
RUN_SUSPENDED = "run_suspended"
CHILD_RUN_LINKED = "child_run_linked"
CANCELLATION_INTENT = "runtime.cancellation_intent"
PROMPT_RENDERED = "prompt_rendered"
TRANSCRIPT_SEEDED = "transcript_messages_seeded"
TRANSCRIPT_APPENDED = "transcript_messages_appended"
TRANSCRIPT_TYPES = frozenset({TRANSCRIPT_SEEDED, TRANSCRIPT_APPENDED})
"""Record types whose payload is a JSON array of transcript messages [R1]."""
TRANSCRIPT_REFERENCED = "transcript_messages_referenced"
"""A run's history as a reference to another run's transcript [V1]/[V2]: only a start
carries one, checked against the store in the start's own transaction [V3]."""
TRANSCRIPT_WINDOW = "transcript_window_applied"
"""Where the model input begins from now on [V5]: a history policy's cut, or a compaction
with the summary that replaces what came before, recorded with the turn that made it."""

LIFECYCLE_TYPES = frozenset(
    {RUN_STARTED, RUN_COMPLETED, RUN_SUSPENDED, CHILD_RUN_LINKED, CANCELLATION_INTENT}
)
"""Record types only lifecycle methods may write; ``append_run_record`` refuses them."""

SESSION_ENDED = "session_ended"
"""Cancellation reason of a run whose start found its session ended [C2]."""

ENGINE_CANCELED = "engine_canceled"
"""Reason in ``run_completed`` when the engine canceled with no recorded request [C3]."""

RESERVED_REASONS = frozenset({SESSION_ENDED, ENGINE_CANCELED})
"""Cancellation reasons only agentledger records; an explicit cancel must give another."""

_ENCODER = msgspec.json.Encoder()
_KEPT: dict[tuple[type[Any], bytes], Any] = {}
"""Small payloads already decoded (see ``_Payload.decode``); cleared when full."""
_KEPT_BYTES = 512
_KEPT_MAX = 4096


class _Payload(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """A strict JSON payload: one object, known fields only."""

    record_type: ClassVar[str]

    def encode(self) -> bytes:
        """The canonical JSON bytes of this payload."""
        return _ENCODER.encode(self)

    @classmethod
    def decode(cls, data: bytes) -> Self:
        """Decode exactly one payload object, rejecting anything else [J1].

        Payloads repeat (every successful run's ``run_completed`` is the same few
        bytes), so a small one decoded once is kept: the same bytes decode the
        same way, and the payload objects are immutable.
        """
        if len(data) > _KEPT_BYTES:
            return cls._decode(data)
        key = (cls, bytes(data))
        kept = _KEPT.get(key)
        if kept is None:
            kept = cls._decode(data)
            if len(_KEPT) >= _KEPT_MAX:
                _KEPT.clear()
            _KEPT[key] = kept
        return kept

    @classmethod
    def _decode(cls, data: bytes) -> Self:
        decoder: msgspec.json.Decoder[Self] = _decoder(cls)
        try:
            bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValidationError(
                field=f"{cls.record_type}.payload", expected="valid UTF-8", got=f"byte {e.start}"
            ) from e
        try:
            payload = decoder.decode(data)
        except msgspec.ValidationError as e:
            raise ValidationError(
                field=f"{cls.record_type}.payload",
                expected=f"a {cls.__name__} object",
                got=str(e),
            ) from e
        except msgspec.DecodeError as e:
            raise ValidationError(
                field=f"{cls.record_type}.payload", expected="exactly one JSON value", got=str(e)
            ) from e
        duplicate = _duplicate_key(data)
        if duplicate:
            raise ValidationError(
                field=f"{cls.record_type}.payload",
                expected="each key at most once per object",
                got=f"{duplicate!r} repeated",
            )
        return payload


def _duplicate_key(data: bytes) -> str:
    """The first key repeated inside one JSON object, or "" (msgspec keeps the last)."""
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in items]
        if not found and len(set(keys)) != len(keys):
            found.append(next(k for k in keys if keys.count(k) > 1))
        return dict(items)

    json.loads(data, object_pairs_hook=pairs)
    return found[0] if found else ""


_DECODERS: dict[type[Any], msgspec.json.Decoder[Any]] = {}


def _decoder(cls: type[Any]) -> msgspec.json.Decoder[Any]:
    decoder = _DECODERS.get(cls)
    if decoder is None:
        decoder = _DECODERS[cls] = msgspec.json.Decoder(cls)
    return decoder


class RunStarted(_Payload, frozen=True, kw_only=True):
    """Payload of ``run_started``; parent, predecessor and labels equal the command's."""

    record_type: ClassVar[str] = RUN_STARTED
    parent_run_id: str = ""
    predecessor_run_id: str = ""  # the only place a continuation's predecessor is stored [K2]
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class Failure(_Payload, frozen=True, kw_only=True):
    """Why a run failed. ``details`` carries anything beyond the four common fields."""

    record_type: ClassVar[str] = RUN_COMPLETED
    message: str
    kind: str = ""
    code: str = ""
    retryable: bool = False
    details: dict[str, Any] | None = None


class CancellationNote(_Payload, frozen=True, kw_only=True):
    """The cancellation reason repeated inside a canceled ``run_completed``."""

    record_type: ClassVar[str] = RUN_COMPLETED
    reason: str


class RunCompleted(_Payload, frozen=True, kw_only=True):
    """Payload of ``run_completed``: how a run ended."""

    record_type: ClassVar[str] = RUN_COMPLETED
    status: Literal["success", "failed", "canceled"]
    phase: Literal["completed", "failed", "canceled"]
    failure: Failure | None = None
    cancellation: CancellationNote | None = None
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class RunSuspended(_Payload, frozen=True, kw_only=True):
    """Payload of ``run_suspended``; ``suspension_id`` equals the checkpoint id."""

    record_type: ClassVar[str] = RUN_SUSPENDED
    suspension_id: str
    version: int
    pending_count: int
    required_tools: tuple[str, ...]


class ChildRunLinked(_Payload, frozen=True, kw_only=True):
    """Payload of ``child_run_linked``, written on the parent's log."""

    record_type: ClassVar[str] = CHILD_RUN_LINKED
    tool_name: str
    tool_call_id: str
    child_run_id: str
    child_agent_id: str


class CancellationIntent(_Payload, frozen=True, kw_only=True):
    """Payload of ``runtime.cancellation_intent``: the first reason asked for [C1]."""

    record_type: ClassVar[str] = CANCELLATION_INTENT
    reason: str


class TranscriptReference(_Payload, frozen=True, kw_only=True):
    """Payload of ``transcript_messages_referenced``: the history a run starts from,
    the transcript of ``run_id`` through its record ``through``, not a copy [V1]/[V2].

    ``kind`` says what the source must be: ``next_turn`` a completed run and
    ``continuation`` the suspended predecessor, both through their last record;
    ``fork`` any run of the session, through any of its records.
    ``exclude_reasoning`` drops the thinking of the source's messages from the
    history, and of everything the source itself references, so no later turn
    can bring it back [V4].
    """

    record_type: ClassVar[str] = TRANSCRIPT_REFERENCED
    kind: Literal["next_turn", "continuation", "fork"]
    run_id: str
    through: str
    exclude_reasoning: bool = False


class TranscriptPosition(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One message of a transcript chain: message ``message`` (from 0) of the message
    array in record ``record`` of run ``run_id``."""

    run_id: str
    record: str
    message: int = 0


class WindowReplaces(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Records ``first`` through ``last`` of run ``run_id``, which a summary replaces."""

    run_id: str
    first: str
    last: str


class TranscriptWindow(_Payload, frozen=True, kw_only=True):
    """Payload of ``transcript_window_applied``: from this record on, a turn's model
    input is the transcript from ``start`` on, not what came before [V5].

    ``policy`` names the policy that cut it (for example ``last_turns:20``).
    A compaction also carries ``summary``, the text part put before the first
    kept message in place of everything before it, with its provenance: the
    records it ``replaces``, the ``model`` that wrote it and its prompt's id
    and version. A window only moves forward: its start is never before the
    start of the window it follows.
    """

    record_type: ClassVar[str] = TRANSCRIPT_WINDOW
    policy: str
    start: TranscriptPosition
    summary: str = ""
    replaces: tuple[WindowReplaces, ...] = ()
    model: str = ""
    prompt_id: str = ""
    prompt_version: str = ""
