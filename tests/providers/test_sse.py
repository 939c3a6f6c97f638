"""The server-sent-events reader follows the SSE standard's dispatch rules."""

from __future__ import annotations

from collections.abc import AsyncIterator

from agentledger.providers._sse import ServerSentEvent, read_events


async def _read(text: str) -> list[ServerSentEvent]:
    """Feed ``text`` as an HTTP client's ``iter_lines`` would: split at LF, CR kept."""
    *whole, rest = text.split("\n")

    async def lines() -> AsyncIterator[str]:
        for line in [*whole, rest] if rest else whole:
            yield line

    return [event async for event in read_events(lines())]


async def test_events_are_dispatched_at_blank_lines() -> None:
    stream = (
        ": a comment\n"
        "event: message_start\n"
        'data: {"a": 1}\n'
        "\n"
        "id: 7\n"
        "retry: 1000\n"
        "data: first\n"
        "data:second\n"
        "\n"
        "event: ping\n"
        "\n"
        "data\n"
        "\n"
    )
    assert await _read(stream) == [
        ServerSentEvent("message_start", '{"a": 1}'),
        ServerSentEvent("", "first\nsecond"),  # one space after the colon is dropped, no more
        ServerSentEvent("", ""),  # a bare ``data`` field is an empty data line
    ]  # the ``ping`` with no data is not dispatched


async def test_an_unfinished_event_at_the_end_of_the_stream_is_dropped() -> None:
    """A stream cut before the blank line that ends an event never delivers that event."""
    done = await _read('data: {"type": "delta"}\n\nevent: message_stop\ndata: {"type": "stop"}')
    assert done == [ServerSentEvent("", '{"type": "delta"}')]
    assert await _read('data: {"type": "stop"}\n') == []


async def test_crlf_line_endings_are_stripped() -> None:
    assert await _read("event: x\r\ndata: y\r\n\r\n") == [ServerSentEvent("x", "y")]
