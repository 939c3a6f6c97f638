"""Store calls over one persistent WebSocket per client: ``/v1/socket``.

A :class:`~agentledger.service.client.StoreClient` keeps one WebSocket open to the
service and sends every call on it, so a call costs one message each way instead of
an HTTP exchange (measured in ``bench/service.py``). Each binary message from the
client is one call, the MessagePack array ``[call id, method name, request]`` (the
request is the JSON its method takes alone); each answer is the MessagePack array
``[call id, HTTP status, answer]`` (a result as MessagePack, a typed error as JSON),
sent as soon as that call is answered, in any order.

The token is checked at the upgrade (a refusal is the typed error, as an HTTP answer),
and again with every call: each call passes the same gate and is answered by the same
function as ``POST /v1/<name>`` (:func:`~agentledger.service.calls.answer_request`),
so it is authorized, scope-checked, size-capped and counted exactly as alone, and a
token the service no longer accepts is refused from its next call on. Calls are made
at once, so concurrent appends still meet in the store's group commit. A message that
is not such a call closes the connection (there is no call id to answer). A follow
(:mod:`.socket_wire`) is opened by the same function as the server-sent events of
``GET /v1/{runs|sessions}/{id}/records`` (:func:`.socket_follow.open_follow`). Calls still
running when the connection drops finish as they would alone; their answers are lost,
and the client's exact retry is answered with the original ids.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    MutableMapping,
)
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import msgspec

from agentledger.errors import OverloadedError, ValidationError
from agentledger.observability.tracing import span, tracer
from agentledger.service.admission import Ticket, overloaded_answer
from agentledger.service.auth import Principal, TokenTable
from agentledger.service.calls import Answered, answer_body
from agentledger.service.carriage import invalid_body
from agentledger.service.error_codec import encode_error, http_status
from agentledger.service.gate import gate, json_refusal, metered
from agentledger.service.socket_follow import FOLLOWS, open_follow
from agentledger.service.socket_wire import (
    CANCEL,
    DIRECT,
    ENDED,
    SOCKET_ROUTE,
    STREAMED,
    FollowRequest,
    decode_call,
    encode_answer,
)
from agentledger.service.state import ServiceState
from agentledger.service.wire import Role, method_named

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

__all__ = ["SocketCalls"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_EVERY_ROLE = frozenset(Role)
"""Who may open the socket: any token; each call is then checked against its own roles."""
_FOLLOW = msgspec.json.Decoder(FollowRequest)
_NOT_A_CALL = 1003
"""The close code of a message that is not a call (WebSocket "unsupported data")."""
_WHY = "not a [call id, method, request] MessagePack array"


def _path(scope: Scope) -> str:
    path: str = scope.get("path", "")
    return path[:-1] if path.endswith("/") and len(path) > 1 else path


class SocketCalls:
    """The WebSocket at :data:`SOCKET_ROUTE`, answered from the ASGI scope; ``route`` tells
    which connections."""

    def __init__(self, state: ServiceState, cap: int) -> None:
        self.state = state
        self.cap = cap
        self.running: set[asyncio.Task[None]] = set()
        """The calls being answered, on every connection."""

    def route(self, scope: Scope) -> bool:
        """Whether the connection is a WebSocket to :data:`SOCKET_ROUTE`."""
        return scope["type"] == "websocket" and _path(scope) == SOCKET_ROUTE

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one connection :meth:`route` took, until either side closes it."""
        if (await receive())["type"] != "websocket.connect":
            return
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
        admission = self.state.admission
        held = admission.admit_stream(SOCKET_ROUTE, authorization or "")
        if isinstance(held, OverloadedError):  # too many connections open to take one more
            headers, answer = overloaded_answer(held)
            await _refuse_upgrade(scope, send, 503, headers, answer)
            return
        try:
            if await self._upgrade(scope, authorization, send):
                await self._serve(scope, receive, send, authorization)
        finally:
            held.release()

    async def _serve(
        self, scope: Scope, receive: Receive, send: Send, authorization: str | None
    ) -> None:
        """Answer the calls and follows of an accepted connection until it closes, each
        admitted as it would be over HTTP (a call shed is answered 503 with the typed
        ``OverloadedError``, which says how long to wait).

        Where the server offers it (:data:`~.socket_wire.DIRECT`: ``agentledger
        serve``), each message is taken as it arrives; else, and for any message it
        hands on, as ``receive()`` gives it: the same :meth:`_Connection.take` either way.
        """
        connection = _Connection(self, send, authorization)
        direct = scope.get("extensions", {}).get(DIRECT)
        if direct is not None:
            direct["take"](connection.take)
        try:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    return  # websocket.disconnect
                if not connection.take(message.get("bytes") or b""):
                    await send({"type": "websocket.close", "code": _NOT_A_CALL, "reason": _WHY})
                    return
        finally:
            connection.closed = True
            for streaming in connection.follows.values():  # nobody to stream to any more
                streaming.cancel()
            if connection.running:  # calls made finish as they would alone; the store stays
                await asyncio.wait(connection.running)  # open for them

    async def _follow(
        self, call_id: int, operation: str, body: bytes, connection: _Connection
    ) -> None:
        """Stream a follow as ``GET /v1/{runs|sessions}/{id}/records`` does: its refusal,
        or its server-sent events (``STREAMED``), until the service ends it (``ENDED``)
        or the client cancels it."""

        async def work() -> AsyncIterator[bytes] | Answered:
            try:
                request = _FOLLOW.decode(body)
            except msgspec.DecodeError as e:
                raise invalid_body(e, body) from None
            return await open_follow(self.state, operation, request.id, request.after,
                                     connection.authorization)  # fmt: skip

        opened = await metered(self.state, operation, work, json_refusal, _follow_status)
        send = connection.send
        with contextlib.suppress(Exception):  # the caller is gone: it resumes from its cursor
            if isinstance(opened, tuple):
                await _send_answer(send, call_id, opened[0], opened[1])
                return
            try:
                async for events in opened:
                    await _send_answer(send, call_id, STREAMED, events)
                await _send_answer(send, call_id, ENDED, b"")
            finally:
                await cast(AsyncGenerator[bytes, None], opened).aclose()

    async def settle(self, timeout: float) -> None:  # noqa: ASYNC109 (the grace period's)
        """Wait, ``timeout`` seconds at most, for the calls being answered: a graceful
        shutdown lets them send their answers before it closes the connections."""
        if self.running:
            await asyncio.wait(set(self.running), timeout=timeout)

    async def _upgrade(self, scope: Scope, authorization: str | None, send: Send) -> bool:
        """Accept the connection if the token is known and the service serving; else
        answer the upgrade with the typed error (as HTTP, where the server allows it)."""

        async def work() -> Answered | None:
            gate(self.state, "socket", authorization, _EVERY_ROLE)
            await send({"type": "websocket.accept"})
            return None

        refused = await metered(self.state, "socket", work, json_refusal, _upgraded)
        if refused is None:
            return True
        status, answer, media_type = refused
        headers = [(b"content-type", media_type.encode()),
                   (b"content-length", b"%d" % len(answer))]  # fmt: skip
        await _refuse_upgrade(scope, send, status, headers, answer)
        return False

    async def _answer(self, name: str, body: bytes, connection: _Connection) -> tuple[int, bytes]:
        """(HTTP status, answer) of one call, as ``POST /v1/<name>`` answers it."""
        try:
            method = method_named(name)
        except ValidationError as unknown:  # answered, not counted: names are the caller's
            return http_status(unknown), encode_error(unknown)
        found = tracer()
        if found is None:
            status, answer, _ = await answer_body(self.state, method, connection.authorization,
                                                  body, self.cap, connection.principal)  # fmt: skip
            return status, answer
        # a SERVER span per call, as the HTTP routes' middleware opens
        attributes: dict[str, AttributeValue] = {
            "url.path": SOCKET_ROUTE, "http.route": method.route,
        }  # fmt: skip
        with span(found, f"SOCKET {method.route}", attributes, kind="server") as opened:
            status, answer, _ = await answer_body(self.state, method, connection.authorization,
                                                  body, self.cap, connection.principal)  # fmt: skip
            opened.set_attribute("http.response.status_code", status)
        return status, answer


class _Connection:
    """One accepted connection: its calls and follows, and the token it was opened with.

    The token's principal is looked up once and kept while the service's token table is
    the one it was found in: the service replaces its table to change its tokens, so a
    token it no longer accepts is refused from the next call on, as over HTTP."""

    def __init__(self, calls: SocketCalls, send: Send, authorization: str | None) -> None:
        self.calls = calls
        self.send = send
        self.authorization = authorization
        self.token = authorization or ""
        self.running: set[asyncio.Task[None]] = set()
        """The calls being answered (and shed calls' answers being sent)."""
        self.follows: dict[int, asyncio.Task[None]] = {}
        """The follows streaming, by call id."""
        self.closed = False
        self._tokens: TokenTable | None = None
        self._principal: Principal | None = None

    def principal(self, authorization: str | None, operation: str) -> Principal:
        """The principal of the connection's token, as the service's tokens say now.

        Raises:
            AccessDeniedError: (401) the service does not accept the token (any more).
        """
        tokens = self.calls.state.tokens
        if tokens is not self._tokens or self._principal is None:
            self._principal = tokens.authenticate(authorization, operation)
            self._tokens = tokens
        return self._principal

    def take(self, message: bytes) -> bool:
        """Start answering one message (a call, a follow, a follow's cancel); False when
        it is not one (the connection is then closed: there is no call id to answer)."""
        if self.closed:  # the connection is going: nobody to answer
            return True
        try:
            call_id, name, body = decode_call(message)
        except msgspec.DecodeError:
            return False
        if name == CANCEL:
            if (cancelled := self.follows.pop(call_id, None)) is not None:
                cancelled.cancel()
            return True
        calls = self.calls
        path = f"/v1/{name}"
        following = name in FOLLOWS
        if following:
            ticket = calls.state.admission.admit_stream(path, self.token)
        else:
            ticket = calls.state.admission.admit_call(path, self.token, len(body))
        if isinstance(ticket, OverloadedError):
            self._run(_send_quietly(self.send, call_id, 503, encode_error(ticket)))
            return True
        if following:
            task = asyncio.create_task(calls._follow(call_id, name, body, self))
            self.follows[call_id] = task
            task.add_done_callback(partial(_forget, self.follows, call_id))
            task.add_done_callback(partial(_release, ticket))
            return True
        task = asyncio.create_task(self._call(call_id, name, body))
        self.running.add(task)
        calls.running.add(task)
        task.add_done_callback(partial(self._answered, ticket))
        return True

    async def _call(self, call_id: int, name: str, body: bytes) -> None:
        """Answer one call and send the answer."""
        status, answer = await self.calls._answer(name, body, self)
        message = {"type": "websocket.send", "bytes": encode_answer(call_id, status, answer)}
        with contextlib.suppress(Exception):  # the caller is gone: its retry gets the answer
            await self.send(message)

    def _answered(self, ticket: Ticket, task: asyncio.Task[None]) -> None:
        """A call's answer is sent (or lost with the connection, or the task cancelled
        before it began): its slot is free."""
        ticket.release()
        self.running.discard(task)
        self.calls.running.discard(task)

    def _run(self, answering: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(answering)
        self.running.add(task)
        task.add_done_callback(self.running.discard)
        return task


async def _refuse_upgrade(
    scope: Scope, send: Send, status: int, headers: list[tuple[bytes, bytes]], answer: bytes
) -> None:
    """Answer a WebSocket upgrade with an HTTP refusal where the server allows it, else
    close the connection before it opens."""
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": status,
                    "headers": headers})  # fmt: skip
        await send({"type": "websocket.http.response.body", "body": answer})
    else:
        await send({"type": "websocket.close"})


def _release(ticket: Ticket, _: object) -> None:
    ticket.release()


def _forget(follows: dict[int, asyncio.Task[None]], call_id: int, _: object) -> None:
    follows.pop(call_id, None)


async def _send_answer(send: Send, call_id: int, status: int, answer: bytes) -> None:
    await send({"type": "websocket.send", "bytes": encode_answer(call_id, status, answer)})


async def _send_quietly(send: Send, call_id: int, status: int, answer: bytes) -> None:
    with contextlib.suppress(Exception):  # the caller is gone
        await _send_answer(send, call_id, status, answer)


def _follow_status(opened: AsyncIterator[bytes] | Answered) -> int:
    return opened[0] if isinstance(opened, tuple) else 200


def _upgraded(refused: Answered | None) -> int:
    return 101 if refused is None else refused[0]
