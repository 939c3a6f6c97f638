"""What one connection may hold of the service before and after its request is served.

uvicorn's HTTP protocol (httptools) reads a request as it comes, for as long as
it takes, and waits as long as a client takes to read an answer. A client that
opens connections and sends nothing, trickles its headers or body a byte at a
time, or never reads its stream would hold the service's sockets and memory
for ever. :func:`guarded_protocol` is that protocol with the limits of
:class:`~agentledger.service.admission.OverloadLimits`:

- past ``max_connections`` open connections, a new one is answered 503 with
  ``Retry-After`` (an ``OverloadedError``) and closed, unread;
- a request's line and headers must arrive within ``header_timeout`` seconds
  and ``max_header_bytes`` bytes, its body within ``body_timeout`` seconds
  after them: else 408 (or 431) and the connection is closed;
- an answer whose client reads nothing for ``send_timeout`` seconds (the
  socket's buffer stays full) is cut: the connection is aborted, which frees
  what it held (a follower reconnects from its last cursor).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from agentledger.errors import AgentledgerError, OverloadedError, ValidationError
from agentledger.service.admission import Admission, OverloadLimits
from agentledger.service.error_codec import encode_error

__all__ = ["ANSWERED", "guarded_protocol"]

ANSWERED = "agentledger.answered"
"""The request scope's key under which a connection cut off while its body was read puts
(HTTP status, error) of the answer it sent itself, so the request is counted as that."""

_REASONS = {
    408: b"Request Timeout",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


def _raw_answer(status: int, error: AgentledgerError, retry_after: float | None = None) -> bytes:
    """A whole HTTP/1.1 answer carrying ``error``, that closes its connection."""
    body = encode_error(error)
    lines = [
        b"HTTP/1.1 %d %s" % (status, _REASONS[status]),
        b"content-type: application/json",
        b"content-length: %d" % len(body),
        b"connection: close",
    ]
    if retry_after is not None:
        lines.append(b"retry-after: %d" % max(1, round(retry_after)))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def guarded_protocol(limits: OverloadLimits, admission: Admission) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol class, bounded by ``limits`` (shed counted in
    ``admission``); give it to ``uvicorn.Config(http=...)``."""

    class GuardedProtocol(HttpToolsProtocol):
        """One connection, within the service's limits (see the module)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._deadline: asyncio.TimerHandle | None = None
            self._stall: asyncio.TimerHandle | None = None
            self._in_headers = True
            self._header_bytes = 0
            self._closing = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                admission.note_shed("connections")
                error = OverloadedError(
                    f"{limits.max_connections} connections open",
                    operation="connect",
                    retry_after=limits.retry_after,
                )
                self._answer_and_close(_raw_answer(503, error, limits.retry_after))
                return
            self._arm(limits.header_timeout, "headers")

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._stall is not None:
                self._stall.cancel()
                self._stall = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._closing:  # answered and closing: what else comes is read and dropped
                return
            if self._in_headers:
                self._header_bytes += len(data)
            super().data_received(data)
            if self._in_headers and self._header_bytes > limits.max_header_bytes:
                self._refuse(
                    431,
                    f"a request line and headers within {limits.max_header_bytes} bytes",
                    "larger ones",
                )

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if not self._in_headers:  # the next request on a kept-alive connection
                self._in_headers = True
                self._header_bytes = 0
                self._arm(limits.header_timeout, "headers")

        def on_headers_complete(self) -> None:
            self._in_headers = False
            self._arm(limits.body_timeout, "body")
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

        def pause_writing(self) -> None:
            super().pause_writing()
            if self._stall is None:
                self._stall = self.loop.call_later(limits.send_timeout, self._stalled)

        def resume_writing(self) -> None:
            if self._stall is not None:
                self._stall.cancel()
                self._stall = None
            super().resume_writing()

        def _arm(self, seconds: float, part: str) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, self._late, part, seconds)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _late(self, part: str, seconds: float) -> None:
            """A request's headers or body did not arrive in time."""
            self._deadline = None
            what = "request line and headers" if part == "headers" else "request body"
            self._refuse(408, f"the {what} within {seconds:g} s", "slower")

        def _refuse(self, status: int, expected: str, got: str) -> None:
            """Answer ``status`` (unless an answer began) and close the connection."""
            self._disarm()
            admission.note_shed("slow_clients" if status == 408 else "header_bytes", busy=False)
            if self.transport.is_closing():
                return
            cycle = self.cycle  # the request being read, or (in its headers) the one before
            if self._in_headers:  # busy: the answer to the one before is still going out
                busy = cycle is not None and not cycle.response_complete
            else:
                busy = cycle is not None and cycle.response_started
            answer = b""
            if not busy:
                field = "request" if status == 431 or self._in_headers else "body"
                error = ValidationError(field=field, expected=expected, got=got)
                answer = _raw_answer(status, error)
                if cycle is not None and not self._in_headers:  # the app is reading its body
                    scope: dict[str, Any] = cycle.scope  # type: ignore[assignment]
                    scope[ANSWERED] = (status, error)  # it counts what the client saw
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True  # the app reads no more of it, and sends nothing
                cycle.message_event.set()
            self._answer_and_close(answer)

        def _answer_and_close(self, answer: bytes) -> None:
            """Send ``answer``, then close once the client has read it: closed at once with
            the client's request unread, the socket would reset and could lose the answer,
            so the service stops sending, drops what the client sends, and closes when the
            client does (its end of file closes the transport) or 2 seconds later."""
            self._closing = True
            self._disarm()
            self.transport.write(answer)
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self._deadline = self.loop.call_later(2.0, self.transport.abort)

        def _stalled(self) -> None:
            """The client read nothing of its answer for ``send_timeout`` seconds."""
            self._stall = None
            admission.note_shed("stalled_readers", busy=False)
            if self.cycle is not None:
                self.cycle.disconnected = True
                self.cycle.message_event.set()
            self.transport.abort()

    return GuardedProtocol
