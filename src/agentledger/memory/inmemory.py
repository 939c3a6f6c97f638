"""InMemoryMemory: product memory held in a dict, for tests and examples."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import msgspec

from agentledger.errors import RecordConflictError
from agentledger.memory.types import ErasedEvent, MemoryEvent, Snapshot, check_last, tail_unchanged

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
            added = _added(run_id, stored, events)
            if added:  # all or nothing, like the database backends
                self._runs.setdefault((agent_id, run_id), {}).update(added)

    async def replace_tail(
        self,
        agent_id: str,
        run_id: str,
        /,
        replaced: Sequence[str],
        events: Sequence[MemoryEvent],
        *,
        whole: bool = False,
        archive: str | None = None,
        provenance: Sequence[MemoryEvent] = (),
        expired: Sequence[str] = (),
    ) -> bool:
        """Replace the run's latest events, if they are still ``replaced``, by ``events``.

        All or nothing, in one transaction (one lock here): when the keys of the
        run's latest ``len(replaced)`` events are ``replaced`` in order (and,
        with ``whole``, the run holds nothing else), those events leave the run
        (moved to run ``archive`` of the same agent, followed by ``provenance``,
        when ``archive`` is given), ``events`` are appended, and True is
        returned. Otherwise nothing changes and False is returned: another
        writer changed the run since ``replaced`` was read. ``expired`` names
        the run's first events, deleted with the replacement (not kept): if
        they are no longer its first events, nothing changes either.

        Raises:
            RecordConflictError: a key is stored with different content.
        """
        replaced, expired = tuple(replaced), tuple(expired)
        with self._lock:
            stored = self._runs.get((agent_id, run_id), {})
            keys = tuple(stored)
            latest = keys if whole else keys[len(keys) - len(replaced) :] if replaced else ()
            if not tail_unchanged(latest, keys[: len(expired)], replaced, expired):
                return False
            kept = [stored[key] for key in replaced]
            gone = set(replaced) | set(expired)
            remaining = {key: event for key, event in stored.items() if key not in gone}
            updated = _added(run_id, remaining, tuple(events))
            archived = self._runs.get((agent_id, archive), {}) if archive is not None else {}
            moved = _added(archive or "", archived, (*kept, *provenance))
            self._runs[(agent_id, run_id)] = {**remaining, **updated}
            if archive is not None and moved:
                self._runs[(agent_id, archive)] = {**archived, **moved}
        return True

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

    async def delete_derived(self, session_id: str, /) -> list[ErasedEvent]:
        """[G2] Delete every event whose ``source`` is in ``session_id``; each, by agent,
        run and append order."""
        with self._lock:
            erased = []
            for (agent_id, run_id), events in sorted(self._runs.items()):
                gone = [
                    k for k, e in events.items() if e.source and e.source.session_id == session_id
                ]
                for key in gone:
                    del events[key]
                erased += [ErasedEvent(agent_id=agent_id, run_id=run_id, key=k) for k in gone]
            return erased


def _added(
    run_id: str, stored: dict[str, MemoryEvent], events: tuple[MemoryEvent, ...]
) -> dict[str, MemoryEvent]:
    """The events not in ``stored`` yet, by key; a key stored differently is refused."""
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
    return added
