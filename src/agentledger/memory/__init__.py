"""Product memory (DESIGN section 6): the per-run transcript events a product keeps.

Distinct from the runtime store: ``agentledger.memory.MemoryStore`` is the
product-memory protocol, while ``agentledger.storage.MemoryStore`` is the
in-process backend of the runtime store. Implementations here are
``InMemoryMemory``, ``SQLiteMemory`` and (with the postgres extra)
``agentledger.memory.postgres.PostgresMemory``; ``Runtime(memory=...)`` feeds one.
"""

from agentledger.memory.inmemory import InMemoryMemory
from agentledger.memory.sqlite import SQLiteMemory
from agentledger.memory.types import (
    AssistantMessage,
    FrameworkItem,
    MemoryEvent,
    MemoryStore,
    PlannerNote,
    Snapshot,
    Thinking,
    ToolCall,
    ToolResult,
    UserMessage,
)

__all__ = [
    "AssistantMessage",
    "FrameworkItem",
    "InMemoryMemory",
    "MemoryEvent",
    "MemoryStore",
    "PlannerNote",
    "SQLiteMemory",
    "Snapshot",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "UserMessage",
]
