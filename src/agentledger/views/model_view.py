"""The model's view of a planner turn: the request it was sent and what it answered,
rebuilt from the run log (nothing is stored twice), and how the request differs from the
previous turn's.

What the log holds, and so what a turn's view says for sure:

- the system prompt (``prompt_rendered``: its id, version and text, once per run);
- the messages, after the history policy: the run's transcript chain cut just before the
  turn's answer, windowed as replay windows it (a turn's own ``transcript_window_applied``
  record is written with its plan, before its answer, so it is included);
- the model's name and tokens (``model_usage``; a compaction's summariser apart);
- the answer (the turn's assistant message).

What it does not hold: the tool definitions (names, descriptions, schemas), the request's
parameters (``max_tokens``, ``temperature``, ``tool_choice``, provider options) and the
provider's stop reason. A view names these in :attr:`ModelRequestView.not_recorded` instead
of guessing; :meth:`ModelTurnView.provider_request` encodes the request as a provider
adapter would, with the tool definitions and parameters a caller supplies (the adapter's
defaults otherwise, and says so).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentledger.errors import CorruptRecordError, TranscriptError, ValidationError
from agentledger.providers.model import ModelRequest, ToolDefinition
from agentledger.runtime.records import (
    MODEL_USAGE,
    PLANNER_NOTE,
    PROMPT_RENDERED,
    TRANSCRIPT_APPENDED,
    KeyKind,
    NotePayload,
    PromptPayload,
    UsagePayload,
    decode_payload,
    messages_key,
    parse_event_key,
    turn_step,
)
from agentledger.storage.payloads import TRANSCRIPT_WINDOW
from agentledger.storage.protocol import Store
from agentledger.storage.replay import MessageOrigin, replay_with_origins
from agentledger.storage.transcript_chain import decode_window, load_transcript_chain
from agentledger.storage.types import Record
from agentledger.transcript import Message, TextPart, ToolUsePart, decode_messages
from agentledger.views.timeline import turn_of

__all__ = [
    "NOT_RECORDED",
    "PROVIDERS",
    "ModelRequestView",
    "ModelResponseView",
    "ModelTurnView",
    "RequestDiff",
    "model_turn",
    "model_turns",
]

NOT_RECORDED = (
    "tool definitions (names, descriptions, input schemas)",
    "max_tokens, temperature, tool_choice and provider options",
)
"""What a request view cannot rebuild from the log."""

PROVIDERS = ("anthropic", "openai-chat", "openai-responses", "bedrock")
"""The provider adapters a request can be encoded for."""

_POLICY_NOTE = 1000
"""The note index a failed history policy writes (runtime.windows)."""


@dataclass(frozen=True)
class ModelRequestView:
    """What turn ``turn`` sent the model, as far as the log says.

    ``messages`` are after the history policy, without the system prompt (``system``);
    ``origins`` says where each is stored. ``window`` is the window that governs them (its
    record, policy and summary), None when every message was sent.
    """

    system: str
    prompt_id: str
    prompt_version: str
    model: str
    messages: tuple[Message, ...]
    origins: tuple[MessageOrigin, ...]
    window_record: str = ""
    window_policy: str = ""
    window_summary: str = ""
    policy_failed: str = ""
    """A history policy that failed this turn (every message was sent): its note."""
    not_recorded: tuple[str, ...] = NOT_RECORDED

    @property
    def sent(self) -> tuple[Message, ...]:
        """The messages as the planner hands them to the model: the system prompt first."""
        head = (Message(role="system", parts=(TextPart(text=self.system),)),)
        return (*head, *self.messages) if self.system else self.messages


@dataclass(frozen=True)
class ModelResponseView:
    """What the model answered: the turn's assistant message (None if the turn recorded
    none: it failed, or is still running) and the usage of its model calls."""

    message: Message | None
    usage: tuple[UsagePayload, ...]
    summariser: UsagePayload | None = None
    """The usage of the summariser that compacted the turn's history, if one did."""

    @property
    def stop_reason(self) -> str:
        """The stop reason, inferred: the log does not record the provider's."""
        if self.message is None:
            return ""
        if any(isinstance(p, ToolUsePart) for p in self.message.parts):
            return "tool_use"
        return "end_turn"

    @property
    def stop_reason_note(self) -> str:
        """How :attr:`stop_reason` was found, in words."""
        if self.message is None:
            return "no answer recorded"
        if self.stop_reason == "tool_use":
            return "not recorded; inferred: the answer asks for tools"
        return (
            "not recorded; inferred: the answer was taken as final "
            "(a max_tokens or stop_sequence stop would look the same)"
        )


@dataclass(frozen=True)
class RequestDiff:
    """How a turn's request differs from the previous one's (``previous`` names it: run
    and turn; "" for a run's first request with no history before it).

    ``added``: messages sent now and not then; ``cut``: messages sent then and cut now
    (by ``policy``, the history policy whose window starts this turn, "" if none did);
    ``changed``: messages sent both times but differently (a compaction's summary put
    before the first kept message)."""

    previous: str
    added: tuple[tuple[Message, MessageOrigin], ...] = ()
    cut: tuple[tuple[Message, MessageOrigin], ...] = ()
    changed: tuple[tuple[Message, MessageOrigin], ...] = ()
    policy: str = ""
    summary: str = ""
    system_changed: bool = False


@dataclass(frozen=True)
class ModelTurnView:
    """Planner turn ``turn`` of run ``run_id`` as the model saw it."""

    run_id: str
    turn: int
    phase: str
    request: ModelRequestView
    response: ModelResponseView
    diff: RequestDiff
    turns: tuple[int, ...] = field(default=())
    """Every planner turn of the run, for navigation."""

    def provider_request(
        self,
        provider: str,
        *,
        tools: Sequence[ToolDefinition] = (),
        parameters: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The request body ``provider``'s adapter encodes for this turn (one of
        :data:`PROVIDERS`). The log holds no tool definitions and no parameters: pass
        them (from the agent's registration, say), else none are sent and the adapter's
        defaults stand.

        Raises:
            ValidationError: an unknown provider, or the adapter refuses the request
                (say, Bedrock without tool definitions for a transcript with tool uses).
            TranscriptError: the transcript holds a part the provider cannot carry.
        """
        encode = _encoder(provider)
        request = ModelRequest(
            model=self.request.model or "unknown-model",
            messages=self.request.sent,
            tools=tuple(tools),
            **dict(parameters or {}),
        )
        from agentledger.providers._options import options_for

        try:
            return encode(request.messages, request.tools, options_for(request))
        except ValidationError as e:
            if e.field != "tools" or tools:
                raise
            raise ValidationError(
                field="tools",
                expected=f"tool definitions, which the run log does not hold ({provider} "
                "needs them for a transcript with tool uses): pass the agent's",
                got=[],
            ) from e


def _encoder(provider: str) -> Callable[..., dict[str, Any]]:
    if provider == "anthropic":
        from agentledger.providers import anthropic

        return anthropic.encode
    if provider == "openai-chat":
        from agentledger.providers import openai_chat

        return openai_chat.encode
    if provider == "openai-responses":
        from agentledger.providers import openai_responses

        return openai_responses.encode
    if provider == "bedrock":
        from agentledger.providers import _bedrock_encode

        return _bedrock_encode.encode
    raise ValidationError(field="provider", expected=f"one of {', '.join(PROVIDERS)}", got=provider)


async def _records(store: Store, run_id: str) -> list[Record]:
    out: list[Record] = []
    cursor = ""
    while True:
        page = await store.list_run_records(run_id, cursor=cursor)
        out.extend(page.records)
        if not page.next_cursor:
            return out
        cursor = page.next_cursor


@dataclass
class _Turn:
    phase: Record
    window: Record | None = None
    answer: Record | None = None
    usage: list[Record] = field(default_factory=list)
    summariser: Record | None = None
    policy_note: Record | None = None

    @property
    def through(self) -> str:
        """The last record before the turn's answer: its window, else its phase."""
        return (self.window or self.phase).id


def _turns(records: Sequence[Record]) -> dict[int, _Turn]:
    turns: dict[int, _Turn] = {}
    for record in records:
        key = turn_of(record)
        if key is not None:
            turns.setdefault(key.turn, _Turn(record))
    for record in records:
        key = parse_event_key(record.event_key)
        turn = turns.get(key.turn) if key.turn else None
        if turn is None:
            continue
        step = turn_step(key.turn)
        if record.type == TRANSCRIPT_WINDOW and key.kind is KeyKind.WINDOW:
            turn.window = record
        elif record.type == TRANSCRIPT_APPENDED and record.event_key in (
            messages_key(f"{step}:assistant"),
            messages_key(f"{step}:final"),
        ):
            turn.answer = record
        elif record.type == MODEL_USAGE and key.kind is KeyKind.USAGE:
            if key.history:
                turn.summariser = record
            else:
                turn.usage.append(record)
        elif record.type == PLANNER_NOTE and key.index == _POLICY_NOTE:
            turn.policy_note = record
    return turns


def _prompt(records: Sequence[Record]) -> PromptPayload | None:
    found = [r for r in records if r.type == PROMPT_RENDERED]
    return decode_payload(found[-1], PromptPayload) if found else None


async def _request(
    store: Store, run_id: str, records: Sequence[Record], turn: _Turn
) -> ModelRequestView:
    chain = await load_transcript_chain(store, run_id, windowed=True, through=turn.through)
    pairs = replay_with_origins(chain)
    prompt = _prompt([r for r in records if int(r.id) <= int(turn.phase.id)])
    usage = [decode_payload(r, UsagePayload) for r in turn.usage]
    window = chain.window
    note = ""
    if turn.policy_note is not None:
        note = decode_payload(turn.policy_note, NotePayload).text
    return ModelRequestView(
        system=prompt.text if prompt is not None else "",
        prompt_id=prompt.prompt_id if prompt is not None else "",
        prompt_version=prompt.version if prompt is not None else "",
        model=next((u.model for u in usage if u.model), ""),
        messages=tuple(m for m, _ in pairs),
        origins=tuple(o for _, o in pairs),
        window_record=f"{window.record.run_id} record {window.record.id}" if window else "",
        window_policy=window.window.policy if window else "",
        window_summary=window.window.summary if window else "",
        policy_failed=note,
    )


def _response(turn: _Turn) -> ModelResponseView:
    message = None
    if turn.answer is not None:
        try:
            decoded = decode_messages(turn.answer.payload)
        except TranscriptError as e:
            raise CorruptRecordError(
                run_id=turn.answer.run_id, record_id=turn.answer.id, reason=str(e)
            ) from e
        message = decoded[0] if decoded else None
    return ModelResponseView(
        message=message,
        usage=tuple(decode_payload(r, UsagePayload) for r in turn.usage),
        summariser=(
            decode_payload(turn.summariser, UsagePayload) if turn.summariser is not None else None
        ),
    )


def _stored(origin: MessageOrigin) -> tuple[str, str, int]:
    return (origin.run_id, origin.record_id, origin.position)


def _diff(
    now: ModelRequestView, now_turn: _Turn, before: ModelRequestView | None, previous: str
) -> RequestDiff:
    pairs = list(zip(now.messages, now.origins, strict=True))
    window = now_turn.window
    policy = summary = ""
    if window is not None:
        decoded = decode_window(window)
        policy, summary = decoded.policy, decoded.summary
    if before is None:
        return RequestDiff(previous, added=tuple(pairs), policy=policy, summary=summary)
    then = {_stored(o): m for m, o in zip(before.messages, before.origins, strict=True)}
    kept = {_stored(o) for _, o in pairs}
    added = tuple((m, o) for m, o in pairs if _stored(o) not in then)
    changed = tuple((m, o) for m, o in pairs if _stored(o) in then and then[_stored(o)] != m)
    cut = tuple(
        (m, o)
        for m, o in zip(before.messages, before.origins, strict=True)
        if _stored(o) not in kept
    )
    return RequestDiff(
        previous,
        added=added,
        cut=cut,
        changed=changed,
        policy=policy,
        summary=summary,
        system_changed=before.system != now.system,
    )


async def _previous_run_turn(
    store: Store, run_id: str
) -> tuple[str, Sequence[Record], _Turn] | None:
    """The last planner turn before run ``run_id``'s history reference cut its source (the
    turn a next turn, a continuation or a fork follows), if any."""
    chain = await load_transcript_chain(store, run_id)
    if len(chain.links) < 2:
        return None
    source = chain.links[1]
    records = [r for r in await _records(store, source.run_id) if int(r.id) <= source.through]
    turns = _turns(records)
    if not turns:
        return None
    return source.run_id, records, turns[max(turns)]


async def model_turns(store: Store, run_id: str) -> tuple[int, ...]:
    """The numbers of run ``run_id``'s planner turns, in order.

    Raises:
        RunNotFoundError: no such run.
    """
    await store.load_run(run_id)
    return tuple(sorted(_turns(await _records(store, run_id))))


async def model_turn(store: Store, run_id: str, turn: int) -> ModelTurnView:
    """Planner turn ``turn`` of run ``run_id`` as the model saw it, rebuilt from the log,
    with the diff against the previous turn's request (for a run's first turn, the last
    turn of the run its history follows, if any).

    Raises:
        RunNotFoundError: no such run.
        ValidationError: the run has no planner turn ``turn``.
        CorruptRecordError: a record the view reads is damaged.
    """
    await store.load_run(run_id)
    records = await _records(store, run_id)
    turns = _turns(records)
    found = turns.get(turn)
    if found is None:
        have = ", ".join(str(n) for n in sorted(turns)) or "none"
        raise ValidationError(
            field="turn", expected=f"a planner turn of run {run_id} (its turns: {have})", got=turn
        )
    request = await _request(store, run_id, records, found)
    before: ModelRequestView | None = None
    previous = ""
    earlier = [n for n in turns if n < turn]
    if earlier:
        n = max(earlier)
        before = await _request(store, run_id, records, turns[n])
        previous = f"{run_id} turn {n}"
    else:
        source = await _previous_run_turn(store, run_id)
        if source is not None:
            other, other_records, other_turn = source
            before = await _request(store, other, other_records, other_turn)
            previous = f"{other} turn {parse_event_key(other_turn.phase.event_key).turn}"
    return ModelTurnView(
        run_id=run_id,
        turn=turn,
        phase=parse_event_key(found.phase.event_key).name,
        request=request,
        response=_response(found),
        diff=_diff(request, found, before, previous),
        turns=tuple(sorted(turns)),
    )
