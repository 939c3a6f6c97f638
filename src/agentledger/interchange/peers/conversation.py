"""A conversation read from a peer's store, made into an ended session of turns by reference.

Every importer reads its peer's store into :class:`Conversation`\\ s: the
transcript as agentledger messages, cut into turns (a turn starts at each user
message that says something of its own, not one that only carries tool
results), each with the time the peer gives it. :func:`conversation_image`
writes them, through the store's own commands, into a private
:class:`~agentledger.storage.memory.MemoryStore`: one completed run per turn,
each after the first seeded by a ``next_turn`` reference to the one before
[V1], then the session ended. The image read back from it is what the target
store imports, in one transaction. Ids are derived from the peer's, and times
are the peer's, so the same conversation always gives the same image, and
importing it again changes nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import msgspec

from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.memory import MemoryStore
from agentledger.storage.session_image import SessionImage, read_session_image
from agentledger.storage.types import RunStart, RunStatus
from agentledger.storage.validation import MAX_ID_LENGTH
from agentledger.transcript import Message, ToolResultPart, encode_messages

__all__ = [
    "Conversation",
    "Turn",
    "conversation_image",
    "derived_id",
    "opens_turn",
    "split_turns",
    "to_ms",
]


@dataclass(frozen=True)
class Turn:
    """One turn: its messages (a user message first, but in the first turn) and its time."""

    messages: tuple[Message, ...]
    at: datetime


@dataclass(frozen=True)
class Conversation:
    """One conversation of a peer, ready to become a session."""

    session_id: str
    """The agentledger session id, derived from the peer's."""
    agent_id: str
    """The agent the turns' runs belong to."""
    created_at: datetime
    ended_at: datetime
    turns: tuple[Turn, ...]
    labels: dict[str, str] = field(default_factory=dict)


def to_ms(moment: datetime) -> datetime:
    """``moment`` in UTC, cut to the millisecond (a naive time is taken as UTC)."""
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def derived_id(*parts: str) -> str:
    """``a:b:c``, or, when that is too long (or not printable) for an id, a digest of it."""
    joined = ":".join(parts)
    if len(joined) <= MAX_ID_LENGTH and joined.isprintable():
        return joined
    return f"{parts[0]}:sha256:{hashlib.sha256(joined.encode('utf-8', 'replace')).hexdigest()}"


def opens_turn(message: Message) -> bool:
    """Whether ``message`` starts a turn: a user message with more than tool results."""
    return message.role == "user" and any(
        not isinstance(part, ToolResultPart) for part in message.parts
    )


def split_turns(messages: Sequence[Message], times: Sequence[datetime]) -> list[Turn]:
    """``messages`` cut before each user message that is not only tool results.

    ``times`` gives each turn's time in order; missing ones repeat the last.
    Times never go backwards from one turn to the next.
    """
    groups: list[list[Message]] = []
    for message in messages:
        if not groups or (opens_turn(message) and any(m.role != "system" for m in groups[-1])):
            groups.append([])
        groups[-1].append(message)
    turns: list[Turn] = []
    for i, group in enumerate(groups):
        at = to_ms(times[min(i, len(times) - 1)])
        if turns and at < turns[-1].at:
            at = turns[-1].at
        turns.append(Turn(messages=tuple(group), at=at))
    return turns


async def conversation_image(conversation: Conversation) -> SessionImage:
    """The ended session ``conversation`` becomes, as the store's own commands write it."""
    store = MemoryStore()
    sid = conversation.session_id
    created = to_ms(conversation.created_at)
    await store.create_session(sid, created_at=created, labels=conversation.labels)
    previous = ""
    last = created
    for n, turn in enumerate(conversation.turns, start=1):
        at = max(turn.at, last)
        run_id = derived_id(sid, f"turn-{n}")
        builder = RecordBuilder(
            RunStart(run_id=run_id, agent_id=conversation.agent_id, session_id=sid, started_at=at),
            turn_id=run_id,
        )
        records = []
        if previous:
            through = (await store.load_run(previous)).last_record_id
            records.append(builder.follows(previous, through, at=at))
        records.append(
            builder.record(
                payloads.TRANSCRIPT_APPENDED,
                encode_messages(turn.messages),
                event_key="imported:messages",
                at=at,
            )
        )
        start = msgspec.structs.replace(builder.root_start(), records=tuple(records))
        await store.start_root_run(start)
        await store.record_run_terminal(builder.terminal(RunStatus.COMPLETED, at=at))
        previous, last = run_id, at
    await store.end_session(sid, ended_at=max(to_ms(conversation.ended_at), last))
    return await read_session_image(store, sid)
