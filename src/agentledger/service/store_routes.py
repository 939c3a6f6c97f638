"""The store's ``POST`` routes answered straight from the ASGI scope, ahead of the router.

Measured in ``bench/service.py``, Litestar's request and response objects cost
about as much server CPU per call as the SQLite append itself, while the
framework adds nothing a store call needs: a route is an exact path, the body is
read raw, the answer is bytes. :class:`StoreCalls` answers ``POST /v1/<name>``
(one call, :func:`~agentledger.service.calls.answer_call`) and ``POST /v1/calls``
(several, :func:`~agentledger.service.batch.answer_calls`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from agentledger.errors import TransientError
from agentledger.service.batch import answer_calls, open_calls, stream_calls, wants_frames
from agentledger.service.calls import (
    JSON,
    MSGPACK,
    answer_call,
    body_too_large,
    refusal,
    wants_msgpack,
)
from agentledger.service.state import ServiceState
from agentledger.service.wire import CALLS_ROUTE, FRAMES, METHODS, Method

__all__ = ["StoreCalls"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_CONTENT_TYPES = {t: (b"content-type", t.encode()) for t in (JSON, MSGPACK)}
"""The answer's ``Content-Type`` header, by media type, made once."""
_FRAMES_TYPE = (b"content-type", FRAMES.encode())


class StoreCalls:
    """``POST /v1/<name>`` and ``POST /v1/calls`` answered from the ASGI scope; ``route``
    tells which requests."""

    def __init__(self, state: ServiceState, cap: int) -> None:
        self.state = state
        self.cap = cap
        self.methods: dict[str, Method[Any, Any] | None] = {m.route: m for m in METHODS}
        self.methods[CALLS_ROUTE] = None

    def route(self, scope: Scope) -> bool:
        """Whether the request is a plain ``POST`` of a store method or of several."""
        if scope["type"] != "http" or scope.get("method") != "POST":
            return False
        return scope.get("path", "") in self.methods

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one request :meth:`route` took."""
        path: str = scope["path"]
        method = self.methods[path]
        scope["path_template"] = path  # names the request's trace span
        operation = "calls" if method is None else method.name
        authorization = accept = None
        declared = -1
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
            elif name == b"accept":
                accept = value.decode("latin-1")
            elif name == b"content-length" and value.isdigit():
                declared = int(value)

        async def read_body() -> bytes:
            if declared > self.cap:
                raise body_too_large(operation, self.cap)
            chunks, size = [], 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise TransientError("the caller went away", operation=operation)
                chunk: bytes = message.get("body", b"")
                size += len(chunk)
                if size > self.cap:
                    raise body_too_large(operation, self.cap)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return chunks[0] if len(chunks) == 1 else b"".join(chunks)

        if method is not None:
            answered = await answer_call(
                self.state, method, authorization, read_body, msgpack=wants_msgpack(accept)
            )
        elif wants_frames(accept):
            await self._stream(authorization, read_body, send)
            return
        else:
            answered = await answer_calls(self.state, authorization, read_body)
        await _answer(send, *answered)

    async def _stream(
        self, authorization: str | None, read_body: Callable[[], Awaitable[bytes]], send: Send
    ) -> None:
        """``POST /v1/calls`` answered as a stream of frames (see :mod:`.batch`); a refusal
        of the whole request as one typed error."""
        try:
            calls = await open_calls(self.state, authorization, read_body)
        except Exception as e:  # every failure is answered: see refusal
            await _answer(send, *refusal("calls", e))
            return
        await send({"type": "http.response.start", "status": 200, "headers": [_FRAMES_TYPE]})

        async def frames(body: bytes) -> None:
            await send({"type": "http.response.body", "body": body, "more_body": True})

        await stream_calls(self.state, authorization, calls, frames)
        await send({"type": "http.response.body", "body": b""})


async def _answer(send: Send, status: int, answer: bytes, media_type: str) -> None:
    """Send a whole answer: its status, type and length, then its bytes."""
    headers = [_CONTENT_TYPES[media_type], (b"content-length", b"%d" % len(answer))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": answer})
