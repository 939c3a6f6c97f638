"""Product memory's vocabulary: the events of a run, a run's snapshot, the protocol.

Product memory is the transcript the product shows, searches, retains and
deletes (DESIGN section 6). It is a second owner of data, apart from the
runtime store: the runtime feeds it when configured, and the product decides
how long it lives. Events carry a stable ``key`` so feeding them again (a
retried activity) changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol, TypeAlias, runtime_checkable

import msgspec

from agentledger.errors import ValidationError

__all__ = [
    "AssistantMessage",
    "ErasedEvent",
    "EventSource",
    "FrameworkItem",
    "MemoryEvent",
    "PlannerNote",
    "ProductMemory",
    "Snapshot",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "UserMessage",
]


class EventSource(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """[G2] The stored record a memory event was derived from: its session, its run, and
    its event key (a record's key is unique in its run, and known before the store
    answers, when the runtime feeds product memory)."""

    session_id: str
    run_id: str
    record_key: str


class ErasedEvent(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """[G2] One memory event deleted because its source session was erased."""

    agent_id: str
    run_id: str
    key: str


class _Event(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="type"
):
    """Fields of every memory event: a stable key, when it happened, which turn, and
    (``source``, when the runtime fed it from a run of a session) the record it came from."""

    key: str
    timestamp: datetime
    turn_id: str = ""
    source: EventSource | None = None


class UserMessage(_Event, frozen=True, kw_only=True, tag="user_message"):
    """Text the user wrote."""

    text: str


class AssistantMessage(_Event, frozen=True, kw_only=True, tag="assistant_message"):
    """Text the assistant wrote."""

    text: str


class ToolCall(_Event, frozen=True, kw_only=True, tag="tool_call"):
    """A tool call the assistant made."""

    tool_call_id: str
    tool_name: str
    input: dict[str, Any]


class ToolResult(_Event, frozen=True, kw_only=True, tag="tool_result"):
    """What a tool call returned (error text when ``is_error``)."""

    tool_call_id: str
    content: Any
    is_error: bool = False


class PlannerNote(_Event, frozen=True, kw_only=True, tag="planner_note"):
    """A planner's remark."""

    text: str
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class Thinking(_Event, frozen=True, kw_only=True, tag="thinking"):
    """Model reasoning text (not user-facing; kept for review)."""

    text: str


class FrameworkItem(_Event, frozen=True, kw_only=True, tag="framework_item"):
    """An item in another agent framework's own format, kept verbatim.

    For adapters (``agentledger.contrib``) whose framework owns the item shape,
    e.g. an OpenAI Agents SDK session item: storing it as written is the only
    way to hand it back exactly. ``framework`` names the format.
    """

    framework: str
    item: dict[str, Any]


MemoryEvent: TypeAlias = (
    UserMessage | AssistantMessage | ToolCall | ToolResult | PlannerNote | Thinking | FrameworkItem
)
"""Any product-memory event (tagged by ``type`` in JSON)."""


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """Everything product memory holds for one run, in append order."""

    agent_id: str
    run_id: str
    events: tuple[MemoryEvent, ...]


def tail_unchanged(
    latest: Sequence[str], earliest: Sequence[str], replaced: Sequence[str], expired: Sequence[str]
) -> bool:
    """Whether a run's events are still what a compaction read, so its replacement may go
    ahead: its ``latest`` keys are ``replaced`` (in order), its ``earliest`` are ``expired``,
    and no key is in both."""
    return (
        tuple(latest) == tuple(replaced)
        and tuple(earliest) == tuple(expired)
        and not set(expired) & set(replaced)
    )


def check_last(last: int | None) -> None:
    """Refuse a ``last`` that is not None or an int >= 0 (shared by every backend)."""
    if last is not None and (type(last) is not int or last < 0):
        raise ValidationError(field="last", expected="None or an int >= 0", got=last)


@runtime_checkable
class ProductMemory(Protocol):
    """Product memory: per-run transcript events (not the runtime store).

    Called ``MemoryStore`` before, a name kept as a deprecated alias for one
    release; not to be confused with :class:`agentledger.storage.MemoryStore`, the
    in-process backend of the runtime store; implementations here are
    :class:`~agentledger.memory.InMemoryMemory` and
    :class:`~agentledger.memory.SQLiteMemory`.

    The three backends here also offer ``replace_tail`` (not part of the
    protocol: an adapter checks for it), which replaces a run's latest events
    in one transaction if no other writer changed them, keeping the replaced
    ones in another run (see :meth:`~agentledger.memory.InMemoryMemory.replace_tail`).
    They also offer ``delete_derived(session_id)`` (not part of the protocol either):
    it deletes every event whose ``source`` is in that session and lists each, for
    erasing what a purged session left in product memory.
    """

    async def append_events(self, agent_id: str, run_id: str, /, *events: MemoryEvent) -> None:
        """Add events to a run; a key already stored with the same content is skipped.

        Raises:
            RecordConflictError: a key is stored with different content.
        """
        ...

    async def load_run(self, agent_id: str, run_id: str, /, *, last: int | None = None) -> Snapshot:
        """The run's events in append order (none if nothing was stored).

        With ``last``, only the latest ``last`` events (still in append order).

        Raises:
            ValidationError: ``last`` is negative.
        """
        ...

    async def pop_event(self, agent_id: str, run_id: str, /) -> MemoryEvent | None:
        """Remove and return the run's latest event (None if it has none).

        Atomic: concurrent callers never receive the same event.
        """
        ...

    async def delete_run(self, agent_id: str, run_id: str, /) -> int:
        """Delete every event of the run; returns how many were deleted."""
        ...


def __getattr__(name: str) -> object:
    """``MemoryStore``: the old name of :class:`ProductMemory`, with a DeprecationWarning."""
    if name == "MemoryStore":
        import warnings

        warnings.warn(
            "agentledger.memory.MemoryStore is now ProductMemory (the old name, easily "
            "confused with agentledger.storage.MemoryStore, goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return ProductMemory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
