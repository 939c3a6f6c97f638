"""TracedStore: any ``Store`` with one span per operation and the ids it wrote as events.

The runtime wraps its store once (:func:`traced_store`); backends know
nothing of tracing. While tracing is off each method hands back the inner
store's own coroutine, so the wrapper costs one call and one lookup.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from agentledger.observability.tracing import available, span, tracer
from agentledger.storage import operations as ops
from agentledger.storage.lifecycle.messages import steered_records
from agentledger.storage.operations import Operation, StoreOperations
from agentledger.storage.protocol import Store
from agentledger.storage.types import (
    AppendResult,
    ChildRunStart,
    OneShotChildRunStart,
    OneShotRunStart,
    Page,
    Record,
    RepairResult,
    RootRunStart,
    StartResult,
    TurnAppend,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Span
    from opentelemetry.util.types import AttributeValue

__all__ = ["RECORD_EVENT", "TracedStore", "traced_store"]

Req = TypeVar("Req")
Resp = TypeVar("Resp")

RECORD_EVENT = "agentledger.record"
"""The span event naming one record a store operation wrote (or found already written)."""

_Start = RootRunStart | ChildRunStart | OneShotRunStart | OneShotChildRunStart


def _record_event(target: Span, record: Record, result: AppendResult) -> None:
    target.add_event(
        RECORD_EVENT,
        {
            "agentledger.record.id": result.id,
            "agentledger.record.run_id": record.run_id,
            "agentledger.record.event_key": record.event_key,
            "agentledger.record.type": record.type,
            "agentledger.record.inserted": result.inserted,
        },
    )


def _inserted(target: Span, result: AppendResult) -> None:
    target.set_attribute("agentledger.store.inserted", result.inserted)
    target.set_attribute("agentledger.store.outcome", "inserted" if result.inserted else "retried")


def _appended(
    record: Record, carried: Sequence[Record] = ()
) -> Callable[[Span, AppendResult], None]:
    """One record, after the ordinary records its lifecycle command carried (if any)."""

    def describe(target: Span, result: AppendResult) -> None:
        _inserted(target, result)
        for each, landed in zip(carried, result.records, strict=False):
            _record_event(target, each, landed)
        _record_event(target, record, result)

    return describe


def _batch_appended(records: Sequence[Record]) -> Callable[[Span, list[AppendResult]], None]:
    """[B1] A batch: ``inserted``, ``retried`` or ``mixed``, and one event per record."""

    def describe(target: Span, results: list[AppendResult]) -> None:
        inserted = {result.inserted for result in results}
        outcome = "mixed" if len(inserted) > 1 else "inserted" if True in inserted else "retried"
        target.set_attribute("agentledger.store.inserted", True in inserted)
        target.set_attribute("agentledger.store.outcome", outcome)
        target.set_attribute("agentledger.store.records", len(results))
        for record, result in zip(records, results, strict=True):
            _record_event(target, record, result)

    return describe


def _turn_appended(records: Sequence[Record]) -> Callable[[Span, TurnAppend], None]:
    """A planner turn's write: the batch, then the records of each steering message taken."""
    batch = _batch_appended(records)

    def describe(target: Span, result: TurnAppend) -> None:
        batch(target, result.results)
        target.set_attribute("agentledger.store.steered", len(result.steered))
        built = [r for m in result.steered for r in steered_records(records[-1], m)]
        for record, landed in zip(built, result.steered_records, strict=False):
            _record_event(target, record, landed)

    return describe


def _started(cmd: _Start) -> Callable[[Span, StartResult], None]:
    def describe(target: Span, result: StartResult) -> None:
        target.set_attribute("agentledger.store.start_outcome", result.outcome.value)
        _inserted(target, result.started)
        linked = getattr(cmd, "parent_linked", None)
        if linked is not None and result.parent_record is not None:
            _record_event(target, linked, result.parent_record)
        _record_event(target, cmd.started, result.started)
        for record, landed in zip(cmd.records, result.records, strict=False):
            _record_event(target, record, landed)
        canceled = getattr(cmd, "canceled", None)
        if canceled is not None and result.canceled is not None:
            _record_event(target, canceled, result.canceled)

    return describe


def _repaired(target: Span, result: RepairResult) -> None:
    target.set_attribute("agentledger.store.repair_outcome", result.outcome.value)
    record = result.record
    target.add_event(
        RECORD_EVENT,
        {
            "agentledger.record.id": record.id,
            "agentledger.record.run_id": record.run_id,
            "agentledger.record.event_key": record.event_key,
            "agentledger.record.type": record.type,
        },
    )


def _saved(call_key: str, data: bytes) -> Callable[[Span, bytes], None]:
    """A saved tool result: its call key, and whether the store kept these bytes or others."""

    def describe(target: Span, kept: bytes) -> None:
        target.set_attribute("agentledger.tool_result.call_key", call_key)
        target.set_attribute("agentledger.store.outcome", "kept" if kept == data else "adopted")

    return describe


def _paged(target: Span, page: Page) -> None:
    target.set_attribute("agentledger.store.records", len(page.records))


class TracedStore(StoreOperations):
    """``inner`` with an ``agentledger.store {method}`` span around every operation.

    Attributes: ``agentledger.store.method``, ``agentledger.store.backend``
    (the inner class), ``agentledger.run.id`` (or ``agentledger.session.id``),
    ``agentledger.store.inserted`` / ``outcome`` (``inserted`` or ``retried``)
    for writes; one ``agentledger.record`` event per record id written;
    ``agentledger.tool_result.call_key`` and ``outcome`` (``kept`` or
    ``adopted``: another attempt's bytes) for a saved tool result.
    Errors are recorded with their class (``RecordConflictError``,
    ``TransientError`` ...); each retry of an operation is its own span.
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self._backend = type(inner).__name__

    def __repr__(self) -> str:
        return f"TracedStore({self.inner!r})"

    def perform(self, op: Operation[Req, Resp], request: Req, /) -> Coroutine[Any, Any, Resp]:
        """The inner store's operation, in a span while tracing is on (else its own coroutine)."""
        found = tracer()
        job = op.invoke(self.inner, request)
        if found is None:
            return job
        attributes: dict[str, AttributeValue] = {
            "agentledger.store.method": op.name,
            "agentledger.store.backend": self._backend,
        }
        key, value = _named(op, request)
        attributes[key] = value
        describer = _DESCRIBERS.get(op)
        describe = None if describer is None else describer(request)

        async def run() -> Resp:
            with span(found, f"agentledger.store {op.name}", attributes, kind="client") as opened:
                result = await job
                if describe is not None:
                    describe(opened, result)
                return result

        return run()


def _named(op: Operation[Any, Any], request: object) -> tuple[str, str]:
    """The span's subject: the run a call starts, else the first run it names, else its
    session (a request too malformed to name one leaves it empty, for the store to refuse)."""
    try:
        touched = op.touches(request)
    except (AttributeError, TypeError, IndexError):
        return "agentledger.run.id", ""
    for touch in touched:
        if touch.kind == "run" and touch.new:
            return "agentledger.run.id", touch.id
    for touch in touched:
        if touch.kind == "run":
            return "agentledger.run.id", touch.id
    for touch in touched:
        if touch.kind == "session":
            return "agentledger.session.id", touch.id
    return "agentledger.run.id", ""


_DESCRIBERS: dict[Operation[Any, Any], Callable[[Any], Callable[[Span, Any], None]]] = {
    ops.START_ROOT_RUN: _started,
    ops.START_CHILD_RUN: _started,
    ops.START_ONE_SHOT_RUN: _started,
    ops.START_ONE_SHOT_CHILD_RUN: _started,
    ops.APPEND_RUN_RECORD: lambda record: _appended(record),
    ops.APPEND_RUN_RECORDS: lambda batch: _batch_appended(batch.records),
    ops.APPEND_TURN_RECORDS: lambda batch: _turn_appended(batch.records),
    ops.RECORD_RUN_CANCELLATION: lambda cmd: _appended(cmd.record),
    ops.RECORD_RUN_SUSPENSION: lambda cmd: _appended(cmd.record, cmd.records),
    ops.RECORD_RUN_TERMINAL: lambda cmd: _appended(cmd.record, cmd.records),
    ops.REPAIR_RUN_SUSPENSION: lambda cmd: _repaired,
    ops.REPAIR_RUN_TERMINAL: lambda cmd: _repaired,
    ops.SAVE_TOOL_RESULT: lambda save: _saved(save.call_key, save.data),
    ops.LIST_RUN_RECORDS: lambda query: _paged,
    ops.LIST_SESSION_RUN_RECORDS: lambda query: _paged,
}
"""What a span records of each operation's result, beyond its method and subject."""


def traced_store(store: Store) -> Store:
    """``store`` wrapped in a :class:`TracedStore`, or itself when OpenTelemetry is absent."""
    if isinstance(store, TracedStore) or not available():
        return store
    return TracedStore(store)
