"""uvicorn's WebSocket protocol, with a short way for the frames of a client's calls.

``agentledger serve`` gives this class to uvicorn (``uvicorn.Config(ws=...)``). It is
uvicorn's sans-I/O protocol on the ``websockets`` library, as before, for the
handshake, pings, pongs, close, fragments, compression and every error; only the
frames of the calls themselves take a shorter way, since a call's own Python work is
small enough for the per-frame work around it to show (``bench/service.py``):

- a whole, final, masked binary frame (a call: StoreClient sends nothing else) is
  unmasked and handed to the app's handler (:data:`~.socket_wire.DIRECT`) as it arrives, with no
  queue, event or task in between; any other frame is handed whole to ``websockets``,
  which answers it as it always did, and a message the handler does not take goes
  the ASGI way (``receive()``), as any message did;
- a ``websocket.send`` of bytes is framed (one header before the payload), after the
  same checks (the connection is open, the client reads), and written when the event
  loop's turn ends, with the other answers sent in it (the answers of one group commit
  go in one write); anything else the app sends is written after them.

Either way waits for frame boundaries: ``websockets`` sees only whole frames, so its
own parser stays where it expects to be. A connection that negotiated an extension
(per-message compression; StoreClient asks for none), or whose client sent frames
before its handshake was answered, is left wholly to ``websockets``.
"""

from __future__ import annotations

import struct
from typing import Any

from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

from agentledger.service.socket_wire import DIRECT, Take, frame_payload

try:
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover (websockets without its C extension)
    from websockets.utils import apply_mask

__all__ = ["SocketProtocol"]


_BINARY_FINAL = 0x82
"""The first byte of a whole binary frame (FIN, no reserved bits, opcode 2)."""
_MASKED = 0x80
_SHORT = struct.Struct("!BBH")
_LONG = struct.Struct("!BBQ")


def _header(length: int) -> bytes:
    """The header of an unmasked whole binary frame of ``length`` bytes."""
    if length < 126:
        return bytes((_BINARY_FINAL, length))
    if length < 65536:
        return _SHORT.pack(_BINARY_FINAL, 126, length)
    return _LONG.pack(_BINARY_FINAL, 127, length)


class SocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol (``websockets``, sans I/O) with the short way for the
    frames of calls described in :mod:`agentledger.service.socket_protocol`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plain = False
        """Whether the handshake is done and without extensions: frames may take the short way."""
        self._rest: list[bytes] | None = None
        """What arrived of a frame not yet whole, in pieces (joined once it is whole); None
        until frames take the short way."""
        self._have = 0
        self._need = 0
        """The bytes the frame begun in ``_rest`` needs (its header's, while unknown)."""
        self._slow = False
        """Whether ``websockets`` reads every frame from now on."""
        self._take: Take | None = None
        self._out: list[bytes] | None = None
        """The answers sent during this turn of the event loop, not yet written: written
        together when it ends (a group commit answers many calls at once)."""

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None:
            scope["extensions"][DIRECT] = {"take": self._taken_by}

    def _taken_by(self, take: Take) -> None:
        self._take = take

    def data_received(self, data: bytes) -> None:
        rest = self._rest
        if rest is None:
            if self._slow or not self._plain:
                super().data_received(data)
                return
            if self.conn.reader.buffer:  # frames sent before the handshake was answered
                self._slow = True
                super().data_received(data)
                return
            rest = []
        if rest:
            rest.append(data)
            self._have += len(data)
            if self._have < self._need:
                return
            data = b"".join(rest)
        self._rest = []
        self._frames(data)

    def _frames(self, data: bytes) -> None:
        """Read the whole frames at the start of ``data``; keep what follows them."""
        end = len(data)
        start = 0
        need = 2
        while end - start >= 2:
            if self.close_sent or self.conn.state is not State.OPEN:
                self._hand_over(data[start:])
                return
            head1 = data[start]
            head2 = data[start + 1]
            bounds = frame_payload(data, start, end)
            if isinstance(bounds, int):
                need = bounds
                break
            at, length = bounds
            if length > self.config.ws_max_size:  # websockets refuses it (1009)
                self._hand_over(data[start:])
                return
            if head2 & _MASKED:
                at += 4
            stop = at + length
            if stop > end:
                need = stop - start
                break
            if head1 == _BINARY_FINAL and head2 & _MASKED and self.conn.current_size is None:
                self._message(apply_mask(data[at:stop], data[at - 4 : at]))
            else:  # a control frame, a fragment, text, an error: websockets answers it
                super().data_received(data[start:stop])
            start = stop
            need = 2
        if start < end:
            self._rest = [data[start:]]
            self._have = end - start
            self._need = need

    def _flush(self) -> None:
        """Write the answers sent during this turn of the loop, in one write."""
        out, self._out = self._out, None
        if out and not self.disconnected and not self.transport.is_closing():
            self.transport.writelines(out)

    def shutdown(self) -> None:
        self._flush()  # the answers sent, before the close
        super().shutdown()

    def _hand_over(self, data: bytes) -> None:
        """Let ``websockets`` read everything from ``data`` on."""
        self._rest = None
        self._slow = True
        if data:
            super().data_received(data)

    def _message(self, message: bytes) -> None:
        """A whole binary message: to the app's handler, else the ASGI way."""
        take = self._take
        if take is not None and self.queue.empty() and take(message):
            return
        self.frames = [message]
        self.curr_msg_data_type = "bytes"
        self.send_receive_event_to_app()

    async def send(self, message: Any) -> None:
        """The ASGI ``send``; an app's message of bytes is framed and written at once."""
        if self._plain and message["type"] == "websocket.send":
            data = message.get("bytes")
            if data is not None and not self.close_sent:
                if not self.writable.is_set():
                    await self.writable.wait()
                if self.disconnected or self.conn.state is not State.OPEN:
                    raise ClientDisconnected
                out = self._out
                if out is None:  # written once this turn of the loop ends, with the others
                    out = self._out = []
                    self.loop.call_soon(self._flush)
                out.append(_header(len(data)))
                out.append(data)
                return
        self._flush()  # what the app sent before goes first
        await super().send(message)
        if message["type"] == "websocket.accept":
            self._plain = (
                self.handshake_complete and self.initial_response is None
                and not self.close_sent and not self.conn.extensions
            )  # fmt: skip
