"""One trace across processes: the client here, the runs on two worker processes."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

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


def read_spans(path: Path) -> list[ReadableSpan]:
    """The spans a worker process exported (see ``apps.JsonLinesExporter``)."""
    if not path.exists():
        return []
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        s = json.loads(line)
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
        for w in workers:
            assert w.stop() == 0, w.output()
    here = list(spans.finished())
    there = [s for f in files for s in read_spans(f)]
    assert [s.name for s in here] == ["test"]  # nothing of the run was traced in this process
    finished = here + there
    assert draw(finished) == scenario.expected
    one_trace(finished)
    await check_store_spans(finished, store, runs)
    pids = {json.loads(line)["pid"] for f in files for line in f.read_text().splitlines()}
    assert pids <= {w.pid for w in workers}
