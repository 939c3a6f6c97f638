"""Publisher: what the store committed goes out to the stream and product memory, in order.

An activity publishes its records right after the store answered its write,
with nothing awaited in between, and then waits for them to be delivered.
Deliveries take turns in a first-come line (a fair lock per event loop), so
a slow sink or memory write never lets a later commit overtake an earlier
one: the stream follows the order in which this process's writes
committed, across every run it executes (children, parallel steps).

Model deltas (not records) join the same line, so a planner turn's deltas
never overtake what was recorded before its model call began. The price: a
sink that blocks holds up the publications of every run of the runtime (an
activity already waited for its own).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterable

from agentledger.memory.types import (
    AssistantMessage,
    EventSource,
    MemoryEvent,
    PlannerNote,
    ProductMemory,
    Thinking,
    ToolCall,
    ToolResult,
    UserMessage,
)
from agentledger.runtime import records as rt
from agentledger.runtime.events import ModelDelta, RunEvent, event_from_record
from agentledger.runtime.stream import StreamSink
from agentledger.storage.types import Record
from agentledger.transcript import (
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    decode_messages,
)

__all__ = ["Publisher", "memory_events"]


def memory_events(record: Record) -> list[MemoryEvent]:
    """What product memory keeps of one stored record; each event of a session's run
    names the record as its ``source`` [G2]."""
    at, turn = record.timestamp, record.turn_id
    source = (
        EventSource(session_id=record.session_id, run_id=record.run_id, record_key=record.event_key)
        if record.session_id
        else None
    )
    if record.type == rt.PLANNER_NOTE:
        note = rt.decode_payload(record, rt.NotePayload)
        return [
            PlannerNote(
                key=record.event_key,
                text=note.text,
                labels=note.labels,
                timestamp=at,
                turn_id=turn,
                source=source,
            )
        ]
    if record.type != rt.TRANSCRIPT_APPENDED:
        return []
    events: list[MemoryEvent] = []
    for m, message in enumerate(decode_messages(record.payload)):
        for p, part in enumerate(message.parts):
            key = f"{record.event_key}:{m}:{p}"
            if isinstance(part, TextPart) and part.text:
                kind = UserMessage if message.role == "user" else AssistantMessage
                events.append(
                    kind(key=key, text=part.text, timestamp=at, turn_id=turn, source=source)
                )
            elif isinstance(part, ThinkingPart) and part.text:
                events.append(
                    Thinking(key=key, text=part.text, timestamp=at, turn_id=turn, source=source)
                )
            elif isinstance(part, ToolUsePart):
                events.append(
                    ToolCall(
                        key=key,
                        tool_call_id=part.id,
                        tool_name=part.name,
                        input=part.input,
                        timestamp=at,
                        turn_id=turn,
                        source=source,
                    )
                )
            elif isinstance(part, ToolResultPart):
                events.append(
                    ToolResult(
                        key=key,
                        tool_call_id=part.tool_use_id,
                        content=part.content,
                        is_error=part.is_error,
                        timestamp=at,
                        turn_id=turn,
                        source=source,
                    )
                )
    return events


class Publisher:
    """Delivers stored records (as events and memory) and model deltas, one at a time, in
    the order they were handed over.

    Args:
        stream: where run events go (None: nowhere).
        memory: product memory fed from transcript records (None: none).
    """

    def __init__(self, stream: StreamSink | None, memory: ProductMemory | None) -> None:
        self.stream = stream
        self.memory = memory
        self._lines: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    def _line(self) -> asyncio.Lock:
        """The delivery line of the running loop (a runtime may outlive one loop)."""
        loop = asyncio.get_running_loop()
        line = self._lines.get(loop)
        if line is None:
            line = self._lines[loop] = asyncio.Lock()
        return line

    async def records(self, records: Iterable[Record]) -> None:
        """Deliver each committed record's event and memory events, after every earlier
        delivery. Call it as soon as the store answered, before awaiting anything else.

        Raises:
            CorruptRecordError: a record's payload does not fit its type.
        """
        if self.stream is None and self.memory is None:
            return
        work: list[tuple[RunEvent | None, Record, list[MemoryEvent]]] = [
            (
                event_from_record(r) if self.stream is not None else None,
                r,
                memory_events(r) if self.memory is not None else [],
            )
            for r in records
        ]
        if not work:
            return
        async with self._line():  # taken in the same step as the commit's answer
            for event, record, remembered in work:
                if event is not None and self.stream is not None:
                    await self.stream.send(event)
                if remembered and self.memory is not None:
                    await self.memory.append_events(record.agent_id, record.run_id, *remembered)

    async def delta(self, event: ModelDelta) -> None:
        """Deliver one model delta after everything handed over before it."""
        if self.stream is None:
            return
        async with self._line():
            await self.stream.send(event)
