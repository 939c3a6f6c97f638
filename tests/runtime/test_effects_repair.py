"""Repair of a process killed inside a ``once`` tool: the run asks, it does not fail."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

from agentledger.runtime import QueueSink, ToolHappened, events, idempotency_key
from agentledger.runtime.checkpoint import RunCheckpoint
from agentledger.storage import RunStatus
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply
from agentledger.transcript import ToolResultPart
from tests.runtime.effects_crash_worker import charge_tool, count
from tests.runtime.support import chat_runtime, now_ms, records, types, valid_transcript

ROOT = Path(__file__).resolve().parents[2]


async def _kill_inside_the_tool(path: Path, counter: Path) -> None:
    """Run the worker until its once tool has done its side effect, then SIGKILL it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    worker = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "tests.runtime.effects_crash_worker"],
        *[str(path), "s1", "pay-1", str(counter)],
        cwd=ROOT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while count(counter) != 1:
            assert worker.returncode is None, "the worker died on its own"
            assert time.monotonic() < deadline, "the worker never reached its tool"
            await asyncio.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGKILL)
        await asyncio.wait_for(worker.wait(), 10)


async def test_repair_after_sigkill_in_a_once_tool_asks_the_host(tmp_path: Path) -> None:
    path, counter = tmp_path / "pay.db", tmp_path / "charges"
    store = await SQLiteStore.open(path)
    try:
        await store.create_session("s1", created_at=now_ms())
        await _kill_inside_the_tool(path, counter)
        assert (await store.load_run("pay-1")).status is RunStatus.RUNNING
        kinds = await types(store, "pay-1")
        assert kinds[-2:] == ["tool_call_scheduled", "tool_call_started"]

        model = ScriptedModel([reply("Paid.")])
        sink = QueueSink()
        runtime = chat_runtime(store, model, tools=[charge_tool(counter, hang=False)], stream=sink)
        first = await runtime.ensure_run_completion("pay-1")
        again = await runtime.ensure_run_completion("pay-1")
        assert first.repaired
        assert first.status is RunStatus.SUSPENDED
        assert not again.repaired
        assert again.record == first.record
        assert any(isinstance(e, events.RunSuspended) for e in sink.events)
        checkpoint = RunCheckpoint.decode((await store.load_run_suspension("pay-1")).data)
        assert checkpoint.kind == "in_doubt"
        doubt = checkpoint.in_doubt[0]
        assert (doubt.tool_name, doubt.tool_call_id, doubt.attempt) == ("charge", "k1", 1)
        assert doubt.key == idempotency_key("pay-1", "k1")
        started = [r for r in await records(store, "pay-1") if r.type == "tool_call_started"]
        assert doubt.started_at == started[0].timestamp
        await valid_transcript(store, "pay-1")

        client = runtime.agent_client("chat")
        out = await client.resume("s1", "pay-1", ToolHappened("charged 500", by="support"))
        assert out.status is RunStatus.COMPLETED, out.failure
        assert out.text == "Paid."
        assert count(counter) == 1  # charged once, never again
        messages = await valid_transcript(store, out.run_id)
        result = next(p for m in messages for p in m.parts if isinstance(p, ToolResultPart))
        assert (result.content, result.is_error) == ("charged 500", False)
    finally:
        await store.close()
