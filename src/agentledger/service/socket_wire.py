"""The messages of a client's WebSocket (``/v1/socket``), for both ends of it.

Each call is one binary message, the MessagePack array ``[call id, method name,
request]`` (the request is the JSON its method takes alone); each answer one message
``[call id, HTTP status, answer]`` (a result as MessagePack, a typed error as JSON).
A follow (``follow_run_records``, ``follow_session_records``, request
:class:`FollowRequest`) is answered by many messages of its call id: pieces of its
server-sent events (:data:`STREAMED`) until the service ends it (:data:`ENDED`) or the
client sends :data:`CANCEL` with that call id. Light on purpose: the client imports it
without the server's modules.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

__all__ = [
    "CANCEL",
    "DIRECT",
    "ENDED",
    "SOCKET_ROUTE",
    "STREAMED",
    "FollowRequest",
    "Take",
    "decode_answer",
    "decode_call",
    "encode_answer",
    "encode_call",
    "frame_payload",
]

SOCKET_ROUTE = "/v1/socket"
"""The path of the WebSocket carrying a client's calls."""
CANCEL = "cancel"
"""The method name of a message that ends the follow its call id started."""
STREAMED = 206
"""The status of each piece of a follow's stream (server-sent events)."""
ENDED = 204
"""The status of a follow's last message: the service ended it (it is stopping)."""

DIRECT = "agentledger.socket"
"""The ASGI scope extension through which the server (``agentledger serve``'s protocol,
:mod:`agentledger.service.socket_protocol`) hands each message to the app as it
arrives: the app calls ``scope["extensions"][DIRECT]["take"](handler)``."""

Take = Callable[[bytes], bool]
"""A handler of one message: True when it took it, False to have it go the ASGI way
(``receive()``)."""


def frame_payload(data: bytes, start: int, end: int) -> tuple[int, int] | int:
    """Where the payload of the WebSocket frame at ``data[start:end]`` begins (after its
    length, before a mask if it has one) and its length; or, while its header has not all
    arrived, how many bytes from ``start`` it needs. ``end - start`` is at least 2."""
    length = data[start + 1] & 0x7F
    at = start + 2
    if length == 126:
        if end - at < 2:
            return 4
        return at + 2, int.from_bytes(data[at : at + 2], "big")
    if length == 127:
        if end - at < 8:
            return 10
        return at + 8, int.from_bytes(data[at : at + 8], "big")
    return at, length


class FollowRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A follow on the socket: the log's id, and the cursor to go on after (none: from
    its start)."""

    id: str
    after: str = ""


_ENCODER = msgspec.msgpack.Encoder()
_CALL = msgspec.msgpack.Decoder(tuple[int, str, bytes])
_ANSWER = msgspec.msgpack.Decoder(tuple[int, int, bytes])


def encode_call(call_id: int, name: str, body: bytes) -> bytes:
    """One call's message: ``[call id, method name, request]``."""
    return _ENCODER.encode((call_id, name, body))


def decode_call(message: bytes) -> tuple[int, str, bytes]:
    """``(call id, method name, request)`` of one call's message.

    Raises:
        msgspec.DecodeError: not a call of this protocol.
    """
    return _CALL.decode(message)


def encode_answer(call_id: int, status: int, answer: bytes) -> bytes:
    """One answer's message: ``[call id, HTTP status, answer]``."""
    return _ENCODER.encode((call_id, status, answer))


def decode_answer(message: bytes | memoryview) -> tuple[int, int, bytes]:
    """``(call id, HTTP status, answer)`` of one answer's message.

    Raises:
        msgspec.DecodeError: not an answer of this protocol.
    """
    return _ANSWER.decode(message)
