"""The OpenAI Agents SDK's ``SQLiteSession`` and ``SQLAlchemySession`` stores, read with SQL.

Both keep ``agent_sessions`` (``session_id``, ``created_at``, ``updated_at``) and
``agent_messages`` (``id``, ``session_id``, ``message_data`` JSON, ``created_at``);
a conversation is its items in ``id`` order, as ``get_items()`` returns them. The
items become messages as :func:`agentledger.contrib.openai_agents.items_to_messages`
reads them (hence the ``openai-agents`` extra); a turn starts at each user message
and takes the time of that message's row.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from agentledger.errors import TranscriptError, ValidationError
from agentledger.interchange.peers.conversation import Conversation, derived_id, split_turns
from agentledger.interchange.peers.sources import PeerSource

__all__ = ["PEER", "read_openai_agents"]

PEER = "openai-agents"
_SESSIONS, _MESSAGES = "agent_sessions", "agent_messages"
_CARRIED = frozenset(("message", "function_call", "function_call_output", "reasoning"))
_ROLES = frozenset(("user", "assistant", "system", "developer"))


def _time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    text = str(value).strip().replace(" ", "T")
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return datetime(1970, 1, 1, tzinfo=UTC)


def _kept(index: int, item: Any, gaps: list[str], where: str) -> bool:
    """Whether the transcript has a part for ``item``; else why not, in ``gaps``."""
    if not isinstance(item, dict):
        gaps.append(f"{where} item {index}: not a JSON object (the SDK skips it too)")
        return False
    kind = item.get("type", "message")
    if kind not in _CARRIED or (kind == "message" and item.get("role") not in _ROLES):
        what = kind if kind != "message" else f"message of role {item.get('role')!r}"
        gaps.append(
            f"{where} item {index} ({what}): the transcript has no part for it "
            "(hosted tool calls and their results stay with the SDK)"
        )
        return False
    return True


async def read_openai_agents(source: str, only: str) -> tuple[list[Conversation], list[str]]:
    """Every conversation of the store at ``source`` (or only ``only``), and what was left."""
    from agentledger.contrib.openai_agents import items_to_messages

    db = PeerSource(source)
    missing = {_SESSIONS, _MESSAGES} - await db.tables()
    if missing:
        raise ValidationError(
            field="source",
            expected="an OpenAI Agents session store (tables agent_sessions, agent_messages)",
            got=f"{source} without {', '.join(sorted(missing))}",
        )
    sql = f"SELECT session_id, created_at, updated_at FROM {_SESSIONS}"
    sessions = await db.rows(sql + (" WHERE session_id = ?" if only else "") + " ORDER BY 2, 1",
                             (only,) if only else ())  # fmt: skip
    conversations: list[Conversation] = []
    gaps: list[str] = []
    for peer_id, created, updated in sessions:
        where = f"session {peer_id!r}"
        rows = await db.rows(
            f"SELECT message_data, created_at FROM {_MESSAGES} WHERE session_id = ? ORDER BY id",
            (peer_id,),
        )
        items: list[dict[str, Any]] = []
        times: list[datetime] = []
        for index, (data, at) in enumerate(rows):
            try:
                item = json.loads(data)
            except (TypeError, ValueError):
                gaps.append(f"{where} item {index}: not JSON (the SDK skips it too)")
                continue
            if _kept(index, item, gaps, where):
                items.append(item)
                if item.get("type", "message") == "message" and item.get("role") == "user":
                    times.append(_time(at))
        if not items:
            gaps.append(f"{where}: no item to carry, no session made")
            continue
        try:
            messages = items_to_messages(items)
        except TranscriptError as e:
            gaps.append(f"{where}: not imported: {e}")
            continue
        turns = split_turns(messages, times or [_time(created)])
        conversations.append(
            Conversation(
                session_id=derived_id(PEER, str(peer_id)),
                agent_id=PEER,
                created_at=_time(created),
                ended_at=_time(updated),
                turns=tuple(turns),
                labels={"imported_from": PEER, "peer_session": str(peer_id)[:256]},
            )
        )
    if only and not sessions:
        gaps.append(f"session {only!r}: not in {source}")
    return conversations, gaps
