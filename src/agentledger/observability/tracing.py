"""OpenTelemetry spans for runs, planner turns, tool calls, model calls and store operations.

The span helpers every traced part uses (the run loop's spans are
:mod:`agentledger.runtime.tracing`). Tracing is on when the
``opentelemetry-api`` package is importable and a global tracer provider is
set (``opentelemetry.trace.set_tracer_provider``); otherwise every entry
point here returns at once (a shared no-op, or the very object it was given),
so a run pays a few attribute lookups and nothing else.

The span tree of a run (every attribute in ``docs/observability.md``)::

    agentledger.run                      the whole run (the workflow)
    ├── agentledger.turn                 a planner turn and what its plan causes
    │   ├── chat {model}                 one model call, per attempt (GenAI conventions)
    │   ├── execute_tool {tool}          one tool call, per attempt
    │   ├── execute_tool {agent}         an agent used as a tool ...
    │   │   └── agentledger.run          ... whose child run nests here
    │   └── agentledger.store {method}   a store operation, with the ids it wrote
    └── agentledger.store {method}       the run's start and ending

Spans in workflow code (the run, its turns, an agent-tool call) are only made where
they survive replay: in-process, or inside a Temporal workflow whose global
provider is Temporal's ``ReplaySafeTracerProvider``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, TypeVar

from agentledger import __version__
from agentledger.engine.base import WorkflowCanceled

try:
    from opentelemetry import trace as _otel
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - exercised in a subprocess without the package
    _otel = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.util.types import AttributeValue


__all__ = [
    "TRACER_NAME",
    "available",
    "carried_context",
    "error_type",
    "flush",
    "record_error",
    "span",
    "span_carrier",
    "tracer",
    "workflow_tracer",
]

TRACER_NAME = "agentledger"
"""The instrumentation scope of every agentledger span."""

S = TypeVar("S")
T = TypeVar("T")


class _State:
    tracer: Tracer | None = None


_state = _State()

_W3C = TraceContextTextMapPropagator() if _otel is not None else None

# While no provider is set, the API's global holds None: one attribute lookup says "off"
# (``get_tracer_provider()`` also reads the environment, microseconds a call). A provider
# named in the environment is loaded by that call, so then it is always made.
_GLOBAL_SLOT = (
    _otel is not None
    and hasattr(_otel, "_TRACER_PROVIDER")
    and "OTEL_PYTHON_TRACER_PROVIDER" not in os.environ
)


def tracer() -> Tracer | None:
    """agentledger's tracer, or None while tracing is off (no API, or no provider set)."""
    found = _state.tracer
    if found is not None:
        return found
    if _otel is None or (_GLOBAL_SLOT and _otel._TRACER_PROVIDER is None):
        return None
    provider = _otel.get_tracer_provider()
    if isinstance(provider, _otel.ProxyTracerProvider | _otel.NoOpTracerProvider):
        return None
    # OpenTelemetry sets the global provider once, so the tracer can be kept.
    found = _state.tracer = provider.get_tracer(TRACER_NAME, __version__)
    return found


def available() -> bool:
    """Whether the OpenTelemetry API can be imported here."""
    return _otel is not None


def flush(timeout_millis: int = 5000) -> None:
    """Export the finished spans now: before a process ends without interpreter teardown."""
    if tracer() is None:
        return
    force = getattr(_otel.get_tracer_provider(), "force_flush", None)
    if callable(force):
        force(timeout_millis)


def workflow_tracer() -> Tracer | None:
    """The tracer for spans made in workflow code: None where replay would duplicate them."""
    found = tracer()
    if found is None:
        return None
    workflow = sys.modules.get("temporalio.workflow")
    if workflow is not None and workflow.in_workflow():
        contrib = sys.modules.get("temporalio.contrib.opentelemetry")
        replay_safe = getattr(contrib, "ReplaySafeTracerProvider", None)
        if replay_safe is None or not isinstance(_otel.get_tracer_provider(), replay_safe):
            return None
    return found


def span_carrier(target: Span) -> dict[str, str]:
    """``target``'s context as a W3C trace-context carrier (``traceparent``, ``tracestate``):
    to open spans under it in another task or process (:func:`carried_context`). Made
    without the global propagators, so workflow code may call it."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=_otel.set_span_in_context(target))
    return carrier


def carried_context(carrier: dict[str, str]) -> Context:
    """The context a :func:`span_carrier` carrier stands for (its span as the parent)."""
    return _W3C.extract(carrier)


def error_type(error: BaseException) -> str:
    """The typed class an error stands for (an ActivityFailedError names its cause's class)."""
    carried = getattr(error, "error_type", "")
    return carried if isinstance(carried, str) and carried else type(error).__name__


def record_error(target: Span, error: BaseException) -> None:
    """Mark ``target`` failed with ``error``: ``error.type``, an exception event, ERROR status."""
    kind = error_type(error)
    target.set_attribute("error.type", kind)
    target.record_exception(error, attributes={"exception.type": kind})
    target.set_status(_otel.Status(_otel.StatusCode.ERROR, f"{kind}: {error}"))


@contextlib.contextmanager
def span(
    found: Tracer,
    name: str,
    attributes: dict[str, AttributeValue],
    *,
    kind: str = "internal",
    current: bool = True,
    parent: Context | None = None,
) -> Iterator[Span]:
    """A span around the block; errors recorded with their class, interruptions marked.

    ``kind`` is a ``SpanKind`` name (``"client"``, ``"server"`` ...);
    ``current=False`` keeps the span out of the context (for async
    generators, whose context is their consumer's); ``parent`` is a context
    to open it in (one extracted from a request) instead of the current one.
    """
    opened = found.start_span(
        name, context=parent, kind=_otel.SpanKind[kind.upper()], attributes=attributes
    )
    try:
        if current:
            with _otel.use_span(
                opened, end_on_exit=False, record_exception=False, set_status_on_exception=False
            ):
                yield opened
        else:
            yield opened
    except (asyncio.CancelledError, GeneratorExit) as e:
        # Interrupted, not failed. Recording it also tells Temporal's replay-safe
        # span not to end a workflow span its worker is evicting (replay ends it).
        opened.set_attribute("agentledger.interrupted", True)
        opened.record_exception(e)
        raise
    except BaseException as e:
        if isinstance(e, WorkflowCanceled):
            opened.set_attribute("agentledger.interrupted", True)
        else:
            record_error(opened, e)
        raise
    finally:
        opened.end()
