"""Observability: OpenTelemetry traces of runs, turns, model and tool calls, store operations.

Install the ``[otel]`` extra (the OpenTelemetry API), set a tracer provider
with the exporter of your choice, and every run is traced; with no provider
nothing is recorded and nothing is paid. See ``docs/observability.md``.
"""

from agentledger.observability.models import CAPTURE_CONTENT_ENV, TracedModel
from agentledger.observability.propagation import (
    TraceMiddleware,
    inject_trace_context,
    temporal_plugins,
    trace_headers,
)
from agentledger.observability.store import RECORD_EVENT, TracedStore

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "RECORD_EVENT",
    "TraceMiddleware",
    "TracedModel",
    "TracedStore",
    "inject_trace_context",
    "temporal_plugins",
    "trace_headers",
]
