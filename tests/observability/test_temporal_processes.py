"""One trace across processes: the client here, the runs on two worker processes."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags
from temporalio.client import Client

from agentledger.storage.sqlite import SQLiteStore
from tests.engine.temporal.harness import temporal_runtime
from tests.engine.temporal.processes import WorkerProcess
from tests.observability.conftest import Spans
from tests.observability.support import SCENARIOS, SPANS_ENV, check_store_spans, draw, one_trace


def _context(trace_id: int, span_id: int) -> SpanContext:
    return SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(1))


def exported(path: Path) -> list[dict[str, Any]]:
    """The spans one worker process exported, as JSON objects (``apps.JsonLinesExporter``).

    Read only after the process has exited: its tracer provider flushes every span at exit.
    A worker that was given no task exports no span and so writes no file: that is no span,
    not a missing one (which worker polls a task first is up to the server and the load).
    """
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def read_spans(lines: list[dict[str, Any]]) -> list[ReadableSpan]:
    """The exported spans as SDK spans, for the tree and trace checks."""
    found = []
    for s in lines:
        parent = s["parent_id"]
        found.append(
            ReadableSpan(
                name=s["name"],
                context=_context(s["trace_id"], s["span_id"]),
                parent=_context(s["trace_id"], parent) if parent is not None else None,
                attributes=s["attributes"],
                events=[Event(e["name"], e["attributes"]) for e in s["events"]],
                start_time=s["start_time"],
                end_time=s["end_time"],
            )
        )
    return found


async def test_one_trace_across_worker_processes(
    spans: Spans,
    temporal_client: Client,
    temporal_address: str,
    store: SQLiteStore,
    session: str,
    tmp_path: Path,
) -> None:
    """A child run on worker processes: the client's span, the workflows' and the activities'
    spans from every process form one trace with the in-process tree."""
    queue = f"otel-{uuid.uuid4().hex[:12]}"
    files = [tmp_path / f"spans-{i}.jsonl" for i in range(2)]
    workers = [
        WorkerProcess(
            temporal=temporal_address,
            db=store.path,
            task_queue=queue,
            app="tests.observability.apps:setup",
            env={SPANS_ENV: str(f)},
        ).start()
        for f in files
    ]
    try:
        scenario = SCENARIOS["child_run"]()
        async with temporal_runtime(
            temporal_client, store, scenario.setup, task_queue=queue, worker=False
        ) as runtime:
            runs = await scenario.drive(runtime, session)
    finally:
        # A clean exit (status 0) is the condition the files wait for: each worker's
        # provider has flushed its last spans on the way out.
        for w in workers:
            assert w.stop() == 0, w.output()
    lines = {w.pid: exported(f) for w, f in zip(workers, files, strict=True)}
    for pid, found in lines.items():
        assert {s["pid"] for s in found} <= {pid}  # each process writes only its own file
    assert any(lines.values()), "no worker process exported a span"
    here = list(spans.finished())
    there = read_spans([s for found in lines.values() for s in found])
    assert [s.name for s in here] == ["test"]  # nothing of the run was traced in this process
    finished = here + there
    assert draw(finished) == scenario.expected
    one_trace(finished)
    await check_store_spans(finished, store, runs)
