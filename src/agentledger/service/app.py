"""The store service as an ASGI app: HTTP in, one backend call, typed answer out [S1].

Every store method is ``POST /v1/<name>`` with a msgspec-typed JSON body
(:mod:`agentledger.service.wire`). A call is authenticated, checked against
the token's role and label scope, decoded, handed to the backend, and its
result or typed error encoded; the service decides nothing else, the
backend's shared lifecycle code decides.

Built on Litestar: it is msgspec-native (our types are msgspec Structs, so
there is no second model layer), small, fast, and has the lifespan hooks and
streaming responses the service needs. The store calls themselves are
answered ahead of its router (:mod:`agentledger.service.calls`), for speed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import msgspec
from litestar import Litestar, Request, Response, get, post
from litestar.exceptions import HTTPException, NotFoundException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.handlers import HTTPRouteHandler
from litestar.response import Redirect, Stream

from agentledger.errors import (
    AgentledgerError,
    NotFoundError,
    TransientError,
    ValidationError,
)
from agentledger.observability.propagation import TraceMiddleware
from agentledger.observability.tracing import tracer
from agentledger.service.auth import Principal, TokenTable
from agentledger.service.batch import answer_calls
from agentledger.service.calls import (
    answer_call,
    authorize,
    body_too_large,
    wants_msgpack,
)
from agentledger.service.error_codec import encode_error, http_status
from agentledger.service.follow import Notifier, follow
from agentledger.service.host_runtime import RuntimeHost
from agentledger.service.inspector import inspector_handlers
from agentledger.service.metrics import CONTENT_TYPE_LATEST, ServiceMetrics
from agentledger.service.openapi import openapi_document
from agentledger.service.scope import check_scope
from agentledger.service.store_routes import StoreCalls
from agentledger.service.wire import (
    CALLS_ROUTE,
    METHODS,
    STORE_READERS,
    Method,
    Role,
    Subject,
    body_cap,
)
from agentledger.storage.protocol import AdminStore
from agentledger.storage.validation import DEFAULT_LIMITS, SizeLimits

__all__ = ["ServiceState", "body_cap", "create_app"]

_log = logging.getLogger("agentledger.service")
_JSON = "application/json"
_ENCODER = msgspec.json.Encoder()
_ASGI = Callable[..., Awaitable[None]]
_ANY = Request[Any, Any, Any]


class ServiceState:
    """What every request of one service shares: the backend, tokens, metrics, followers.

    ``stopping`` is set when a graceful shutdown begins: calls still arriving
    are refused as transient (the client retries elsewhere or later) and
    follow streams end, while calls already running finish.
    """

    def __init__(
        self,
        store: AdminStore,
        tokens: TokenTable,
        *,
        secure_cookies: str = "auto",
        host_runtime: RuntimeHost | None = None,
    ) -> None:
        self.store = store
        self.host_runtime = host_runtime
        """What answers, forks and cancels runs for the inspector (None: it only records)."""
        self.secure_cookies = secure_cookies
        """When the inspector's login cookie is ``Secure``: auto (over HTTPS), always, never."""
        self.limits: SizeLimits = getattr(store, "limits", DEFAULT_LIMITS)
        self.tokens = tokens
        self.metrics = ServiceMetrics()
        self.usage_label = "tenant"
        """The session label ``/metrics`` totals usage by, one series per value ("": none)."""
        self.notifier = Notifier()
        self.stopping = False
        self.temporal: Any = None
        """A Temporal client the inspector asks whether a running run is paused (``serve
        --temporal``); None: the host runtime's, when it runs on Temporal."""


async def _answer(
    state: ServiceState,
    operation: str,
    request: _ANY,
    roles: frozenset[Role],
    work: Callable[[Principal], Awaitable[Response[Any]]],
) -> Response[Any]:
    """Authenticate, authorize, run ``work``; typed errors become their HTTP answers."""
    started = time.perf_counter()
    state.metrics.in_flight += 1
    try:
        principal = authorize(state, operation, request.headers.get("authorization"), roles)
        response = await work(principal)
    except AgentledgerError as e:
        response = Response(encode_error(e), status_code=http_status(e), media_type=_JSON)
    except Exception:
        _log.exception("store service: %s failed", operation)
        failure = TransientError("internal error in the store service", operation=operation)
        response = Response(encode_error(failure), status_code=500, media_type=_JSON)
    finally:
        state.metrics.in_flight -= 1
    status = response.status_code or 200
    state.metrics.observe(operation, status, time.perf_counter() - started)
    return response


async def _body(request: _ANY, operation: str) -> bytes:
    """The request body, or a ValidationError when it passes the service's body cap."""
    try:
        return await request.body()
    except RequestEntityTooLarge:
        cap = request.route_handler.resolve_request_max_body_size()
        raise body_too_large(operation, cap or 0) from None


def _method_route(state: ServiceState, method: Method[Any, Any]) -> HTTPRouteHandler:
    """The framework's route of a store method: what :class:`StoreCalls` does not take."""

    async def handle(request: Request[Any, Any, Any]) -> Response[Any]:
        status, answer, media_type = await answer_call(
            state,
            method,
            request.headers.get("authorization"),
            lambda: _body(request, method.name),
            msgpack=wants_msgpack(request.headers.get("accept")),
        )
        return Response(answer, status_code=status, media_type=media_type)

    return post(method.route, name=method.name, include_in_schema=False, status_code=200)(handle)


def _calls_route(state: ServiceState) -> HTTPRouteHandler:
    """The framework's route of ``POST /v1/calls``: what :class:`StoreCalls` does not take
    (answered as one JSON array)."""

    async def handle(request: Request[Any, Any, Any]) -> Response[Any]:
        status, answer, media_type = await answer_calls(
            state, request.headers.get("authorization"), lambda: _body(request, "calls")
        )
        return Response(answer, status_code=status, media_type=media_type)

    return post(CALLS_ROUTE, name="calls", include_in_schema=False, status_code=200)(handle)


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

        async def work(principal: Principal) -> Response[Any]:
            await check_scope(state.store, principal, operation, (Subject(name, scope_id),))
            list_page = (
                state.store.list_run_records
                if name == "run"
                else state.store.list_session_run_records
            )
            events: AsyncIterator[bytes] = await follow(
                list_page,
                scope_id,
                after,
                notifier=state.notifier,
                stopping=lambda: state.stopping,
                key=f"{name}:{scope_id}",
            )
            return Stream(
                events,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )

        return await _answer(state, operation, request, STORE_READERS, work)

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
        typed = ValidationError(
            field="method",
            expected=f"the method {request.url.path} takes (POST for a store method, else GET)",
            got=request.method,
        )
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
    store: AdminStore,
    tokens: TokenTable,
    *,
    state: ServiceState | None = None,
    host_runtime: RuntimeHost | None = None,
) -> Litestar:
    """The ASGI app serving ``store`` (any ``Store`` + ``SessionAdmin``) to ``tokens``' holders.

    Pass ``state`` to keep a handle on it (e.g. to begin a graceful shutdown).
    ``host_runtime`` lets a ``host`` token answer, fork and cancel runs from the
    inspector (see :mod:`agentledger.service.host_runtime`); the caller closes it.
    """
    state = state or ServiceState(store, tokens)
    if host_runtime is not None:
        state.host_runtime = host_runtime
    document = _ENCODER.encode(openapi_document())

    @get("/healthz", include_in_schema=False)
    async def healthz() -> Response[Any]:
        status = 503 if state.stopping else 200
        return Response(b"ok\n", media_type="text/plain", status_code=status)

    @get("/readyz", include_in_schema=False)
    async def readyz() -> Response[Any]:
        if state.stopping:
            return Response(b"stopping\n", media_type="text/plain", status_code=503)
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
    handlers += [_method_route(state, m) for m in METHODS] + [_calls_route(state)]
    handlers += [_follow_route(state, s) for s in ("runs", "sessions")]
    handlers += inspector_handlers(state)  # the web inspector at /ui [DESIGN 11]
    cap = body_cap(getattr(store, "limits", DEFAULT_LIMITS))
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
    app.traced_calls = TraceMiddleware(cast(Any, app.calls))
    app.state["agentledger"] = state
    return app


class _ServiceApp(Litestar):
    """Litestar, with the store calls answered before its router (see :mod:`.store_routes`)."""

    calls: StoreCalls
    traced_calls: _ASGI

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if not self.calls.route(scope):
            await super().__call__(scope, receive, send)
        elif tracer() is None:  # no span to open: skip the middleware's layer
            await self.calls(scope, receive, send)
        else:
            await self.traced_calls(scope, receive, send)
