"""The store's routes, answered straight from the ASGI scope: the one router of store calls.

Measured in ``bench/service.py``, Litestar's request and response objects cost
about as much server CPU per call as the SQLite append itself, while the
framework adds nothing a store call needs: a route is an exact path, the body is
read raw (within the service's body cap), the answer is bytes. :class:`StoreCalls`
answers ``POST /v1/<name>`` (one call, :func:`~agentledger.service.calls.answer_request`)
and ``POST /v1/calls`` (several, :mod:`~agentledger.service.batch`), and refuses any
other method on those paths; every other request goes on to Litestar's router.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from agentledger.errors import AgentledgerError, TransientError, ValidationError
from agentledger.service.batch import answer_calls, open_calls, stream_calls, wants_frames
from agentledger.service.calls import (
    JSON,
    MSGPACK,
    Answered,
    answer_request,
    body_too_large,
    wants_msgpack,
)
from agentledger.service.connections import ANSWERED
from agentledger.service.gate import AnsweredByConnection, json_refusal, metered
from agentledger.service.state import ServiceState
from agentledger.service.wire import CALLS_ROUTE, FRAMES, METHODS, Method

__all__ = ["StoreCalls", "wrong_method"]

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
        """Whether the request is to a store method's path or that of several."""
        return scope["type"] == "http" and _path(scope) in self.methods

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one request :meth:`route` took."""
        path = _path(scope)
        method = self.methods[path]
        scope["path_template"] = path  # names the request's trace span
        if scope.get("method") != "POST":
            refused = wrong_method(path, str(scope.get("method")))
            await _answer(send, *json_refusal(refused, 405))
            return
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
                    answered = scope.get(ANSWERED)
                    if answered is not None:  # cut off for its slowness, answered 408
                        raise AnsweredByConnection(*answered)
                    raise TransientError("the caller went away", operation=operation)
                chunk: bytes = message.get("body", b"")
                size += len(chunk)
                if size > self.cap:
                    raise body_too_large(operation, self.cap)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return chunks[0] if len(chunks) == 1 else b"".join(chunks)

        if method is not None:
            answered = await answer_request(
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
        streaming = False

        async def frames(body: bytes) -> None:
            await send({"type": "http.response.body", "body": body, "more_body": True})

        async def work() -> Answered | None:
            nonlocal streaming
            principal, calls = await open_calls(self.state, authorization, read_body)
            streaming = True
            await send({"type": "http.response.start", "status": 200, "headers": [_FRAMES_TYPE]})
            await stream_calls(self.state, principal, calls, frames)
            await send({"type": "http.response.body", "body": b""})
            return None  # answered as it went

        def refuse(error: AgentledgerError, status: int) -> Answered | None:
            if streaming:  # too late for an answer of its own: the caller sees the cut
                raise error
            return json_refusal(error, status)

        answered = await metered(self.state, "calls", work, refuse, _streamed_status)
        if answered is not None:
            await _answer(send, *answered)


def _streamed_status(answered: Answered | None) -> int:
    return 200 if answered is None else answered[0]


def _path(scope: Scope) -> str:
    """The request's path, without a trailing ``/``."""
    path: str = scope.get("path", "")
    return path[:-1] if path.endswith("/") and len(path) > 1 else path


def wrong_method(path: str, method: str) -> ValidationError:
    """The refusal of a request with a method its path does not take."""
    return ValidationError(
        field="method",
        expected=f"the method {path} takes (POST for a store method, else GET)",
        got=method,
    )


async def _answer(send: Send, status: int, answer: bytes, media_type: str) -> None:
    """Send a whole answer: its status, type and length, then its bytes."""
    headers = [_CONTENT_TYPES[media_type], (b"content-length", b"%d" % len(answer))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": answer})
