"""Runs in a fresh process (``python -m tests.observability.untraced MODE DIR``); prints JSON.

``no-provider``: the API is installed but no tracer provider is set. A
one-tool run and a traced HTTP round trip must not touch the tracing API
(counted at the API's entry points), then the same run with a provider set
must be traced, so the count is known to see spans when there are any.

``no-api``: ``opentelemetry`` cannot be imported; the runtime must not wrap
its store and a run must complete.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

CALLS: Counter[str] = Counter()


def _count_api_calls() -> None:
    from opentelemetry import propagate, trace

    for cls in (trace.ProxyTracer, trace.NoOpTracer):
        for name in ("start_span", "start_as_current_span"):
            original = getattr(cls, name)

            def counted(*args: Any, _o: Any = original, _n: str = name, **kw: Any) -> Any:
                CALLS[_n] += 1
                return _o(*args, **kw)

            setattr(cls, name, counted)
    original_inject = propagate.inject

    def inject(*args: Any, **kw: Any) -> Any:
        CALLS["inject"] += 1
        return original_inject(*args, **kw)

    propagate.inject = inject


async def _one_tool_run(folder: str) -> tuple[Any, Any]:
    from agentledger.runtime import Agent, ModelPlanner, Runtime, tool, user_message
    from agentledger.storage.sqlite import SQLiteStore
    from agentledger.testing import ScriptedModel, reply, tool_calls
    from tests.runtime.support import now_ms

    @tool
    async def weather(city: str) -> str:
        """The weather."""
        return f"{city}: 21C"

    store = await SQLiteStore.open(str(Path(folder, f"{uuid.uuid4().hex}.db")))
    await store.create_session("s", created_at=now_ms())
    runtime = Runtime(store)
    runtime.register_model(
        "m", ScriptedModel([tool_calls(("c1", "weather", {"city": "Oslo"})), reply("21C.")])
    )
    runtime.register_agent(Agent("chat", ModelPlanner("m"), tools=[weather]))
    out = await runtime.agent_client("chat").run("s", [user_message("Oslo?")])
    wrapped = runtime._activities.store is not store
    await store.close()
    return out.status.value, wrapped


async def no_provider(folder: str) -> dict[str, Any]:
    import httpx

    from agentledger.observability import inject_trace_context
    from tests.observability.http_app import serving

    _count_api_calls()
    status, _ = await _one_tool_run(folder)
    async with (
        serving() as url,
        httpx.AsyncClient(event_hooks={"request": [inject_trace_context]}) as client,
    ):
        echoed = (await client.get(f"{url}/echo")).json()["traceparent"]
    off = dict(CALLS)

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    traced_status, _ = await _one_tool_run(folder)
    return {
        "status": status,
        "api_calls": off,
        "echoed_traceparent": echoed,
        "traced_status": traced_status,
        "spans_once_configured": len(exporter.get_finished_spans()),
    }


async def no_api(folder: str) -> dict[str, Any]:
    sys.modules["opentelemetry"] = None  # type: ignore[assignment]
    from agentledger.observability import tracing

    status, wrapped = await _one_tool_run(folder)
    return {"status": status, "available": tracing.available(), "store_wrapped": wrapped}


if __name__ == "__main__":
    mode, folder = sys.argv[1], sys.argv[2]
    run = no_provider if mode == "no-provider" else no_api
    print(json.dumps(asyncio.run(run(folder))))
