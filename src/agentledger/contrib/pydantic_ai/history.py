"""A pydantic-ai message history kept in an agentledger store, one run per turn.

``PydanticAIHistory(store, session_id)`` loads ``list[ModelMessage]`` for
``agent.run(prompt, message_history=await history.load())`` and saves
``result.new_messages()`` with ``await history.save(...)``. Each saved turn is a
completed run of the session whose transcript starts with a reference to the
previous turn's run (not a copy) and holds the turn's own messages, so a
history costs what it adds and the store's replay of a turn is exactly the
history pydantic-ai sends. Any store works: in memory, SQLite, PostgreSQL, or
the store service through ``StoreClient``.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec
from pydantic_ai import messages as pai

from agentledger.contrib.pydantic_ai.common import ModelMessage
from agentledger.contrib.pydantic_ai.decoding import from_pydantic_ai
from agentledger.contrib.pydantic_ai.encoding import to_pydantic_ai
from agentledger.errors import SessionEndedError, SessionNotFoundError, ValidationError
from agentledger.runtime.history import HistoryContext, HistoryPolicy
from agentledger.runtime.planner import RunContext
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.protocol import AdminStore
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.storage.types import RunStart, RunStatus, StartOutcome
from agentledger.transcript import Message, encode_messages

__all__ = ["AGENT_ID", "PydanticAIHistory"]

AGENT_ID = "pydantic-ai"
"""The ``agent_id`` of the runs a `PydanticAIHistory` saves, unless it is given another."""

_MESSAGES_KEY = "pydantic-ai:messages"


def _no_models(model_id: str) -> Any:
    raise ValidationError(
        field="policy",
        expected="a history policy that cuts without asking a model (LastTurns, TokenBudget)",
        got=model_id,
        message="a pydantic-ai history has no models for a policy to ask",
    )


def _without_thinking(history: list[ModelMessage]) -> list[ModelMessage]:
    """``history`` without the model's thinking; a response left with no part is dropped."""
    kept: list[ModelMessage] = []
    for message in history:
        if isinstance(message, pai.ModelResponse):
            parts = [p for p in message.parts if not isinstance(p, pai.ThinkingPart)]
            if not parts:
                continue
            if len(parts) != len(message.parts):
                message = dataclasses.replace(message, parts=parts)
        kept.append(message)
    return kept


class PydanticAIHistory:
    """A pydantic-ai conversation kept in ``store`` as the session ``session_id``.

    Args:
        store: any agentledger store (or a ``StoreClient``); it stays the caller's.
        session_id: the conversation; created on the first `save` if it does not exist.
        agent_id: the ``agent_id`` of the runs saved (default ``"pydantic-ai"``).
        exclude_reasoning: `load` leaves out the model's thinking (it stays stored).
        policy: a history policy (``LastTurns``, ``TokenBudget``) that `load` applies:
            the history starts at the turn it cuts at, after any system prompt.
        after: the run to continue from (default: the session's latest saved turn).
            `fork` gives a history that continues from an earlier turn.

    Raises:
        ValidationError: ``session_id`` or ``agent_id`` is empty.
    """

    def __init__(
        self,
        store: AdminStore,
        session_id: str,
        *,
        agent_id: str = AGENT_ID,
        exclude_reasoning: bool = False,
        policy: HistoryPolicy | None = None,
        after: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        for name, value in (("session_id", session_id), ("agent_id", agent_id)):
            if not isinstance(value, str) or not value:
                raise ValidationError(field=name, expected="a non-empty str", got=value)
        self.store = store
        self.session_id = session_id
        self.agent_id = agent_id
        self.exclude_reasoning = exclude_reasoning
        self.policy = policy
        self.labels = dict(labels or {})
        self._head = after
        self._copy_from: str | None = None
        """A run of another session whose transcript the first turn copies (`fork`)."""

    @property
    def last_run_id(self) -> str | None:
        """The run the next turn continues from, once known (None before any turn)."""
        return self._head

    async def _latest(self) -> str | None:
        if self._head is not None:
            return self._head
        try:
            runs = await self.store.list_runs_by_session(
                self.session_id, statuses=(RunStatus.COMPLETED,)
            )
        except SessionNotFoundError:
            return None
        ours = [r for r in runs if r.agent_id == self.agent_id]
        self._head = ours[-1].run_id if ours else None
        return self._head

    async def transcript(self, *, full: bool = True) -> list[Message]:
        """The conversation as agentledger messages, oldest first (no policy applied
        with ``full``; reasoning always kept)."""
        head = await self._latest()
        if head is None:
            if self._copy_from is None:
                return []
            head = self._copy_from
        messages = await build_messages_from_run_log(self.store, head, full=full)
        return list(messages)

    async def load(self) -> list[ModelMessage]:
        """The history to pass as ``message_history`` for the next turn.

        Numbers come back as numbers; the history policy and ``exclude_reasoning``
        apply. Empty before the first turn.

        Raises:
            CorruptRecordError: a stored turn is damaged.
            TranscriptError: a stored message pydantic-ai cannot carry.
        """
        messages = await self.transcript()
        if self.policy is not None and messages:
            messages = await self._cut(messages)
        history = to_pydantic_ai(messages)
        return _without_thinking(history) if self.exclude_reasoning else history

    async def _cut(self, messages: list[Message]) -> list[Message]:
        assert self.policy is not None
        context = HistoryContext(
            run=RunContext(
                run_id=self._head or "",
                agent_id=self.agent_id,
                session_id=self.session_id,
                turn_id="",
            ),
            system="",
            tools=(),
            model_name="",
            counter=None,
            models=_no_models,
        )
        cut = await self.policy.cut(messages, context)
        if cut is None or cut.start <= 0:
            return messages
        if cut.summary:
            _no_models(cut.model)
        head = [m for m in messages[: cut.start] if m.role == "system"]
        return [*head, *messages[cut.start :]]

    async def save(self, new_messages: Sequence[ModelMessage]) -> str:
        """Save one turn (``result.new_messages()``) after the previous one; its run id.

        One run, started with a reference to the previous turn and its messages
        in one transaction, then completed.

        Raises:
            TranscriptError: a message agentledger cannot carry (nothing is saved).
            ValidationError: ``new_messages`` is empty, or the store refuses the turn.
            SessionEndedError: the session has ended (the store records the turn
                canceled, with none of its messages).
        """
        if not new_messages:
            raise ValidationError(field="new_messages", expected="at least one message", got=[])
        payload = encode_messages(from_pydantic_ai(list(new_messages)))
        previous = await self._latest()
        now = datetime.now(UTC)
        at = now.replace(microsecond=now.microsecond // 1000 * 1000)  # the store's precision
        run = RunStart(
            run_id=f"run-{uuid.uuid4().hex}",
            agent_id=self.agent_id,
            session_id=self.session_id,
            started_at=at,
            labels=self.labels,
        )
        builder = RecordBuilder(run)
        records = []
        if previous is None and self._copy_from is not None:  # a fork into this session
            copied = await build_messages_from_run_log(self.store, self._copy_from, full=True)
            records.append(
                builder.record(
                    payloads.TRANSCRIPT_SEEDED,
                    encode_messages(copied),
                    event_key="transcript:seeded",
                    at=at,
                )
            )
        if previous is not None:
            through = (await self.store.load_run(previous)).last_record_id
            records.append(builder.follows(previous, through, at=at))
        records.append(
            builder.record(payloads.TRANSCRIPT_APPENDED, payload, event_key=_MESSAGES_KEY, at=at)
        )
        await self._ensure_session(at)
        start = msgspec.structs.replace(builder.root_start(), records=tuple(records))
        started = await self.store.start_root_run(start)
        if started.outcome == StartOutcome.STOP:  # the store canceled it: nothing was saved
            raise SessionEndedError(session_id=self.session_id)
        await self.store.record_run_terminal(builder.terminal(RunStatus.COMPLETED, at=at))
        self._head = run.run_id
        return run.run_id

    async def _ensure_session(self, at: datetime) -> None:
        try:
            await self.store.load_session(self.session_id)
        except SessionNotFoundError:
            await self.store.create_session(self.session_id, created_at=at)

    def fork(self, run_id: str, *, session_id: str | None = None) -> PydanticAIHistory:
        """A history that continues from the turn ``run_id`` instead of the latest.

        In the same session (the default) its next `save` references that turn:
        the conversation branches there. With another ``session_id`` (a new
        session), its first `save` copies the conversation through that turn
        once, as the session's first run, since no reference crosses sessions;
        later turns reference each other there. This history goes on as it was.
        """
        if session_id is None or session_id == self.session_id:
            return PydanticAIHistory(
                self.store,
                self.session_id,
                agent_id=self.agent_id,
                exclude_reasoning=self.exclude_reasoning,
                policy=self.policy,
                after=run_id,
                labels=self.labels,
            )
        forked = PydanticAIHistory(
            self.store,
            session_id,
            agent_id=self.agent_id,
            exclude_reasoning=self.exclude_reasoning,
            policy=self.policy,
            labels=self.labels,
        )
        forked._copy_from = run_id
        return forked
