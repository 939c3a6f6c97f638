"""A small server-sent-events reader: lines in, ``(event, data)`` pairs out.

The clients read the raw stream themselves (not the SDK's parsed objects) so
that event data decodes with exact numbers (`loads`) and a connection cut in
the middle of a stream surfaces as the transport error it is.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import NamedTuple

__all__ = ["ServerSentEvent", "read_events"]


class ServerSentEvent(NamedTuple):
    """One event: its ``event:`` name ("" when absent) and its joined ``data:`` lines."""

    event: str
    data: str


async def read_events(lines: AsyncIterable[str]) -> AsyncIterator[ServerSentEvent]:
    """Group ``lines`` (without line endings) into events, per the SSE format.

    Comment lines (``:``) and ``id:``/``retry:`` fields are skipped; an event
    with no data is not dispatched, and neither is an event the stream ends
    before its blank line: the SSE standard drops it as incomplete.
    """
    event = ""
    data: list[str] = []
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield ServerSentEvent(event, "\n".join(data))
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
