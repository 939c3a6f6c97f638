"""Trace context across processes: HTTP (W3C ``traceparent``) and Temporal.

* :func:`inject_trace_context` is an httpx ``request`` event hook that adds
  the current span's ``traceparent`` (and ``tracestate``/``baggage``) to an
  outgoing request: ``httpx.AsyncClient(event_hooks={"request": [inject_trace_context]})``.
* :class:`TraceMiddleware` wraps an ASGI app: it extracts that context from
  each HTTP request and runs the request inside a ``SERVER`` span.
* :func:`temporal_plugins` adds Temporal's ``OpenTelemetryPlugin`` to a
  client's plugins when tracing is on, so the context travels client ->
  workflow -> activities -> child workflows, across worker processes.

All three do nothing while tracing is off. The propagators are
OpenTelemetry's global ones (W3C trace context and baggage by default).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from agentledger.observability.tracing import span, tracer

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

__all__ = ["TraceMiddleware", "inject_trace_context", "temporal_plugins", "trace_headers"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class _Request(Protocol):
    @property
    def headers(self) -> MutableMapping[str, str]: ...


def trace_headers() -> dict[str, str]:
    """The headers carrying the current trace context ({} while tracing is off)."""
    carrier: dict[str, str] = {}
    if tracer() is not None:
        from opentelemetry import propagate

        propagate.inject(carrier)
    return carrier


async def inject_trace_context(request: _Request) -> None:
    """httpx ``request`` hook: put the current trace context on ``request``'s headers."""
    if tracer() is None:
        return
    from opentelemetry import propagate

    propagate.inject(request.headers)


class TraceMiddleware:
    """ASGI middleware: each HTTP request in a ``SERVER`` span continuing the caller's trace.

    The span is named ``{method} {route}`` once the app has set a route
    template in the scope (``path_template`` or ``route``), else ``{method}``;
    attributes ``http.request.method``, ``url.path``, ``http.route``,
    ``http.response.status_code``. A 5xx status or an exception marks it failed.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = tracer()
        if found is None or scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        from opentelemetry import propagate

        carrier = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())
        }
        parent = propagate.extract(carrier)
        method = str(scope.get("method", "GET"))
        attributes: dict[str, AttributeValue] = {
            "http.request.method": method,
            "url.path": str(scope.get("path", "")),
            "url.scheme": str(scope.get("scheme", "http")),
        }
        status: list[int] = []

        async def sending(message: Message) -> None:
            if message.get("type") == "http.response.start":
                status.append(int(message.get("status", 0)))
            await send(message)

        with span(found, method, attributes, kind="server", parent=parent) as opened:
            try:
                await self.app(scope, receive, sending)
            finally:
                route = _route(scope)
                if route:
                    opened.set_attribute("http.route", route)
                    opened.update_name(f"{method} {route}")
                if status:
                    opened.set_attribute("http.response.status_code", status[0])
            if status and status[0] >= 500:
                from opentelemetry.trace import Status, StatusCode

                opened.set_attribute("error.type", str(status[0]))
                opened.set_status(Status(StatusCode.ERROR))


def _route(scope: Scope) -> str:
    template = scope.get("path_template")
    if isinstance(template, str):
        return template
    route = getattr(scope.get("route"), "path", None)
    return route if isinstance(route, str) else ""


def temporal_plugins(plugins: Sequence[Any] = ()) -> list[Any]:
    """``plugins`` plus Temporal's ``OpenTelemetryPlugin`` when tracing is on and replay-safe.

    Tracing through Temporal needs the global tracer provider to be made by
    ``temporalio.contrib.opentelemetry.create_tracer_provider()`` (spans in
    workflow code must survive replay); with any other provider, or none,
    ``plugins`` comes back unchanged.
    """
    chosen = list(plugins)
    if tracer() is None:
        return chosen
    contrib = sys.modules.get("temporalio.contrib.opentelemetry")
    if contrib is None:
        return chosen
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), contrib.ReplaySafeTracerProvider):
        return chosen
    if not any(isinstance(p, contrib.OpenTelemetryPlugin) for p in chosen):
        chosen.append(contrib.OpenTelemetryPlugin())
    return chosen
