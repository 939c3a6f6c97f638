"""Google ADK's ``DatabaseSessionService`` store, read with SQL.

Its ``sessions`` table (``app_name``, ``user_id``, ``id``, ``create_time``,
``update_time``) and ``events`` table (``event_data``: the event as JSON) hold
each session's events; ``get_session`` returns them by ``timestamp`` then ``id``,
and so are they read here. An event's content (role ``user`` or ``model``, and its
parts) becomes one message: text, thinking (``thought``), a function call (a tool
use) and a function response (a tool result); numbers keep their literal. Events
without content (state changes, transfers) and parts the transcript has no kind
for (inline data, files, code execution) are reported, not carried.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from agentledger.errors import ValidationError
from agentledger.interchange.peers.conversation import (
    Conversation,
    derived_id,
    opens_turn,
    split_turns,
)
from agentledger.interchange.peers.sources import PeerSource
from agentledger.transcript import (
    JsonNumber,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
)

__all__ = ["PEER", "adk_events_to_messages", "read_adk"]

PEER = "adk"
_DECODER = msgspec.json.Decoder(float_hook=JsonNumber)


def _time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).strip().replace(" ", "T"))


def _part(event_id: str, index: int, part: Mapping[str, Any]) -> Part | str:
    """The transcript part for one ADK part, or the name of what it is when there is none."""
    if "function_call" in part:
        call = part["function_call"]
        signature = part.get("thought_signature")
        return ToolUsePart(
            id=call.get("id") or f"{event_id}:{index}",
            name=call.get("name", ""),
            input=dict(call.get("args") or {}),
            thought_signature=signature if isinstance(signature, str) else "",
        )
    if "function_response" in part:
        answer = part["function_response"]
        return ToolResultPart(
            tool_use_id=answer.get("id") or f"{event_id}:{index}",
            content=answer.get("response"),
        )
    if isinstance(part.get("text"), str):
        if part.get("thought"):
            return ThinkingPart(text=part["text"])
        return TextPart(text=part["text"])
    kinds = sorted(k for k in part if k not in ("thought", "thought_signature", "video_metadata"))
    return ", ".join(kinds) or "an empty part"


def adk_events_to_messages(
    events: Sequence[Mapping[str, Any]], where: str = "session"
) -> tuple[list[Message], list[datetime], list[str]]:
    """The messages of ADK events (as JSON, in order), each message's time, and what was left."""
    messages: list[Message] = []
    times: list[datetime] = []
    gaps: list[str] = []
    bare = 0
    for number, event in enumerate(events):
        content = event.get("content")
        parts = content.get("parts") if isinstance(content, Mapping) else None
        if not parts:
            bare += 1
            continue
        event_id = str(event.get("id", number))
        kept: list[Part] = []
        for index, part in enumerate(parts):
            made = _part(event_id, index, part)
            if isinstance(made, str):
                gaps.append(
                    f"{where} event {event_id} part {index} ({made}): "
                    "the transcript has no part for it"
                )
            else:
                kept.append(made)
        if not kept:
            continue
        assert isinstance(content, Mapping)
        role = content.get("role") or ("user" if event.get("author") == "user" else "model")
        messages.append(Message(role="user" if role == "user" else "assistant", parts=tuple(kept)))
        stamp = event.get("timestamp")
        times.append(datetime.fromtimestamp(float(stamp or 0), UTC))
    if bare:
        gaps.append(
            f"{where}: {bare} event(s) without content (state changes, transfers) not carried"
        )
    return messages, times, gaps


async def read_adk(source: str, only: str) -> tuple[list[Conversation], list[str]]:
    """Every session of the ADK store at ``source`` (or those with id ``only``), and what
    was left behind."""
    db = PeerSource(source)
    if not {"sessions", "events"} <= await db.tables():
        raise ValidationError(
            field="source",
            expected="a Google ADK DatabaseSessionService store (tables sessions, events)",
            got=source,
        )
    columns = {row[0] for row in await db.rows(_COLUMNS[db.postgres])}
    if "event_data" not in columns:
        raise ValidationError(
            field="source",
            expected="an ADK store of the current schema (events.event_data); "
            "migrate it with ADK first",
            got=f"events with columns {', '.join(sorted(columns))}",
        )
    sql = "SELECT app_name, user_id, id, create_time, update_time FROM sessions"
    if only:
        sessions = await db.rows(sql + " WHERE id = ? ORDER BY 4, 1, 2, 3", (only,))
    else:
        sessions = await db.rows(sql + " ORDER BY 4, 1, 2, 3")
    conversations: list[Conversation] = []
    gaps: list[str] = []
    for app, user, peer_id, created, updated in sessions:
        where = f"session {app}/{user}/{peer_id}"
        data_text = "event_data::text" if db.postgres else "event_data"  # JSONB: exact numbers
        rows = await db.rows(
            f"SELECT id, {data_text}, timestamp FROM events WHERE app_name = ? AND user_id = ? "
            "AND session_id = ? ORDER BY timestamp, id",
            (app, user, peer_id),
        )
        events = []
        for event_id, data, at in rows:
            event = _DECODER.decode(data) if data else {}
            event["id"] = event_id
            if event.get("timestamp") is None:
                event["timestamp"] = _time(at).replace(tzinfo=UTC).timestamp()
            events.append(event)
        messages, times, lost = adk_events_to_messages(events, where)
        gaps.extend(lost)
        if not messages:
            gaps.append(f"{where}: no message to carry, no session made")
            continue
        starts = [t for m, t in zip(messages, times, strict=True) if opens_turn(m)]
        authors = Counter(str(e.get("author")) for e in events if e.get("author") != "user")
        agent = authors.most_common(1)[0][0] if authors else app
        conversations.append(
            Conversation(
                session_id=derived_id(PEER, str(app), str(user), str(peer_id)),
                agent_id=derived_id(PEER, str(app), agent),
                created_at=_time(created),
                ended_at=_time(updated),
                turns=tuple(split_turns(messages, [times[0], *starts[1:]] if starts else times)),
                labels={
                    "imported_from": PEER,
                    "adk_app": str(app)[:1024],
                    "adk_user": str(user)[:1024],
                    "peer_session": str(peer_id)[:1024],
                },
            )
        )
    if only and not sessions:
        gaps.append(f"session {only!r}: not in {source}")
    return conversations, gaps


_COLUMNS = {
    False: "SELECT name FROM pragma_table_info('events')",
    True: "SELECT column_name FROM information_schema.columns WHERE table_name = 'events'",
}
