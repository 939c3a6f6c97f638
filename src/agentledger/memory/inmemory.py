"""InMemoryMemory: product memory held in a dict, for tests and examples."""

from __future__ import annotations

import threading

import msgspec

from agentledger.errors import RecordConflictError
from agentledger.memory.types import MemoryEvent, Snapshot, check_last

__all__ = ["InMemoryMemory"]


class InMemoryMemory:
    """A complete product-memory ``ProductMemory`` in memory; nothing survives the process.

    Safe to share between threads (each running its own event loop): every
    operation holds one lock and never awaits while holding it.
    """

    def __init__(self) -> None:
        self._runs: dict[tuple[str, str], dict[str, MemoryEvent]] = {}
        self._lock = threading.Lock()

    async def append_events(self, agent_id: str, run_id: str, /, *events: MemoryEvent) -> None:
        with self._lock:
            stored = self._runs.get((agent_id, run_id), {})
            added: dict[str, MemoryEvent] = {}
            for event in events:
                existing = stored.get(event.key, added.get(event.key))
                if existing is None:
                    added[event.key] = event
                elif existing != event:
                    raise RecordConflictError(
                        run_id=run_id,
                        field=f"memory event {event.key}",
                        expected=msgspec.structs.asdict(existing),
                        got=msgspec.structs.asdict(event),
                    )
            if added:  # all or nothing, like the database backends
                self._runs.setdefault((agent_id, run_id), {}).update(added)

    async def load_run(self, agent_id: str, run_id: str, /, *, last: int | None = None) -> Snapshot:
        check_last(last)
        with self._lock:
            events = tuple(self._runs.get((agent_id, run_id), {}).values())
        if last is not None:
            events = events[max(len(events) - last, 0) :] if last else ()
        return Snapshot(agent_id=agent_id, run_id=run_id, events=events)

    async def pop_event(self, agent_id: str, run_id: str, /) -> MemoryEvent | None:
        with self._lock:
            stored = self._runs.get((agent_id, run_id))
            if not stored:
                return None
            _, event = stored.popitem()  # dicts pop their last insertion
            return event

    async def delete_run(self, agent_id: str, run_id: str, /) -> int:
        with self._lock:
            return len(self._runs.pop((agent_id, run_id), {}))
