"""A runtime on the Temporal engine with its worker, for the tests.

``temporal_runtime`` builds ``Runtime(store, engine=TemporalEngine(...))``,
lets ``setup`` register agents, and runs a worker for it on a task queue of
its own (so tests never pick up each other's work).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client

from agentledger.engine.base import RetryPolicy
from agentledger.engine.temporal import TemporalEngine, create_worker
from agentledger.runtime.runtime import Runtime
from agentledger.runtime.stream import QueueSink
from agentledger.storage.protocol import Store

__all__ = ["FAST_RETRY", "now_ms", "temporal_runtime"]

FAST_RETRY = RetryPolicy(initial_interval=0.05, maximum_interval=0.2, maximum_attempts=4)


def now_ms() -> datetime:
    """UTC now at millisecond precision (what the store accepts)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


@asynccontextmanager
async def temporal_runtime(
    client: Client,
    store: Store,
    setup: Callable[[Runtime], None],
    *,
    task_queue: str | None = None,
    worker: bool = True,
    heartbeat_timeout: float = 2.0,
    max_payload_bytes: int | None = None,
    eager_start: bool = True,
    **worker_options: Any,
) -> AsyncIterator[Runtime]:
    """A runtime whose runs go through Temporal, with a worker running while in use."""
    queue = task_queue or f"test-{uuid.uuid4().hex[:12]}"
    limits: dict[str, Any] = {}
    if max_payload_bytes is not None:
        limits["max_payload_bytes"] = worker_options["max_payload_bytes"] = max_payload_bytes
    engine = TemporalEngine(
        client,
        task_queue=queue,
        retry_policy=FAST_RETRY,
        heartbeat_timeout=heartbeat_timeout,
        eager_start=eager_start,
        **limits,
    )
    runtime = Runtime(store, engine=engine, stream=QueueSink())
    setup(runtime)
    if not worker:
        yield runtime
        return
    async with create_worker(runtime, client, queue, **worker_options):
        yield runtime
