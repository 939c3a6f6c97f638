"""A traced worker app (``agentledger worker --app tests.observability.apps:setup``).

Importing it turns tracing on in the worker process, as a host's app module
would: Temporal's replay-safe SDK provider, exporting each finished span as
one JSON line to ``$AGENTLEDGER_TEST_SPANS`` for the test process to read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from temporalio.contrib.opentelemetry import create_tracer_provider

from agentledger.runtime import Runtime
from tests.observability.support import SCENARIOS, SPANS_ENV


def span_json(span: ReadableSpan) -> str:
    """One span as a JSON line: ids, parent, name, start, attributes, events."""
    parent = span.parent.span_id if span.parent is not None else None
    return json.dumps(
        {
            "name": span.name,
            "trace_id": span.context.trace_id,
            "span_id": span.context.span_id,
            "parent_id": parent,
            "start_time": span.start_time,
            "end_time": span.end_time,
            "attributes": dict(span.attributes or {}),
            "events": [
                {"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events
            ],
            "pid": os.getpid(),
        }
    )


class JsonLinesExporter(SpanExporter):
    """Appends each span to a file, one JSON object per line."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as f:
            for span in spans:
                f.write(span_json(span) + "\n")
        return SpanExportResult.SUCCESS


_provider = create_tracer_provider()
# Exported from a thread of its own, as in production: never from workflow code.
_exporter = JsonLinesExporter(os.environ[SPANS_ENV])
_provider.add_span_processor(BatchSpanProcessor(_exporter, schedule_delay_millis=100))
trace.set_tracer_provider(_provider)


def setup(runtime: Runtime) -> None:
    """The child-run scenario's agents (a fresh script per worker process)."""
    SCENARIOS["child_run"]().setup(runtime)
