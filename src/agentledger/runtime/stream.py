"""Where stream events go: the ``StreamSink`` protocol and an in-memory queue sink.

Events are sent after their record is stored, and may be sent again (a
retried activity, a redelivered final event [E2]); their ``key`` is stable,
so a sink or its consumer drops keys it has already seen.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from agentledger.runtime.events import RunEvent

__all__ = ["QueueSink", "StreamSink"]


@runtime_checkable
class StreamSink(Protocol):
    """Receives every run event of a runtime."""

    async def send(self, event: RunEvent, /) -> None:
        """Deliver one event (may be a redelivery of the same key)."""
        ...

    async def close(self) -> None:
        """No more events will be sent."""
        ...


class QueueSink:
    """Keeps events in an asyncio queue, dropping redeliveries of a key already seen.

    Read with ``async for event in sink`` (ends after :meth:`close`), or look
    at :attr:`events`, everything delivered so far, in order.
    """

    def __init__(self) -> None:
        self.events: list[RunEvent] = []
        """Every distinct event received, in arrival order."""
        self.redeliveries = 0
        """How many events arrived again with a key already seen."""
        self._keys: set[str] = set()
        self._queue: asyncio.Queue[RunEvent | None] = asyncio.Queue()

    async def send(self, event: RunEvent, /) -> None:
        if event.key in self._keys:
            self.redeliveries += 1
            return
        self._keys.add(event.key)
        self.events.append(event)
        self._queue.put_nowait(event)

    async def close(self) -> None:
        self._queue.put_nowait(None)

    def for_run(self, run_id: str) -> list[RunEvent]:
        """The events received for one run, in order."""
        return [e for e in self.events if e.run_id == run_id]

    async def __aiter__(self) -> AsyncIterator[RunEvent]:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            yield item
