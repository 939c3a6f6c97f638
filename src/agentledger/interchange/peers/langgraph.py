"""A LangGraph checkpointer's latest state of a thread, read with SQL and msgpack.

``SqliteSaver`` keeps each checkpoint whole in ``checkpoints.checkpoint``;
``PostgresSaver`` keeps the checkpoint as JSON and each channel's value in
``checkpoint_blobs``. Either way the latest checkpoint of the thread (root
namespace) holds the ``messages`` channel: LangChain messages, serialised by
LangGraph's msgpack serializer as ``(module, class, fields, method)`` extension
values, read here without LangGraph. Human, AI, tool and system messages become
transcript messages (consecutive tool messages one user message of tool
results); content blocks the transcript has no kind for are reported. Turn
times are those of the thread's input checkpoints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import msgspec

from agentledger.errors import ValidationError
from agentledger.interchange.peers.conversation import Conversation, derived_id, split_turns
from agentledger.interchange.peers.sources import PeerSource
from agentledger.transcript import (
    JsonNumber,
    Message,
    Part,
    Role,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
)

__all__ = ["PEER", "langchain_to_messages", "read_langgraph"]

PEER = "langgraph"
_EXT_VALUE = frozenset((0, 1, 2, 3, 4, 5))
"""LangGraph's extension codes whose third element is the value's fields or argument."""
_EXT_DELTA_SNAPSHOT = 7
_EXACT = msgspec.json.Decoder(float_hook=JsonNumber)


def _ext(code: int, data: memoryview) -> Any:
    value = msgspec.msgpack.decode(data, ext_hook=_ext)
    if code in _EXT_VALUE and isinstance(value, list) and len(value) >= 3:
        return value[2]
    if code == _EXT_DELTA_SNAPSHOT:
        return value
    return None


def _unpack(kind: str, data: bytes, where: str) -> Any:
    if kind != "msgpack":
        raise ValidationError(
            field=where,
            expected="a checkpoint serialised as msgpack (LangGraph's default serializer)",
            got=kind,
        )
    try:
        return msgspec.msgpack.decode(data, ext_hook=_ext)
    except (msgspec.DecodeError, ValueError) as e:
        raise ValidationError(field=where, expected="a msgpack checkpoint", got=str(e)) from e


def _exact(value: Any) -> Any:
    """``value`` as the transcript keeps JSON: fractional numbers as exact JsonNumbers."""
    return _EXACT.decode(msgspec.json.encode(value))


def _blocks(content: Any, where: str, gaps: list[str]) -> list[Part]:
    if isinstance(content, str):
        return [TextPart(text=content)] if content else []
    parts: list[Part] = []
    for index, block in enumerate(content or ()):
        if isinstance(block, str):
            parts.append(TextPart(text=block))
        elif isinstance(block, Mapping) and block.get("type") == "text":
            parts.append(TextPart(text=str(block.get("text", ""))))
        elif isinstance(block, Mapping) and block.get("type") in ("thinking", "reasoning"):
            text = block.get("thinking") or block.get("reasoning") or block.get("text") or ""
            parts.append(ThinkingPart(text=str(text), signature=str(block.get("signature", ""))))
        else:
            kind = block.get("type") if isinstance(block, Mapping) else type(block).__name__
            gaps.append(f"{where} block {index} ({kind}): the transcript has no part for it")
    return parts


def langchain_to_messages(
    values: Sequence[Mapping[str, Any]], where: str = "thread"
) -> tuple[list[Message], list[str]]:
    """LangChain messages (their fields, as ``model_dump()`` gives them) as transcript
    messages, and what was left behind."""
    messages: list[Message] = []
    gaps: list[str] = []
    results: list[Part] = []

    def flush() -> None:
        if results:
            messages.append(Message(role="user", parts=tuple(results)))
            results.clear()

    for index, value in enumerate(values):
        kind = value.get("type")
        at = f"{where} message {index}"
        if kind == "tool":
            content = value.get("content")
            results.append(
                ToolResultPart(
                    tool_use_id=str(value.get("tool_call_id", "")),
                    content=_exact(content),
                    is_error=value.get("status") == "error",
                )
            )
            continue
        flush()
        parts = _blocks(value.get("content"), at, gaps)
        if kind == "ai":
            for call in value.get("tool_calls") or ():
                parts.append(
                    ToolUsePart(
                        id=str(call.get("id") or f"{at}:{call.get('name')}"),
                        name=str(call.get("name", "")),
                        input=_exact(dict(call.get("args") or {})),
                    )
                )
            for bad in value.get("invalid_tool_calls") or ():
                gaps.append(
                    f"{at} invalid tool call {bad.get('name')!r}: its arguments were not JSON, "
                    "so the transcript has no tool use for it"
                )
            role: Role = "assistant"
        elif kind in ("human", "system"):
            role = "user" if kind == "human" else "system"
        else:
            gaps.append(f"{at} (type {kind!r}): the transcript has no message of that kind")
            continue
        if parts:
            messages.append(Message(role=role, parts=tuple(parts)))
        else:
            gaps.append(f"{at} ({kind}): empty, not carried")
    flush()
    return messages, gaps


def _time(value: Any) -> datetime:
    return datetime.fromisoformat(str(value))


async def _sqlite_states(db: PeerSource, thread: str) -> list[tuple[dict[str, Any], Any]]:
    """Every root checkpoint of the thread, oldest first: (checkpoint, metadata)."""
    rows = await db.rows(
        "SELECT checkpoint_id, type, checkpoint, metadata FROM checkpoints "
        "WHERE thread_id = ? AND checkpoint_ns = '' ORDER BY checkpoint_id",
        (thread,),
    )
    return [
        (_unpack(kind, blob, f"checkpoint {cid}"), _metadata(meta))
        for cid, kind, blob, meta in rows
    ]


async def _postgres_states(db: PeerSource, thread: str) -> list[tuple[dict[str, Any], Any]]:
    rows = await db.rows(
        "SELECT checkpoint_id, checkpoint, metadata FROM checkpoints "
        "WHERE thread_id = ? AND checkpoint_ns = '' ORDER BY checkpoint_id",
        (thread,),
    )
    states = [(_metadata(cp), _metadata(meta)) for _, cp, meta in rows]
    if states:
        latest = states[-1][0]
        version = (latest.get("channel_versions") or {}).get("messages")
        blobs = await db.rows(
            "SELECT type, blob FROM checkpoint_blobs WHERE thread_id = ? AND checkpoint_ns = '' "
            "AND channel = 'messages' AND version = ?",
            (thread, str(version)),
        )
        if blobs and blobs[0][1] is not None:
            kind, blob = blobs[0]
            values = dict(latest.get("channel_values") or {})
            values["messages"] = _unpack(kind, bytes(blob), "checkpoint_blobs messages")
            states[-1] = ({**latest, "channel_values": values}, states[-1][1])
    return states


def _metadata(value: Any) -> Any:
    if isinstance(value, bytes | str):
        return json.loads(value)
    return value or {}


async def read_langgraph(source: str, thread: str) -> tuple[list[Conversation], list[str]]:
    """The latest state of ``thread`` in the checkpointer at ``source``, as one conversation."""
    db = PeerSource(source)
    if "checkpoints" not in await db.tables():
        raise ValidationError(
            field="source", expected="a LangGraph checkpointer (table checkpoints)", got=source
        )
    states = await (_postgres_states if db.postgres else _sqlite_states)(db, thread)
    where = f"thread {thread!r}"
    if not states:
        return [], [f"{where}: not in {source}"]
    latest = states[-1][0]
    values = (latest.get("channel_values") or {}).get("messages")
    if not isinstance(values, list):
        raise ValidationError(
            field=where,
            expected="a latest checkpoint holding a messages channel (a list of messages)",
            got=type(values).__name__,
        )
    messages, gaps = langchain_to_messages([v for v in values if isinstance(v, Mapping)], where)
    if not messages:
        return [], [*gaps, f"{where}: no message to carry, no session made"]
    inputs = [_time(cp["ts"]) for cp, meta in states if (meta or {}).get("source") == "input"]
    first, last = _time(states[0][0]["ts"]), _time(latest["ts"])
    conversation = Conversation(
        session_id=derived_id(PEER, thread),
        agent_id=PEER,
        created_at=first,
        ended_at=last,
        turns=tuple(split_turns(messages, inputs or [first])),
        labels={"imported_from": PEER, "langgraph_thread": thread[:1024]},
    )
    return [conversation], gaps
