"""A submitted message's fate in words, one wording for ``agentledger runs`` and the inspector.

A run started for a message says where the message stood when it arrived
(``message #2 queued``, ``message #3 interrupted RUN``, ``message #1 started
at once``); a message still waiting says so and which turn it follows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import assert_never

from agentledger.storage.types import MessageFate, SessionMessage

__all__ = [
    "describe_fate",
    "describe_message",
    "describe_waiting",
    "message_json",
    "steered_into",
]


def describe_fate(message: SessionMessage) -> str:
    """What was decided for the message, in words: ``queued``, ``interrupted RUN``,
    ``steered into RUN`` (``taken by the run``, or ``its own turn`` when the run ended
    first) or ``started at once`` (``to start at once`` until it has)."""
    fate = message.fate
    if fate is MessageFate.QUEUED:
        return "queued"
    if fate is MessageFate.INTERRUPTING:
        return f"interrupted {message.running_run_id}"
    if fate is MessageFate.STEERING:  # a started one: the run ended before a turn took it
        if message.started:
            return f"steered into {message.running_run_id}, which ended first: its own turn"
        return f"steered into {message.running_run_id}"
    if fate is MessageFate.STEERED:
        return f"steered into {message.running_run_id}, taken by the run"
    if fate is MessageFate.START:
        return "started at once" if message.started else "to start at once"
    assert_never(fate)


def describe_message(message: SessionMessage) -> str:
    """The message's position and fate: ``message #2 queued``."""
    return f"message #{message.position} {describe_fate(message)}"


def describe_waiting(message: SessionMessage) -> str:
    """A message whose turn has not started: its position, fate and the turn it follows."""
    after = f", after {message.after}" if message.after else ""
    return f"{describe_message(message)}{after}"


def message_json(message: SessionMessage) -> dict[str, object]:
    """The message's place and fate as JSON (its text left out)."""
    return {
        "run_id": message.run_id,
        "position": message.position,
        "fate": message.fate.value,
        "if_busy": message.if_busy.value,
        "after": message.after,
        "running_run_id": message.running_run_id,
        "started": message.started,
    }


def steered_into(messages: Iterable[SessionMessage], run_id: str) -> list[SessionMessage]:
    """The steering messages run ``run_id`` took at its planner turns, in arrival order."""
    return [m for m in messages if m.fate is MessageFate.STEERED and m.running_run_id == run_id]
