"""What a suspended run asks, for the inspector's answer form, and the posted form as an Answer.

A run suspended by its own planner asks its own question; a run suspended
by a child run asks the innermost question below it (its checkpoint carries
it), and answering the run answers that question [K1]. Fork points say after
which transcript messages a branch may start: the last message of its record
that is an assistant message without a tool call, so a new user message may
follow it [V2].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from agentledger.errors import AgentledgerError, ValidationError
from agentledger.runtime.checkpoint import RunCheckpoint
from agentledger.runtime.planner import (
    Answer,
    AwaitClarification,
    AwaitConfirmation,
    ToolCall,
)
from agentledger.storage.protocol import Store
from agentledger.storage.replay import MessageOrigin
from agentledger.transcript import Message, ToolUsePart

__all__ = ["DECISIONS", "Question", "answer_of", "fork_points", "question_of"]

DECISIONS = ("approve", "decline", "clarify", "results")
"""The answers the form posts: approve or decline a confirmation, clarify, give results."""


@dataclass(frozen=True)
class Question:
    """What a suspended run waits for: its kind, the words asked, the calls concerned."""

    kind: str
    text: str = ""
    calls: tuple[ToolCall, ...] = field(default=())
    asked_by: str = ""
    """The run whose planner asked (the run itself, or a child run below it)."""


async def question_of(store: Store, run_id: str) -> Question | None:
    """What ``run_id`` (suspended) asks, or None when its checkpoint cannot be read."""
    try:
        stored = await store.load_run_suspension(run_id)
        checkpoint = RunCheckpoint.decode(stored.data)
    except (AgentledgerError, ValueError):
        return None
    if checkpoint.awaiting is None:
        inner = checkpoint.children[0].awaiting
        return Question(inner.kind, inner.question, inner.calls, inner.run_id)
    asked = checkpoint.awaiting
    if isinstance(asked, AwaitClarification):
        return Question("clarification", asked.question, (), run_id)
    if isinstance(asked, AwaitConfirmation):
        return Question("confirmation", asked.prompt, asked.calls, run_id)
    return Question("external_tools", "", asked.calls, run_id)


def _result(text: str) -> Any:
    """A posted tool result: JSON when it reads as JSON, else the text itself."""
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text


def answer_of(form: dict[str, str], question: Question | None) -> Answer:
    """The Answer a posted answer form gives.

    Raises:
        ValidationError: an unknown decision, one that does not answer what the
            run waits for, a clarification without text, or results for no call.
    """
    decision = form.get("decision", "")
    text = form.get("text", "").strip()
    if decision not in DECISIONS:
        raise ValidationError(field="decision", expected=" or ".join(DECISIONS), got=decision)
    kind = question.kind if question is not None else ""
    fits = {"approve": "confirmation", "decline": "confirmation", "clarify": "clarification",
            "results": "external_tools"}  # fmt: skip
    if kind and fits[decision] != kind:
        raise ValidationError(
            field="decision", expected=f"an answer to a {kind.replace('_', ' ')}", got=decision
        )
    if decision == "approve":
        return Answer.approve(text)
    if decision == "decline":
        return Answer.deny(text)
    if decision == "clarify":
        if not text:
            raise ValidationError(field="text", expected="your answer to the question", got=text)
        return Answer(text=text)
    results = {
        key.removeprefix("result:"): _result(value.strip())
        for key, value in form.items()
        if key.startswith("result:") and value.strip()
    }
    if not results:
        raise ValidationError(
            field="results", expected="a result for at least one pending call", got="none"
        )
    return Answer(text=text, tool_results=results)


def fork_points(
    messages: Sequence[Message], origins: Sequence[MessageOrigin]
) -> dict[int, MessageOrigin]:
    """By message index, where a fork after that message cuts: the message's record."""
    points: dict[int, MessageOrigin] = {}
    for index, (message, origin) in enumerate(zip(messages, origins, strict=True)):
        last_of_record = index + 1 == len(origins) or origins[index + 1] != origin
        calls = any(isinstance(part, ToolUsePart) for part in message.parts)
        if last_of_record and message.role == "assistant" and not calls:
            points[index] = origin
    return points
