"""Product memory (DESIGN section 6): the per-run transcript events a product keeps.

Distinct from the runtime store: ``agentledger.memory.ProductMemory`` is the
product-memory protocol (``MemoryStore`` before: a deprecated alias for one
release), while ``agentledger.storage.MemoryStore`` is the in-process backend
of the runtime store. Implementations here are ``InMemoryMemory``,
``SQLiteMemory`` and (with the postgres extra)
``agentledger.memory.postgres.PostgresMemory``; ``Runtime(memory=...)`` feeds one.
"""

from agentledger.memory.inmemory import InMemoryMemory
from agentledger.memory.sqlite import SQLiteMemory
from agentledger.memory.types import (
    AssistantMessage,
    ErasedEvent,
    EventSource,
    FrameworkItem,
    MemoryEvent,
    PlannerNote,
    ProductMemory,
    Snapshot,
    Thinking,
    ToolCall,
    ToolResult,
    UserMessage,
)

__all__ = [
    "AssistantMessage",
    "ErasedEvent",
    "EventSource",
    "FrameworkItem",
    "InMemoryMemory",
    "MemoryEvent",
    "PlannerNote",
    "ProductMemory",
    "SQLiteMemory",
    "Snapshot",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "UserMessage",
]


def __getattr__(name: str) -> object:
    """``MemoryStore``: the old name of :class:`ProductMemory` (deprecated)."""
    if name == "MemoryStore":
        from agentledger.memory import types

        return types.MemoryStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
