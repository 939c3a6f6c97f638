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
from tests.runtime.effects_crash_worker import charge_tool, count, step_tools
from tests.runtime.support import chat_runtime, now_ms, records, types, valid_transcript

ROOT = Path(__file__).resolve().parents[2]


async def _kill_inside_the_tool(
    path: Path, counter: Path, run_id: str = "pay-1", mode: str = ""
) -> None:
    """Run the worker until its once tool has done its side effect (and, ``parallel``, the
    keyed one has started and the retry one has saved its result), then SIGKILL it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    worker = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "tests.runtime.effects_crash_worker"],
        *[str(path), "s1", run_id, str(counter), mode],
        cwd=ROOT,
        env=env,
    )
    store = await SQLiteStore.open(path)

    async def there() -> bool:
        if count(counter) != 1:
            return False
        if mode != "parallel":
            return True
        keys = counter.with_suffix(".keys")
        saved = await store.load_tool_result(run_id, "turn:1:tool:k2:result")
        return saved is not None and keys.exists()

    try:
        deadline = time.monotonic() + 30
        while not await there():
            assert worker.returncode is None, "the worker died on its own"
            assert time.monotonic() < deadline, "the worker never reached its tool"
            await asyncio.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGKILL)
        await asyncio.wait_for(worker.wait(), 10)
        await store.close()


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


async def test_repair_of_a_parallel_step_keeps_what_ran_and_reruns_what_may(
    tmp_path: Path,
) -> None:
    """Killed inside a step of three parallel calls: the retry call's saved result is
    recorded by the repair, the once call is in doubt, and after the answer the keyed call
    (no result) runs again with its first key and the next attempt; the retry tool and
    the once tool each acted once."""
    path, counter = tmp_path / "par.db", tmp_path / "charges"
    store = await SQLiteStore.open(path)
    try:
        await store.create_session("s1", created_at=now_ms())
        await _kill_inside_the_tool(path, counter, "par-1", "parallel")
        model = ScriptedModel([reply("All done.")])
        runtime = chat_runtime(
            store, model, tools=step_tools(counter, hang=False), stream=QueueSink()
        )
        repaired = await runtime.ensure_run_completion("par-1")
        assert repaired.status is RunStatus.SUSPENDED
        logged = await records(store, "par-1")
        results = [r for r in logged if r.type == "tool_result_received"]
        assert [r.event_key for r in results] == ["turn:1:tool:k2:result"]
        checkpoint = RunCheckpoint.decode((await store.load_run_suspension("par-1")).data)
        assert [d.tool_call_id for d in checkpoint.in_doubt] == ["k1"]
        assert [o.tool_call_id for o in checkpoint.results] == ["k2"]
        client = runtime.agent_client("chat")
        out = await client.resume("s1", "par-1", ToolHappened("charged 500"))
        assert out.status is RunStatus.COMPLETED, out.failure
        assert count(counter) == 1
        assert count(counter.with_suffix(".quotes")) == 1
        key = idempotency_key("par-1", "k3")
        assert counter.with_suffix(".keys").read_text().splitlines() == [f"{key} 1", f"{key} 2"]
        messages = await valid_transcript(store, out.run_id)
        got = {
            p.tool_use_id: p.content
            for m in messages
            for p in m.parts
            if isinstance(p, ToolResultPart)
        }
        assert got == {"k1": "charged 500", "k2": "5 EUR", "k3": "reserved"}
    finally:
        await store.close()
