"""InMemoryMemory: product memory held in a dict, for tests and examples."""

from __future__ import annotations

import msgspec

from agentledger.errors import RecordConflictError
from agentledger.memory.types import MemoryEvent, Snapshot

__all__ = ["InMemoryMemory"]


class InMemoryMemory:
    """A complete product-memory ``MemoryStore`` in memory; nothing survives the process."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, str], dict[str, MemoryEvent]] = {}

    async def append_events(self, agent_id: str, run_id: str, /, *events: MemoryEvent) -> None:
        stored = self._runs.setdefault((agent_id, run_id), {})
        for event in events:
            existing = stored.get(event.key)
            if existing is None:
                stored[event.key] = event
            elif existing != event:
                raise RecordConflictError(
                    run_id=run_id,
                    field=f"memory event {event.key}",
                    expected=msgspec.structs.asdict(existing),
                    got=msgspec.structs.asdict(event),
                )

    async def load_run(self, agent_id: str, run_id: str, /) -> Snapshot:
        events = tuple(self._runs.get((agent_id, run_id), {}).values())
        return Snapshot(agent_id=agent_id, run_id=run_id, events=events)
