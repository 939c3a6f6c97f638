"""TracedStore: any ``Store`` with one span per operation and the ids it wrote as events.

The runtime wraps its store once (:func:`traced_store`); backends know
nothing of tracing. While tracing is off each method hands back the inner
store's own coroutine, so the wrapper costs one call and one lookup.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from agentledger.observability.tracing import available, span, tracer
from agentledger.storage.protocol import DEFAULT_PAGE_LIMIT, Store
from agentledger.storage.types import (
    AppendResult,
    Checkpoint,
    ChildRunStart,
    OneShotChildRunStart,
    OneShotRunStart,
    Page,
    Record,
    RepairResult,
    RootRunStart,
    RunCancellation,
    RunMeta,
    RunSuspension,
    RunTerminal,
    SessionStatus,
    StartResult,
    TranscriptSegment,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.util.types import AttributeValue

__all__ = ["RECORD_EVENT", "TracedStore", "traced_store"]

R = TypeVar("R")

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


class TracedStore:
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

    def _traced(
        self,
        found: Tracer,
        method: str,
        key: tuple[str, str],
        job: Awaitable[R],
        describe: Callable[[Span, R], None] | None = None,
    ) -> Coroutine[Any, Any, R]:
        attributes: dict[str, AttributeValue] = {
            "agentledger.store.method": method,
            "agentledger.store.backend": self._backend,
            key[0]: key[1],
        }

        async def run() -> R:
            with span(found, f"agentledger.store {method}", attributes, kind="client") as opened:
                result = await job
                if describe is not None:
                    describe(opened, result)
                return result

        return run()

    # ----------------------------------------------------------------- writes

    def start_root_run(self, cmd: RootRunStart, /) -> Coroutine[Any, Any, StartResult]:
        found = tracer()
        job = self.inner.start_root_run(cmd)
        if found is None:
            return job
        run_id = ("agentledger.run.id", cmd.run.run_id)
        return self._traced(found, "start_root_run", run_id, job, _started(cmd))

    def start_child_run(self, cmd: ChildRunStart, /) -> Coroutine[Any, Any, StartResult]:
        found = tracer()
        job = self.inner.start_child_run(cmd)
        if found is None:
            return job
        run_id = ("agentledger.run.id", cmd.run.run_id)
        return self._traced(found, "start_child_run", run_id, job, _started(cmd))

    def start_one_shot_run(self, cmd: OneShotRunStart, /) -> Coroutine[Any, Any, StartResult]:
        found = tracer()
        job = self.inner.start_one_shot_run(cmd)
        if found is None:
            return job
        run_id = ("agentledger.run.id", cmd.run.run_id)
        return self._traced(found, "start_one_shot_run", run_id, job, _started(cmd))

    def start_one_shot_child_run(
        self, cmd: OneShotChildRunStart, /
    ) -> Coroutine[Any, Any, StartResult]:
        found = tracer()
        job = self.inner.start_one_shot_child_run(cmd)
        if found is None:
            return job
        run_id = ("agentledger.run.id", cmd.run.run_id)
        return self._traced(found, "start_one_shot_child_run", run_id, job, _started(cmd))

    def append_run_record(self, record: Record, /) -> Coroutine[Any, Any, AppendResult]:
        found = tracer()
        job = self.inner.append_run_record(record)
        if found is None:
            return job
        run_id = ("agentledger.run.id", record.run_id)
        return self._traced(found, "append_run_record", run_id, job, _appended(record))

    def append_run_records(
        self, records: Sequence[Record], /
    ) -> Coroutine[Any, Any, list[AppendResult]]:
        found = tracer()
        job = self.inner.append_run_records(records)
        if found is None:
            return job
        run_id = ("agentledger.run.id", records[0].run_id if records else "")
        return self._traced(found, "append_run_records", run_id, job, _batch_appended(records))

    def record_run_cancellation(self, cmd: RunCancellation, /) -> Coroutine[Any, Any, AppendResult]:
        found = tracer()
        job = self.inner.record_run_cancellation(cmd)
        if found is None:
            return job
        run_id = ("agentledger.run.id", cmd.run_id)
        return self._traced(found, "record_run_cancellation", run_id, job, _appended(cmd.record))

    def record_run_suspension(self, cmd: RunSuspension, /) -> Coroutine[Any, Any, AppendResult]:
        found = tracer()
        job = self.inner.record_run_suspension(cmd)
        if found is None:
            return job
        run_id = ("agentledger.run.id", cmd.run_id)
        return self._traced(
            found, "record_run_suspension", run_id, job, _appended(cmd.record, cmd.records)
        )

    def record_run_terminal(self, cmd: RunTerminal, /) -> Coroutine[Any, Any, AppendResult]:
        found = tracer()
        job = self.inner.record_run_terminal(cmd)
        if found is None:
            return job
        run_id = ("agentledger.run.id", cmd.run_id)
        return self._traced(
            found, "record_run_terminal", run_id, job, _appended(cmd.record, cmd.records)
        )

    def repair_run_suspension(self, cmd: RunSuspension, /) -> Coroutine[Any, Any, RepairResult]:
        found = tracer()
        job = self.inner.repair_run_suspension(cmd)
        if found is None:
            return job
        run_id = ("agentledger.run.id", cmd.run_id)
        return self._traced(found, "repair_run_suspension", run_id, job, _repaired)

    def repair_run_terminal(self, cmd: RunTerminal, /) -> Coroutine[Any, Any, RepairResult]:
        found = tracer()
        job = self.inner.repair_run_terminal(cmd)
        if found is None:
            return job
        run_id = ("agentledger.run.id", cmd.run_id)
        return self._traced(found, "repair_run_terminal", run_id, job, _repaired)

    # ------------------------------------------------------------------ reads

    def load_run(self, run_id: str, /) -> Coroutine[Any, Any, RunMeta]:
        found = tracer()
        job = self.inner.load_run(run_id)
        if found is None:
            return job
        return self._traced(found, "load_run", ("agentledger.run.id", run_id), job)

    def load_session_status(self, session_id: str, /) -> Coroutine[Any, Any, SessionStatus]:
        found = tracer()
        job = self.inner.load_session_status(session_id)
        if found is None:
            return job
        key = ("agentledger.session.id", session_id)
        return self._traced(found, "load_session_status", key, job)

    def save_tool_result(
        self, run_id: str, call_key: str, data: bytes, /
    ) -> Coroutine[Any, Any, bytes]:
        found = tracer()
        job = self.inner.save_tool_result(run_id, call_key, data)
        if found is None:
            return job
        run = ("agentledger.run.id", run_id)
        return self._traced(found, "save_tool_result", run, job, _saved(call_key, data))

    def load_tool_result(self, run_id: str, call_key: str, /) -> Coroutine[Any, Any, bytes | None]:
        found = tracer()
        job = self.inner.load_tool_result(run_id, call_key)
        if found is None:
            return job
        return self._traced(found, "load_tool_result", ("agentledger.run.id", run_id), job)

    def load_run_suspension(self, run_id: str, /) -> Coroutine[Any, Any, Checkpoint]:
        found = tracer()
        job = self.inner.load_run_suspension(run_id)
        if found is None:
            return job
        return self._traced(found, "load_run_suspension", ("agentledger.run.id", run_id), job)

    def list_run_records(
        self, run_id: str, /, cursor: str = "", limit: int = DEFAULT_PAGE_LIMIT
    ) -> Coroutine[Any, Any, Page]:
        found = tracer()
        job = self.inner.list_run_records(run_id, cursor=cursor, limit=limit)
        if found is None:
            return job
        key = ("agentledger.run.id", run_id)
        return self._traced(found, "list_run_records", key, job, _paged)

    def load_transcript_chain(
        self, run_id: str, /, *, windowed: bool = False
    ) -> Coroutine[Any, Any, tuple[TranscriptSegment, ...]]:
        found = tracer()
        job = self.inner.load_transcript_chain(run_id, windowed=windowed)
        if found is None:
            return job
        key = ("agentledger.run.id", run_id)
        return self._traced(found, "load_transcript_chain", key, job)

    def list_session_run_records(
        self, session_id: str, /, cursor: str = "", limit: int = DEFAULT_PAGE_LIMIT
    ) -> Coroutine[Any, Any, Page]:
        found = tracer()
        job = self.inner.list_session_run_records(session_id, cursor=cursor, limit=limit)
        if found is None:
            return job
        key = ("agentledger.session.id", session_id)
        return self._traced(found, "list_session_run_records", key, job, _paged)


def traced_store(store: Store) -> Store:
    """``store`` wrapped in a :class:`TracedStore`, or itself when OpenTelemetry is absent."""
    if isinstance(store, TracedStore) or not available():
        return store
    return TracedStore(store)
