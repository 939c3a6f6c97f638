"""Through the store service: StoreClient's request and the service's answer share one trace."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import uvicorn
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from agentledger.service import StoreClient, TokenTable, add_token, create_app
from agentledger.storage.sqlite import SQLiteStore
from tests.observability.conftest import Spans
from tests.runtime.support import now_ms


@asynccontextmanager
async def _service(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """The real service app over a SQLite file on a uvicorn server on loopback, in this
    process so its spans reach this test's exporter; yields its URL and a host token."""
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "host")
    store = await SQLiteStore.open(str(tmp_path / "ledger.db"))
    app = create_app(store, TokenTable.load(tokens))
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="critical")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", token
    finally:
        server.should_exit = True
        await task
        await store.close()


async def test_client_and_server_spans_share_the_trace(spans: Spans, tmp_path: Path) -> None:
    """[DESIGN 14] every StoreClient request carries ``traceparent``; the service continues it."""
    async with _service(tmp_path) as (url, token), StoreClient(url, token=token) as client:
        with trace.get_tracer("tests").start_as_current_span("host") as host:
            await client.create_session("traced", created_at=now_ms())
            await client.load_session("traced")
    context = host.get_span_context()
    servers = sorted(
        (s for s in spans.finished() if s.kind is SpanKind.SERVER), key=lambda s: s.start_time or 0
    )
    assert [s.name for s in servers] == ["POST /v1/create_session", "POST /v1/load_session"]
    for server in servers:
        assert server.context.trace_id == context.trace_id
        assert server.parent is not None
        assert server.parent.is_remote
        assert server.parent.span_id == context.span_id
        assert (server.attributes or {})["http.response.status_code"] == 200


async def test_an_untraced_call_gives_a_root_server_span(spans: Spans, tmp_path: Path) -> None:
    """Without a caller span the service's span is a root: nothing is invented."""
    async with _service(tmp_path) as (url, token), StoreClient(url, token=token) as client:
        await client.create_session("untraced", created_at=now_ms())
    [server] = [s for s in spans.finished() if s.kind is SpanKind.SERVER]
    assert server.parent is None


async def test_concurrent_traced_calls_each_carry_their_own_trace(
    spans: Spans, tmp_path: Path
) -> None:
    """Calls made at the same moment under different spans are not grouped into one
    request: each reaches the service with its own caller's trace context."""
    async with _service(tmp_path) as (url, token), StoreClient(url, token=token) as client:
        await client.create_session("both", created_at=now_ms())
        tracer = trace.get_tracer("tests")

        async def load(name: str) -> trace.Span:
            with tracer.start_as_current_span(name) as span:
                await client.load_session("both")
                return span

        callers = await asyncio.gather(load("first"), load("second"))
    servers = [
        s
        for s in spans.finished()
        if s.kind is SpanKind.SERVER and s.name == "POST /v1/load_session"
    ]
    assert len(servers) == 2
    parents = {s.parent.span_id for s in servers if s.parent is not None}
    assert parents == {c.get_span_context().span_id for c in callers}
