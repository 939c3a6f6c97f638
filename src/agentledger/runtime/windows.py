"""A turn's model input under its agent's history policy, and the records that say so [V5].

The planner turn asks the policy where this turn's input starts. A cut is
recorded as a ``transcript_window_applied`` record written with the turn's
plan (one transaction), naming the stored message it starts at; a compaction
also records its summary, what it replaces, the model and prompt version that
wrote it, and the summariser's token usage. A summary is saved with the run's
private per-call results before the planner is asked, so a retried turn uses
the same summary instead of asking the summariser again. A policy that fails
leaves the history as it was: the turn goes on with every message, and a
planner note says why.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from agentledger.engine.base import activity_attempt
from agentledger.errors import CorruptRecordError, TransientError
from agentledger.runtime import records as rt
from agentledger.runtime.history import HistoryContext, HistoryCut, TokenCounter, turn_starts
from agentledger.runtime.model_planner import ModelPlanner
from agentledger.runtime.planner import RunContext
from agentledger.runtime.registry import Registry, ResolvedAgent
from agentledger.runtime.transcript_cache import KnownTranscript
from agentledger.runtime.wire import PlanTurnInput
from agentledger.storage import payloads
from agentledger.storage.protocol import Store
from agentledger.storage.replay import MessageOrigin, position_of, with_summary
from agentledger.transcript import Message

__all__ = ["HistoryWindows", "SavedSummaries", "Windowed"]

_NOTE_INDEX = 1000
"""The index of a failed policy's note among the turn's notes (past any planner's)."""


class Windowed(NamedTuple):
    """A turn's model input under its history policy, and what to write with its plan."""

    messages: tuple[Message, ...]
    """The messages this turn sends the model."""
    records: tuple[rt.RecordSpec, ...] = ()
    """The window record (and a summary's usage), or a failed policy's note; nothing when
    the policy keeps everything."""


class SavedSummaries:
    """Where a compaction's summary waits between the summariser's answer and the turn's
    plan, so a retried turn uses the same summary instead of asking again.

    It lives in the run's private scratch (``Store.save_tool_result``, under the
    key ``turn:<n>:history``), because that scratch is exactly what a summary
    needs: keyed per run and call, the first save wins (a concurrent attempt
    adopts the kept one), never a record, and deleted by the run's suspension
    or terminal in its own transaction. A summary is the result of one call (to
    the summariser) like a tool's; a store operation of its own would be the
    same table under another name in every backend and the service. Its keys
    cannot meet a tool call's (``turn:<n>:tool:<id>:result``).
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    @staticmethod
    def key(turn: int) -> str:
        """The scratch key of turn ``turn``'s summary."""
        return rt.history_key(turn)

    async def load(self, run_id: str, turn: int) -> _Saved | None:
        """The summary saved for the turn, if any.

        Raises:
            CorruptRecordError: what is saved does not decode.
        """
        key = self.key(turn)
        data = await self.store.load_tool_result(run_id, key)
        return None if data is None else _decode(run_id, key, data)

    async def save(self, run_id: str, turn: int, saved: _Saved) -> _Saved:
        """Save the turn's summary unless one is saved; the one kept (the first save)."""
        key = self.key(turn)
        data = await self.store.save_tool_result(run_id, key, _ENCODER.encode(saved))
        return _decode(run_id, key, data)


class HistoryWindows:
    """Cuts turns' transcripts by their agents' history policies."""

    def __init__(self, store: Store, registry: Registry) -> None:
        self.store = store
        self.registry = registry
        self.summaries = SavedSummaries(store)

    async def window(
        self,
        arg: PlanTurnInput,
        context: RunContext,
        resolved: ResolvedAgent,
        transcript: KnownTranscript,
    ) -> Windowed:
        """The messages this turn sends the model, and the records to write with the
        turn's plan.

        Raises:
            TransientError: the policy's model call may succeed on retry.
            ValueError: the policy cut where no turn begins.
        """
        policy = resolved.agent.history
        messages = transcript.messages
        if policy is None or not messages:
            return Windowed(messages)
        run_id = arg.run.run_id
        origins = transcript.origins
        cut = None
        if activity_attempt() > 1:
            saved = await self.summaries.load(run_id, arg.turn)
            cut = None if saved is None else _adopt(saved, origins)
        if cut is None:
            try:
                cut = await policy.cut(messages, self._context(arg, context, resolved))
            except TransientError:
                raise
            except Exception as e:  # the history stays as it was
                text = f"history policy {policy.name} failed, every message sent: {e}"
                return Windowed(messages, (rt.RecordSpec.note(arg.turn, _NOTE_INDEX, text, {}),))
            if cut is None or cut.start == 0:
                return Windowed(messages)
            _check_cut(cut, messages)  # before its start is looked up, or saved
            if cut.summary:  # the first save wins: a concurrent attempt adopts it
                mine = _Saved(cut=cut, at=_position(origins[cut.start]))
                kept = await self.summaries.save(run_id, arg.turn, mine)
                cut = _adopt(kept, origins) or cut
        _check_cut(cut, messages)  # a saved one too: adopted by its message
        kept_messages = list(messages[cut.start :])
        if cut.summary:
            kept_messages[0] = with_summary(kept_messages[0], cut.summary)
        return Windowed(tuple(kept_messages), tuple(_records(arg.turn, policy.name, cut, origins)))

    def _context(
        self, arg: PlanTurnInput, context: RunContext, resolved: ResolvedAgent
    ) -> HistoryContext:
        planner = resolved.agent.planner
        system = arg.prompt.text if arg.prompt is not None else ""
        model_name = ""
        counter: TokenCounter | None = None
        if isinstance(planner, ModelPlanner):
            system = system or planner.system
            model_name = planner.model
            count = getattr(self.registry.model(planner.model_id), "count_tokens", None)
            counter = count if callable(count) else None
        return HistoryContext(
            run=context,
            system=system,
            tools=resolved.definitions,
            model_name=model_name,
            counter=counter,
            models=self.registry.model,
        )


class _Saved(msgspec.Struct, frozen=True, kw_only=True):
    """A summary made for a turn, saved before the planner is asked, with the stored
    message it starts at (a retry's transcript is found by that, not by an index)."""

    cut: HistoryCut
    at: payloads.TranscriptPosition


_ENCODER = msgspec.json.Encoder()


def _position(origin: MessageOrigin) -> payloads.TranscriptPosition:
    return payloads.TranscriptPosition(
        run_id=origin.run_id, record=origin.record_id, message=origin.position
    )


def _adopt(saved: _Saved, origins: tuple[MessageOrigin, ...]) -> HistoryCut | None:
    """The saved cut, placed in this turn's transcript (None if it holds no such message)."""
    index = position_of(origins, saved.at)
    return None if index is None else msgspec.structs.replace(saved.cut, start=index)


def _check_cut(cut: object, messages: tuple[Message, ...]) -> None:
    """A cut starts where a turn begins, at most the newest one's."""
    if not isinstance(cut, HistoryCut):
        raise ValueError(f"a history policy returned {type(cut).__name__}, not a HistoryCut")
    if cut.start not in turn_starts(messages):
        raise ValueError(
            f"a history policy cut at message {cut.start}, where no turn begins "
            "(a cut must start at a user message that answers no tool call)"
        )


def _records(
    turn: int, policy: str, cut: HistoryCut, origins: tuple[MessageOrigin, ...]
) -> list[rt.RecordSpec]:
    """The window record of ``cut`` and, for a summary, its model's usage."""
    replaces: list[payloads.WindowReplaces] = []
    if cut.summary:
        for o in origins[: cut.start]:
            last = replaces[-1] if replaces else None
            if last is not None and last.run_id == o.run_id:
                replaces[-1] = payloads.WindowReplaces(
                    run_id=o.run_id, first=last.first, last=o.record_id
                )
            else:
                replaces.append(
                    payloads.WindowReplaces(run_id=o.run_id, first=o.record_id, last=o.record_id)
                )
    window = payloads.TranscriptWindow(
        policy=policy,
        start=_position(origins[cut.start]),
        summary=cut.summary,
        replaces=tuple(replaces),
        model=cut.model,
        prompt_id=cut.prompt_id,
        prompt_version=cut.prompt_version,
    )
    specs = [
        rt.RecordSpec(
            type=payloads.TRANSCRIPT_WINDOW,
            event_key=rt.window_key(turn),
            payload=window.encode(),
        )
    ]
    if cut.usage is not None:
        usage = rt.UsagePayload(**msgspec.structs.asdict(cut.usage))
        specs.append(
            rt.RecordSpec(
                type=rt.MODEL_USAGE,
                event_key=rt.history_usage_key(turn),
                payload=rt.encode_json(usage),
            )
        )
    return specs


def _decode(run_id: str, key: str, data: bytes) -> _Saved:
    try:
        return msgspec.json.decode(data, type=_Saved)
    except msgspec.DecodeError as e:
        raise CorruptRecordError(
            run_id=run_id, record_id=f"tool_result:{key}", reason=str(e)
        ) from e
