"""The store service as an ASGI app: HTTP in, one backend call, typed answer out [S1].

Every store method is ``POST /v1/<name>`` with a msgspec-typed JSON body
(:mod:`agentledger.service.wire`). A call is authenticated, checked against
the token's role and label scope, decoded, handed to the backend, and its
result or typed error encoded; the service decides nothing else, the
backend's shared lifecycle code decides.

Built on Litestar: it is msgspec-native (our types are msgspec Structs, so
there is no second model layer), small, fast, and has the lifespan hooks and
streaming responses the service needs. The store calls themselves have one
router of their own, ahead of Litestar's (:mod:`agentledger.service.store_routes`),
for speed; every request enters through one gate (:mod:`agentledger.service.gate`).

The service is three rooms: the store RPC server (:mod:`.gate`, :mod:`.calls`,
:mod:`.batch`, :mod:`.store_routes`, :mod:`.wire`, :mod:`.follow`), the web
inspector (:mod:`.inspector`), and the host for running agents
(:mod:`.host_runtime`); :mod:`.state` is what they share.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

import msgspec
from litestar import Litestar, Request, Response, get
from litestar.exceptions import HTTPException, NotFoundException
from litestar.handlers import HTTPRouteHandler
from litestar.response import Redirect, Stream

from agentledger.errors import (
    AgentledgerError,
    NotFoundError,
    OverloadedError,
    TransientError,
    ValidationError,
)
from agentledger.observability.propagation import TraceMiddleware
from agentledger.observability.tracing import tracer
from agentledger.service.admission import Admission, send_overloaded
from agentledger.service.auth import TokenTable
from agentledger.service.error_codec import encode_error
from agentledger.service.gate import metered
from agentledger.service.host_runtime import RuntimeHost
from agentledger.service.inspector import inspector_handlers
from agentledger.service.metrics import CONTENT_TYPE_LATEST
from agentledger.service.openapi import openapi_document
from agentledger.service.socket_follow import open_follow
from agentledger.service.socket_route import SocketCalls
from agentledger.service.state import ServiceState
from agentledger.service.store_routes import StoreCalls, wrong_method
from agentledger.service.wire import (
    body_cap,
)
from agentledger.storage.protocol import AdminStore

__all__ = ["ServiceState", "body_cap", "create_app"]

_log = logging.getLogger("agentledger.service")
_JSON = "application/json"
_ENCODER = msgspec.json.Encoder()
_ASGI = Callable[..., Awaitable[None]]
_ANY = Request[Any, Any, Any]


def _json_refusal(error: AgentledgerError, status: int) -> Response[Any]:
    return Response(encode_error(error), status_code=status, media_type=_JSON)


def _status(response: Response[Any]) -> int:
    return response.status_code or 200


def _follow_route(state: ServiceState, scope: str) -> HTTPRouteHandler:
    """``GET /v1/{runs|sessions}/{id}/records``: follow a log as server-sent events [S5].

    The id is everything between the scope and ``/records``, so an id holding
    ``/`` (sent as ``%2F``) is followed like any other.
    """
    name = scope.removesuffix("s")
    operation = f"follow_{name}_records"

    async def handle(request: Request[Any, Any, Any]) -> Response[Any]:
        tail = str(request.path_params["tail"]).removeprefix("/")
        scope_id, records = tail[: -len("/records")], tail[-len("/records") :]
        if records != "/records":
            return _framework_refusal(request, NotFoundException())
        after = request.headers.get("last-event-id") or request.query_params.get("after") or ""

        async def work() -> Response[Any]:
            authorization = request.headers.get("authorization")
            events = await open_follow(state, operation, scope_id, after, authorization)
            return Stream(
                events,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )

        return await metered(state, operation, work, _json_refusal, _status)

    path = f"/v1/{scope}/{{tail:path}}"
    return get(path, name=operation, include_in_schema=False)(handle)


def _framework_refusal(request: _ANY, error: Exception) -> Response[Any]:
    """What the framework refuses before any route runs, as a typed error [S2].

    An unknown route is a NotFoundError of kind ``route``, a wrong method or
    any other malformed request a ValidationError, trouble inside the
    framework a TransientError; the HTTP status stays the framework's.
    """
    status = getattr(error, "status_code", 500)
    where = f"{request.method} {request.url.path}"
    typed: AgentledgerError
    if status == 404:
        typed = NotFoundError(kind="route", id=where)
    elif status == 405:
        typed = wrong_method(request.url.path, request.method)
    elif status == 413:
        typed = ValidationError(field="body", expected="a body within this service's limit",
                                got="a larger body")  # fmt: skip
    elif 400 <= status < 500:
        detail = getattr(error, "detail", "") or "a well-formed request"
        typed = ValidationError(field="request", expected="a request this service accepts",
                                got=f"{where}: {detail}")  # fmt: skip
    else:
        _log.error("store service: %s failed in the framework: %r", where, error)
        typed = TransientError("internal error in the store service", operation=where)
        status = 500
    return Response(encode_error(typed), status_code=status, media_type=_JSON)


def create_app(
    store: AdminStore | None = None,
    tokens: TokenTable | None = None,
    *,
    state: ServiceState | None = None,
    host_runtime: RuntimeHost | None = None,
) -> Litestar:
    """The ASGI app serving ``store`` (any ``Store`` + ``SessionAdmin``) to ``tokens``' holders.

    Give either ``store`` and ``tokens`` (and ``host_runtime``), or a ``state`` made
    beforehand (to keep a handle on it, e.g. to begin a graceful shutdown), which holds
    them all. ``host_runtime`` lets a ``host`` token answer, fork and cancel runs from the
    inspector (see :mod:`agentledger.service.host_runtime`); the caller closes it.

    Raises:
        ValidationError: both a ``state`` and what it holds were given, or neither.
    """
    if state is None:
        if store is None or tokens is None:
            raise ValidationError(
                field="create_app", expected="a store and its tokens, or a ServiceState",
                got="neither",
            )  # fmt: skip
        state = ServiceState(store, tokens, host_runtime=host_runtime)
    elif store is not None or tokens is not None or host_runtime is not None:
        raise ValidationError(
            field="create_app",
            expected="a store and its tokens, or a ServiceState holding them, not both",
            got="both",
        )
    document = _ENCODER.encode(openapi_document())

    @get("/healthz", include_in_schema=False)
    async def healthz() -> Response[Any]:
        status = 503 if state.stopping else 200
        return Response(b"ok\n", media_type="text/plain", status_code=status)

    @get("/readyz", include_in_schema=False)
    async def readyz() -> Response[Any]:
        if state.stopping:
            return Response(b"stopping\n", media_type="text/plain", status_code=503)
        overloaded = state.admission.overloaded()
        if overloaded:  # send new work elsewhere for a while; the service is up (/healthz)
            retry = {"Retry-After": str(max(1, round(state.overload.retry_after)))}
            return Response(f"overloaded: {overloaded}\n".encode(), media_type="text/plain",
                            status_code=503, headers=retry)  # fmt: skip
        try:  # any answer from the store, even "not found", means it is reachable
            await state.store.load_session_status("agentledger-readyz-probe")
        except TransientError as e:
            return Response(f"{e}\n".encode(), media_type="text/plain", status_code=503)
        except AgentledgerError:
            pass
        return Response(b"ready\n", media_type="text/plain")

    @get("/metrics", include_in_schema=False)
    async def metrics() -> Response[Any]:
        # Litestar adds "; charset=utf-8" to a text/ type itself: give it the type without.
        media_type = CONTENT_TYPE_LATEST.replace("; charset=utf-8", "")
        if state.usage_label:  # [G3] one query over the per-session counters
            try:
                state.metrics.usage = await state.store.usage_by_label(state.usage_label)
            except AgentledgerError:
                state.metrics.usage = []  # the store is away: the request metrics still answer
        return Response(state.metrics.render(), media_type=media_type)

    @get("/", include_in_schema=False)
    async def root() -> Redirect:
        return Redirect("/ui")  # the web inspector: what a browser opening the service wants

    @get("/openapi.json", include_in_schema=False)
    async def openapi() -> Response[Any]:
        return Response(document, media_type=_JSON)

    handlers: list[HTTPRouteHandler] = [healthz, readyz, metrics, openapi, root]
    handlers += [_follow_route(state, s) for s in ("runs", "sessions")]
    handlers += inspector_handlers(state)  # the web inspector at /ui [DESIGN 11]
    cap = body_cap(state.limits)
    app = _ServiceApp(
        route_handlers=handlers,
        request_max_body_size=cap,
        openapi_config=None,
        logging_config=None,
        exception_handlers={HTTPException: _framework_refusal},
        # A SERVER span continuing the caller's trace [DESIGN 14] (a plain ASGI middleware).
        middleware=[cast(Any, TraceMiddleware)],
    )
    app.calls = StoreCalls(state, cap)
    app.socket = SocketCalls(state, cap)  # every call of a StoreClient on one WebSocket
    app.traced_calls = TraceMiddleware(cast(Any, app.calls))
    app.admission = state.admission
    app.state["agentledger"] = state
    return app


class _ServiceApp(Litestar):
    """Litestar, with the store calls answered before its router (see :mod:`.store_routes`,
    and :mod:`.socket_route` for the WebSocket carrying a client's calls), and every HTTP
    request admitted first (see :mod:`.admission`; the socket admits each of its calls)."""

    calls: StoreCalls
    socket: SocketCalls
    traced_calls: _ASGI
    admission: Admission

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        ticket = self.admission.admit(scope) if scope["type"] == "http" else None
        if isinstance(ticket, OverloadedError):
            await send_overloaded(send, ticket)
            return
        try:
            if not self.calls.route(scope):
                if self.socket.route(scope):
                    await self.socket(scope, receive, send)
                else:
                    await super().__call__(scope, receive, send)
            elif tracer() is None:  # no span to open: skip the middleware's layer
                await self.calls(scope, receive, send)
            else:
                await self.traced_calls(scope, receive, send)
        finally:
            if ticket is not None:
                ticket.release()
