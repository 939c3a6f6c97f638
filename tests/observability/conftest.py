"""Tracing fixtures: one replay-safe SDK provider for the process, spans collected per test.

OpenTelemetry allows one global tracer provider per process, so it is set
the first time a test asks for ``spans`` and stays; its processor hands
finished spans to the current test's in-memory exporter and drops them
between tests. ``create_tracer_provider`` is Temporal's replay-safe SDK
provider, which the Temporal engine needs and the in-process engine accepts.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider, create_tracer_provider

from agentledger.engine.temporal import connect
from agentledger.errors import TransientError
from agentledger.storage.sqlite import SQLiteStore
from tests.runtime.support import now_ms


class _Collector(SpanProcessor):
    """Finished spans go to the exporter of the test that is running, if any."""

    def __init__(self) -> None:
        self.exporter: InMemorySpanExporter | None = None

    def on_end(self, span: ReadableSpan) -> None:
        if self.exporter is not None:
            self.exporter.export((span,))


_COLLECTOR = _Collector()


class Spans:
    """The spans finished during one test."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter

    def finished(self) -> Sequence[ReadableSpan]:
        return self.exporter.get_finished_spans()

    def clear(self) -> None:
        self.exporter.clear()


@pytest.fixture
def spans() -> Iterator[Spans]:
    """Turn tracing on (once per process) and collect this test's spans."""
    if not isinstance(trace.get_tracer_provider(), ReplaySafeTracerProvider):
        provider = create_tracer_provider()
        provider.add_span_processor(_COLLECTOR)
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    _COLLECTOR.exporter = exporter
    try:
        yield Spans(exporter)
    finally:
        _COLLECTOR.exporter = None


@pytest.fixture
async def store(tmp_path: os.PathLike[str]) -> AsyncIterator[SQLiteStore]:
    """A fresh SQLite store file."""
    opened = await SQLiteStore.open(os.path.join(tmp_path, "ledger.db"))
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def session(store: SQLiteStore) -> str:
    """An active session in ``store``."""
    session_id = f"s-{uuid.uuid4().hex}"
    await store.create_session(session_id, created_at=now_ms())
    return session_id


@pytest.fixture
async def temporal_client(spans: Spans, temporal_address: str) -> Client:
    """A client of the dev server, connected once tracing is on (so it carries the context).

    The server fixture waits for its port only; a frontend that is not healthy yet
    is waited for here (bounded), instead of failing the first test.
    """
    deadline = time.monotonic() + 60
    while True:
        try:
            return await connect(temporal_address)
        except TransientError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


__all__ = ["Spans", "temporal_client"]  # temporal_address: tests/conftest.py
