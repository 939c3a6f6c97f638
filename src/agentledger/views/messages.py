"""What became of each message submitted to a session, for the session pages and a run's header.

A run started for a message shows its position and fate (queued, interrupted
a run, steered into one, started at once); messages whose turn has not started
are listed with what they say. The wording is
:mod:`agentledger.storage.message_fate`'s, the same as ``agentledger runs``.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentledger.errors import TranscriptError
from agentledger.storage.message_fate import describe_message, describe_waiting
from agentledger.storage.protocol import Store
from agentledger.storage.types import RunMeta, SessionMessage
from agentledger.transcript import TextPart, decode_message

__all__ = ["WaitingMessage", "message_fates", "run_message"]


@dataclass(frozen=True)
class WaitingMessage:
    """A message whose turn has not started."""

    run_id: str
    """The run its turn will be."""
    said: str
    """Its text ("" if it holds none)."""
    fate: str
    """Its position, fate and the turn it follows, in words."""


def _said(message: SessionMessage) -> str:
    try:
        decoded = decode_message(message.message)
    except TranscriptError:
        return ""
    return " ".join(p.text for p in decoded.parts if isinstance(p, TextPart)).strip()


async def message_fates(
    store: Store, session_id: str
) -> tuple[dict[str, str], list[WaitingMessage]]:
    """Each started message's fate, by the run started for it; the messages still waiting."""
    fates: dict[str, str] = {}
    waiting: list[WaitingMessage] = []
    for message in await store.list_session_messages(session_id):
        if message.started:
            fates[message.run_id] = describe_message(message)
        else:
            said = _said(message)
            waiting.append(WaitingMessage(message.run_id, said, describe_waiting(message)))
    return fates, waiting


async def run_message(store: Store, run: RunMeta) -> str:
    """The position and fate of the message ``run`` was started for ("" if none)."""
    if not run.session_id or run.parent_run_id:
        return ""
    for message in await store.list_session_messages(run.session_id):
        if message.run_id == run.run_id:
            return describe_message(message)
    return ""
