"""A worker app that freezes right after one record is stored (``--app ...pausing:setup``).

The moment it freezes is the one a crash test needs: the activity's store
write has committed, its completion has not reached Temporal. It is found
through OpenTelemetry, as any host could: the store operation's span ends
right after its commit and names each record it wrote. A span processor
sees the span of the first write that inserted the record whose event key
is ``$AGENTLEDGER_TEST_PAUSE_KEY`` (or the last of the saved tool results it
names), leaves a ``paused`` marker and blocks the worker's only thread (no
heartbeat, no completion) until it is killed.
Importing this module installs the tracer provider: worker processes only.
"""

from __future__ import annotations

import os
import time

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

from agentledger.observability import RECORD_EVENT
from agentledger.runtime import Runtime
from tests.engine.temporal import apps


class FreezeAfterWrite(SpanProcessor):
    """Blocks the process when a span records that the awaited record was inserted.

    A key ``tool_results:K1,K2`` awaits instead the saved tool results of calls
    ``K1`` and ``K2`` (parallel calls), and blocks once the last one is kept.
    """

    def __init__(self, key: str) -> None:
        self.key = key
        self.results = (
            set(key.removeprefix("tool_results:").split(","))
            if key.startswith("tool_results:")
            else set()
        )

    def on_end(self, span: ReadableSpan) -> None:
        attributes = span.attributes or {}
        if self.results and attributes.get("agentledger.store.outcome") == "kept":
            self.results.discard(str(attributes.get("agentledger.tool_result.call_key")))
            if not self.results:
                apps.mark("paused")
                time.sleep(600)  # the test SIGKILLs this process meanwhile
        for event in span.events:
            attributes = event.attributes or {}
            if (
                event.name == RECORD_EVENT
                and attributes.get("agentledger.record.event_key") == self.key
                and attributes.get("agentledger.record.inserted") is True
            ):
                apps.mark("paused")
                time.sleep(600)  # the test SIGKILLs this process meanwhile


_provider = TracerProvider()
_provider.add_span_processor(FreezeAfterWrite(os.environ[apps.PAUSE_KEY_ENV]))
trace.set_tracer_provider(_provider)


def setup(runtime: Runtime) -> None:
    """The agents of :mod:`tests.engine.temporal.apps`."""
    apps.setup(runtime)
