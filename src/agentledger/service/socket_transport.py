"""The client's end of its WebSocket to the service, on the event loop's own transport.

:class:`SocketTransport` is an :class:`asyncio.Protocol`: it sends the upgrade request,
checks the service's ``101`` answer, then frames each call (masked, as a client must)
and reads the service's frames as they arrive, handing each whole binary message to
the caller's handler at once: no reader task, queue or future between the socket and
the call waiting for it (a WebSocket client library's machinery costs more of the
client's CPU than the rest of a call; measured in ``bench/service.py``). The calls
sent during one turn of the event loop are written together when it ends. It answers
the service's pings, echoes its close, and takes fragmented messages; that is all the
protocol asks of a client that sends only binary messages (RFC 6455).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import random
import struct
from collections.abc import Callable, Mapping

from agentledger.service.socket_wire import frame_payload

_apply_mask: Callable[[bytes, bytes], bytes] | None
try:  # the C mask of the websockets library (the ``service`` extra): 0.2 us a call, not 2.5
    from websockets.speedups import apply_mask as _apply_mask
except ImportError:  # pragma: no cover (websockets without its C extension, or absent)
    _apply_mask = None

__all__ = ["HandshakeRefused", "SocketTransport"]

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_MAX_HEAD = 64 * 1024
_CONT, _TEXT, _BINARY, _CLOSE, _PING, _PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_SHORT = struct.Struct("!BBH")
_LONG = struct.Struct("!BBQ")


class HandshakeRefused(Exception):
    """The service answered the upgrade with ``status`` instead of ``101``."""

    def __init__(self, status: int) -> None:
        super().__init__(f"the WebSocket upgrade was answered {status}")
        self.status = status


def _masked(data: bytes, mask: bytes) -> bytes:
    """``data`` XOR the repeated 4-byte ``mask`` (a client's frames are masked)."""
    if _apply_mask is not None:
        return _apply_mask(data, mask)
    return _masked_here(data, mask)


def _masked_here(data: bytes, mask: bytes) -> bytes:
    """:func:`_masked` without the C extension."""
    n = len(data)
    key = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(key, "little")).to_bytes(n, "little")


def _frame(opcode: int, data: bytes) -> bytes:
    """A whole masked frame of ``opcode`` carrying ``data``."""
    n = len(data)
    mask = random.getrandbits(32).to_bytes(4, "big")
    if n < 126:
        head = bytes((0x80 | opcode, 0x80 | n))
    elif n < 65536:
        head = _SHORT.pack(0x80 | opcode, 0x80 | 126, n)
    else:
        head = _LONG.pack(0x80 | opcode, 0x80 | 127, n)
    return head + mask + _masked(data, mask)


class SocketTransport(asyncio.Protocol):
    """One WebSocket to ``path`` on ``host``, opened with ``headers``. ``opened`` is done once
    the service answered the upgrade (its error: :class:`HandshakeRefused`, or the
    connection's); then ``on_message(message)`` is called with each binary message as it
    arrives, and ``on_close(why)`` once, when the connection ends."""

    def __init__(
        self,
        host: str,
        path: str,
        headers: Mapping[str, str],
        on_message: Callable[[bytes | memoryview], None],
        on_close: Callable[[BaseException | None, int | None], None],
    ) -> None:
        self._key = base64.b64encode(os.urandom(16))
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {self._key.decode()}",
                 "Sec-WebSocket-Version: 13"]  # fmt: skip
        lines += [f"{name}: {value}" for name, value in headers.items()
                  if name.lower() not in ("content-type", "accept")]  # fmt: skip
        self._request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self._on_message = on_message
        self._on_close = on_close
        self._loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = self._loop.create_future()
        self.closed = False
        self.close_code: int | None = None
        """The close code the service sent, if it closed the connection with one."""
        self._transport: asyncio.Transport | None = None
        self._rest: list[bytes] = []
        """What arrived of a frame not yet whole, in pieces (joined once it is whole)."""
        self._have = 0
        self._need = 0
        """The bytes the frame begun in ``_rest`` needs (its header's, while unknown)."""
        self._fragments: list[bytes] | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._out: list[bytes] | None = None
        """The messages sent during this turn of the event loop, not yet written: written
        together when it ends (calls made at the same moment go in one write)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        transport.write(self._request)  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._writable.set()
        if not self.opened.done():
            self.opened.set_exception(exc or ConnectionResetError("closed before the upgrade"))
        self._on_close(exc, self.close_code)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        if self._rest:
            self._rest.append(data)
            self._have += len(data)
            if self._have < self._need:
                return
            data = b"".join(self._rest)
            self._rest = []
        if not self.opened.done() and not (data := self._handshake(data)):
            return
        end = len(data)
        start = 0
        need = 2
        while end - start >= 2 and not self.closed:
            head1 = data[start]
            bounds = frame_payload(data, start, end)
            if isinstance(bounds, int):
                need = bounds
                break
            at, length = bounds
            if data[start + 1] & 0x80:  # a service's frame is never masked
                self._fail(1002)
                return
            stop = at + length
            if stop > end:
                need = stop - start
                break
            if head1 == 0x80 | _BINARY and self._fragments is None:
                self._on_message(memoryview(data)[at:stop])  # a view: pages are large
            else:
                self._control(head1, data[at:stop])
            start = stop
            need = 2
        if start < end and not self.closed:
            self._rest = [data[start:]]
            self._have = end - start
            self._need = need

    def _handshake(self, data: bytes) -> bytes:
        """Read the answer to the upgrade; what follows it (frames already)."""
        head, found, rest = data.partition(b"\r\n\r\n")
        if not found:
            if len(data) > _MAX_HEAD:
                self._refused(400)
            else:
                self._rest = [data]
                self._have = len(data)
                self._need = self._have + 1
            return b""
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        parts = status_line.split(" ", 2)
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 400
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        accept = base64.b64encode(hashlib.sha1(self._key + _GUID).digest()).decode()
        if status != 101 or headers.get("sec-websocket-accept") != accept:
            self._refused(status if status != 101 else 400)
            return b""
        self.opened.set_result(None)
        return rest

    def _refused(self, status: int) -> None:
        self.opened.set_exception(HandshakeRefused(status))
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    def _control(self, head1: int, payload: bytes) -> None:
        """A frame that is not a whole binary message: a piece of one, a ping, a close."""
        opcode, final = head1 & 0x0F, head1 & 0x80
        if head1 & 0x70:  # reserved bits: no extension was negotiated
            self._fail(1002)
        elif opcode in (_BINARY, _TEXT) and self._fragments is None:
            self._fragments = [payload]
            if final:
                self._message(opcode)
        elif opcode == _CONT and self._fragments is not None:
            self._fragments.append(payload)
            if final:
                self._message(self._fragment_opcode)
        elif opcode == _PING:
            self._write(_frame(_PONG, payload))
        elif opcode == _PONG:
            pass
        elif opcode == _CLOSE:
            self.close_code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
            self.close()
        else:
            self._fail(1002)
        if opcode in (_BINARY, _TEXT):
            self._fragment_opcode = opcode

    _fragment_opcode = _BINARY

    def _message(self, opcode: int) -> None:
        fragments, self._fragments = self._fragments or [], None
        if opcode == _BINARY:  # a text message is none of this protocol's: left unread
            self._on_message(b"".join(fragments))

    def _fail(self, code: int) -> None:
        """Close the connection for a protocol error (``code``)."""
        self.close_code = code
        self.close(code)

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self.closed:
            self._transport.write(data)

    async def send(self, message: bytes) -> None:
        """Send one binary message.

        Raises:
            ConnectionResetError: the connection is closed.
        """
        if not self._writable.is_set():
            await self._writable.wait()
        if self.closed or self._transport is None:
            raise ConnectionResetError("the connection to the store service is closed")
        out = self._out
        if out is None:  # written once this turn of the loop ends, with the others
            out = self._out = []
            self._loop.call_soon(self._flush)
        out.append(_frame(_BINARY, message))

    def _flush(self) -> None:
        """Write the messages sent during this turn of the loop, in one write."""
        out, self._out = self._out, None
        if out and not self.closed and self._transport is not None:
            self._transport.writelines(out)

    def close(self, code: int = 1000) -> None:
        """Send a close frame (``code``) and close the connection."""
        if self._transport is not None and not self.closed:
            self._flush()
            self._transport.write(_frame(_CLOSE, code.to_bytes(2, "big")))
            self.closed = True
            self._transport.close()
