"""One store call over HTTP: authenticate, authorize, decode, scope-check, call, answer [S1].

:func:`answer_call` is the whole of a ``POST /v1/<name>`` call, free of any
web framework: it takes the ``Authorization`` header and a way to read the
body, and gives the HTTP status and the JSON answer (the result or the typed
error). :class:`StoreCalls` runs it straight from the ASGI scope, ahead of the
framework's router: measured in ``bench/service.py``, Litestar's request and
response objects cost about as much server CPU per call as the SQLite append
itself, while the framework adds nothing a store call needs (a route is an
exact path, the body is read raw, the answer is bytes).

A caller that sends ``Accept: application/msgpack`` (StoreClient does) gets a
result as MessagePack instead of JSON: bytes travel as they are, not as base64,
and a page of records decodes in about half the time. Requests and typed
errors are JSON either way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import msgspec

from agentledger.errors import AccessDeniedError, AgentledgerError, TransientError, ValidationError
from agentledger.service.auth import Principal
from agentledger.service.carriage import invalid_body
from agentledger.service.error_codec import encode_error, http_status
from agentledger.service.scope import check_scope, check_stateless
from agentledger.service.wire import METHODS, Method, RecordBatch, Role, check_entries
from agentledger.storage.types import Record

if TYPE_CHECKING:
    from agentledger.service.app import ServiceState

__all__ = [
    "JSON",
    "MSGPACK",
    "StoreCalls",
    "answer_call",
    "authorize",
    "body_too_large",
    "wants_msgpack",
]

_log = logging.getLogger("agentledger.service")
_ENCODER = msgspec.json.Encoder()
_MSGPACK_ENCODER = msgspec.msgpack.Encoder()
JSON = "application/json"
MSGPACK = "application/msgpack"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def authorize(
    state: ServiceState, operation: str, authorization: str | None, roles: frozenset[Role]
) -> Principal:
    """The caller's principal, if the service is serving and its role may call ``operation``.

    Raises:
        TransientError: the service is shutting down.
        AccessDeniedError: (401) no or an unknown token; (403) a role that may not call it.
    """
    if state.stopping:
        raise TransientError("the service is shutting down", operation=operation)
    principal = state.tokens.authenticate(authorization, operation)
    if principal.role not in roles:
        raise AccessDeniedError(
            operation=operation,
            status=403,
            reason=f"a {principal.role} token may not call {operation}",
        )
    return principal


def body_too_large(operation: str, cap: int) -> ValidationError:
    """The refusal of a request body past the service's cap."""
    return ValidationError(
        field="body",
        expected=f"a {operation} request of at most {cap} bytes (this service's limit)",
        got="a larger body",
    )


def wants_msgpack(accept: str | None) -> bool:
    """Whether an ``Accept`` header asks for MessagePack results."""
    return accept is not None and MSGPACK in accept


async def answer_call(
    state: ServiceState,
    method: Method[Any, Any],
    authorization: str | None,
    read_body: Callable[[], Awaitable[bytes]],
    *,
    msgpack: bool = False,
) -> tuple[int, bytes, str]:
    """(HTTP status, answer, its media type) of one store call; the body is read once the
    caller is authenticated and authorized, and every error is answered as its typed
    error (JSON). ``msgpack``: the result as MessagePack."""
    started = time.perf_counter()
    state.metrics.in_flight += 1
    try:
        principal = authorize(state, method.name, authorization, method.roles)
        body = await read_body()
        check_entries(body, method.name)
        try:
            call = method.decoder.decode(body)
        except msgspec.DecodeError as e:
            raise invalid_body(e, body, method.prefix) from None
        if principal.labels and method.narrow is not None:
            call = method.narrow(call, principal.labels)
        if principal.labels:  # what a scoped token may touch, and hear of the rest [S4]
            check_stateless(method.plan, call, state.limits)
            await check_scope(state.store, principal, method.name, method.subjects(call))
        result = await method.call(state.store, call)
        if method.writes and state.notifier.waiting:
            state.notifier.notify(_logs_written(call))
        if msgpack:
            answered = (200, _MSGPACK_ENCODER.encode(result), MSGPACK)
        else:
            answered = (200, _ENCODER.encode(result), JSON)
    except AgentledgerError as e:
        answered = (http_status(e), encode_error(e), JSON)
    except Exception:
        _log.exception("store service: %s failed", method.name)
        failure = TransientError("internal error in the store service", operation=method.name)
        answered = (500, encode_error(failure), JSON)
    finally:
        state.metrics.in_flight -= 1
    state.metrics.observe(method.name, answered[0], time.perf_counter() - started)
    return answered


def _logs_written(call: object) -> list[str] | None:
    """The follow keys of the logs an ordinary append changes; None (every log) for any
    other write, whose effects on other runs' logs the store decides."""
    if isinstance(call, Record):
        return [f"run:{call.run_id}", f"session:{call.session_id}"]
    if isinstance(call, RecordBatch):
        runs = {(r.run_id, r.session_id) for r in call.records}
        return [key for run, session in runs for key in (f"run:{run}", f"session:{session}")]
    return None


_CONTENT_TYPES = {t: (b"content-type", t.encode()) for t in (JSON, MSGPACK)}
"""The answer's ``Content-Type`` header, by media type, made once."""


class StoreCalls:
    """``POST /v1/<name>`` answered from the ASGI scope; ``route`` tells which requests."""

    def __init__(self, state: ServiceState, cap: int) -> None:
        self.state = state
        self.cap = cap
        self.methods = {m.route: m for m in METHODS}

    def route(self, scope: Scope) -> Method[Any, Any] | None:
        """The store method a request calls, if it is a plain ``POST`` of one."""
        if scope["type"] != "http" or scope.get("method") != "POST":
            return None
        return self.methods.get(scope.get("path", ""))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.answer(self.methods[scope["path"]], scope, receive, send)

    async def answer(
        self, method: Method[Any, Any], scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Answer one call of ``method`` (what :meth:`route` found for this request)."""
        scope["path_template"] = method.route  # names the request's trace span
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
                raise body_too_large(method.name, self.cap)
            chunks, size = [], 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise TransientError("the caller went away", operation=method.name)
                chunk: bytes = message.get("body", b"")
                size += len(chunk)
                if size > self.cap:
                    raise body_too_large(method.name, self.cap)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return chunks[0] if len(chunks) == 1 else b"".join(chunks)

        status, answer, media_type = await answer_call(
            self.state, method, authorization, read_body, msgpack=wants_msgpack(accept)
        )
        headers = [_CONTENT_TYPES[media_type], (b"content-length", b"%d" % len(answer))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": answer})
