"""TracedStore: one span per operation, inserted or retried, typed errors, record ids as events."""

from __future__ import annotations

from datetime import timedelta

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from agentledger.engine import InProcessEngine, RetryPolicy
from agentledger.errors import RecordConflictError, TransientError
from agentledger.observability import RECORD_EVENT, TracedStore
from agentledger.runtime import Agent, ModelPlanner, Runtime, user_message
from agentledger.storage import RecordBuilder, RunStart, RunStatus
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.observability.conftest import Spans
from tests.observability.support import weather
from tests.runtime.support import now_ms, records
from tests.runtime.test_failures import Faulty


def _store_spans(spans: Spans, method: str) -> list[ReadableSpan]:
    found = [s for s in spans.finished() if s.name == f"agentledger.store {method}"]
    return sorted(found, key=lambda s: s.start_time or 0)


def _events(span: ReadableSpan) -> list[dict[str, object]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == RECORD_EVENT]


async def test_writes_name_their_records(spans: Spans, store: SQLiteStore, session: str) -> None:
    """A start and an append: CLIENT spans with the run id, inserted, then retried on repeat."""
    traced = TracedStore(store)
    run = RunStart(run_id="r1", agent_id="a", session_id=session, started_at=now_ms())
    builder = RecordBuilder(run)
    await traced.start_root_run(builder.root_start())
    note = builder.record("note", b'{"n":1}', event_key="k1", at=now_ms())
    first = await traced.append_run_record(note)
    again = await traced.append_run_record(note)  # an exact retry
    assert (first.inserted, again.inserted) == (True, False)
    [start] = _store_spans(spans, "start_root_run")
    stored = await records(store, "r1")
    assert start.kind is SpanKind.CLIENT
    assert (start.attributes or {})["agentledger.run.id"] == "r1"
    assert (start.attributes or {})["agentledger.store.backend"] == "SQLiteStore"
    assert _events(start) == [
        {
            "agentledger.record.id": stored[0].id,
            "agentledger.record.run_id": "r1",
            "agentledger.record.event_key": stored[0].event_key,
            "agentledger.record.type": "run_started",
            "agentledger.record.inserted": True,
        }
    ]
    appended = _store_spans(spans, "append_run_record")
    assert [(s.attributes or {})["agentledger.store.outcome"] for s in appended] == [
        "inserted",
        "retried",
    ]
    assert [e["agentledger.record.id"] for s in appended for e in _events(s)] == [first.id] * 2


async def test_a_batch_names_each_record(spans: Spans, store: SQLiteStore, session: str) -> None:
    """[B1] One span per batch: ``mixed`` when some records were stored before, one event each."""
    traced = TracedStore(store)
    run = RunStart(run_id="r3", agent_id="a", session_id=session, started_at=now_ms())
    builder = RecordBuilder(run)
    await traced.start_root_run(builder.root_start())
    one = builder.record("note", b'{"n":1}', event_key="k1", at=now_ms())
    two = builder.record("note", b'{"n":2}', event_key="k2", at=now_ms())
    await traced.append_run_records([one])
    results = await traced.append_run_records([one, two])
    assert [r.inserted for r in results] == [False, True]
    first, batch = _store_spans(spans, "append_run_records")
    assert (first.attributes or {})["agentledger.store.outcome"] == "inserted"
    assert (batch.attributes or {})["agentledger.store.outcome"] == "mixed"
    assert (batch.attributes or {})["agentledger.store.records"] == 2
    assert [(e["agentledger.record.event_key"], e["agentledger.record.inserted"])
            for e in _events(batch)] == [("k1", False), ("k2", True)]  # fmt: skip


async def test_errors_carry_their_class(spans: Spans, store: SQLiteStore, session: str) -> None:
    """A conflicting write fails its span with ``error.type`` RecordConflictError, unchanged."""
    traced = TracedStore(store)
    run = RunStart(run_id="r2", agent_id="a", session_id=session, started_at=now_ms())
    builder = RecordBuilder(run)
    await traced.start_root_run(builder.root_start())
    await traced.append_run_record(builder.record("note", b"1", event_key="k", at=now_ms()))
    later = now_ms() + timedelta(seconds=1)
    with pytest.raises(RecordConflictError):
        await traced.append_run_record(builder.record("note", b"2", event_key="k", at=later))
    failed = _store_spans(spans, "append_run_record")[-1]
    assert failed.status.status_code is StatusCode.ERROR
    assert (failed.attributes or {})["error.type"] == "RecordConflictError"
    [exception] = [e for e in failed.events if e.name == "exception"]
    assert (exception.attributes or {})["exception.type"] == "RecordConflictError"
    assert _events(failed) == []


async def test_retries_are_separate_attempts(
    spans: Spans, store: SQLiteStore, session: str
) -> None:
    """A write whose answer is lost: a failed TransientError span, then a retried one."""
    faulty = Faulty(store, "start_root_run", 1, TransientError("db busy"), after=True)
    runtime = Runtime(faulty, engine=InProcessEngine(RetryPolicy(initial_interval=0.001)))
    runtime.register_model(
        "m", ScriptedModel([tool_calls(("c1", "weather", {"city": "Oslo"})), reply("Cold.")])
    )
    runtime.register_agent(Agent("chat", ModelPlanner("m", system="Be brief."), tools=[weather]))
    out = await runtime.agent_client("chat").run(session, [user_message("Oslo?")])
    assert out.status is RunStatus.COMPLETED
    first, second = _store_spans(spans, "start_root_run")[:2]
    assert (first.attributes or {})["error.type"] == "TransientError"
    assert (second.attributes or {})["agentledger.store.outcome"] == "retried"
    events = _events(second)  # the start carries the run's first records
    assert events[1]["agentledger.record.event_key"] == "prompt:chat.system"
    assert [e["agentledger.record.inserted"] for e in events] == [False] * len(events)
