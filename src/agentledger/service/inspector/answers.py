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
from agentledger.runtime.checkpoint import InDoubtToolCall, RunCheckpoint
from agentledger.runtime.planner import (
    Answer,
    ToolCall,
    ToolFailed,
    ToolHappened,
    ToolRetry,
)
from agentledger.storage.protocol import Store
from agentledger.storage.replay import MessageOrigin
from agentledger.transcript import Message, ToolUsePart

__all__ = ["DECISIONS", "Question", "answer_of", "fork_points", "question_of"]

DECISIONS = (
    "approve", "decline", "clarify", "results", "happened", "retry", "failed", "rerun", "end"
)  # fmt: skip
"""The answers the form posts: approve or decline a confirmation, clarify, give results;
decide a tool call in doubt (it happened, run it again, it failed); run the work of a crash
loop again, or end the run."""

BY = "the inspector"
"""Who decided a call in doubt, when the form does not say."""


@dataclass(frozen=True)
class Question:
    """What a suspended run waits for: its kind, the words asked, the calls concerned."""

    kind: str
    text: str = ""
    calls: tuple[ToolCall, ...] = field(default=())
    asked_by: str = ""
    """The run whose planner asked (the run itself, or a child run below it)."""
    in_doubt: InDoubtToolCall | None = None
    """The tool call in doubt (kind ``in_doubt``)."""
    activity: str = ""
    """Kind ``crash_loop``: the activity that kept killing its worker."""
    attempts: int = 0
    """Kind ``crash_loop``: how many times it was started without finishing."""


async def question_of(store: Store, run_id: str) -> Question | None:
    """What ``run_id`` (suspended) asks, or None when its checkpoint cannot be read."""
    try:
        stored = await store.load_run_suspension(run_id)
        checkpoint = RunCheckpoint.decode(stored.data)
    except (AgentledgerError, ValueError):
        return None
    asked = checkpoint.asked(run_id=run_id, agent_id=checkpoint.agent_id)
    return Question(asked.kind, asked.question, asked.calls, asked.run_id, asked.in_doubt,
                    asked.activity, asked.attempts)  # fmt: skip


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
            "results": "external_tools", "happened": "in_doubt", "retry": "in_doubt",
            "failed": "in_doubt", "rerun": "crash_loop", "end": "crash_loop"}  # fmt: skip
    if kind and fits[decision] != kind:
        raise ValidationError(
            field="decision", expected=f"an answer to a {kind.replace('_', ' ')}", got=decision
        )
    if decision == "rerun":
        return Answer()
    if decision == "end":
        return Answer(approved=False)
    by = form.get("by", "").strip() or BY
    if decision == "happened":
        return Answer(decision=ToolHappened(_result(form.get("result", "").strip()), by=by))
    if decision == "retry":
        return Answer(decision=ToolRetry(by=by))
    if decision == "failed":
        reason = form.get("reason", "").strip()
        if not reason:
            raise ValidationError(field="reason", expected="why the call failed", got=reason)
        return Answer(decision=ToolFailed(reason, by=by))
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
