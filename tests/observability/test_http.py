"""W3C trace context over HTTP: an httpx hook injects it, an ASGI middleware continues it."""

from __future__ import annotations

import httpx
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from agentledger.observability import inject_trace_context, trace_headers
from tests.observability.conftest import Spans
from tests.observability.http_app import serving


async def test_client_and_server_spans_share_the_trace(spans: Spans) -> None:
    """The server span is a child of the caller's span, in the caller's trace."""
    async with (
        serving() as url,
        httpx.AsyncClient(event_hooks={"request": [inject_trace_context]}) as client,
    ):
        with trace.get_tracer("tests").start_as_current_span("caller") as caller:
            response = await client.get(f"{url}/echo")
            expected = trace_headers()["traceparent"]
    assert response.status_code == 200
    context = caller.get_span_context()
    assert response.json()["traceparent"] == expected
    assert expected == f"00-{context.trace_id:032x}-{context.span_id:016x}-01"
    [server] = [s for s in spans.finished() if s.kind is SpanKind.SERVER]
    assert server.context.trace_id == context.trace_id
    assert server.parent is not None
    assert server.parent.span_id == context.span_id
    assert server.parent.is_remote
    assert server.name == "GET"
    assert dict(server.attributes or {}) == {
        "http.request.method": "GET",
        "url.path": "/echo",
        "url.scheme": "http",
        "http.response.status_code": 200,
    }


async def test_server_errors_fail_the_span(spans: Spans) -> None:
    """A 5xx answer and a handler that raises both mark the server span failed."""
    async with (
        serving() as url,
        httpx.AsyncClient(event_hooks={"request": [inject_trace_context]}) as client,
    ):
        assert (await client.get(f"{url}/fail")).status_code == 503
        assert (await client.get(f"{url}/boom")).status_code == 500
    failed, broke = sorted(
        (s for s in spans.finished() if s.kind is SpanKind.SERVER),
        key=lambda s: s.start_time or 0,
    )
    assert failed.status.status_code is StatusCode.ERROR
    assert (failed.attributes or {})["error.type"] == "503"
    assert broke.status.status_code is StatusCode.ERROR
    assert (broke.attributes or {})["error.type"] == "Boom"


async def test_no_context_no_parent(spans: Spans) -> None:
    """A request that carries no trace context starts a trace of its own on the server."""
    async with serving() as url, httpx.AsyncClient() as client:
        response = await client.get(f"{url}/echo")
    assert response.json() == {"traceparent": ""}
    [server] = spans.finished()
    assert server.parent is None
