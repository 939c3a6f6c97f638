"""A run paused on Temporal (its workflow task keeps failing: a bug in the run loop) shows
on its page with the error, in Chromium, when the service knows the Temporal server
(``serve --temporal``, or a host runtime on Temporal); once a worker with fixed code
finishes it, the pause is gone."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from agentledger.engine.temporal import TemporalEngine, connect
from agentledger.engine.temporal.paused import find_pause
from agentledger.runtime import Runtime, user_message
from agentledger.storage import RunStatus
from agentledger.storage.sqlite import SQLiteStore
from tests.engine.temporal import apps
from tests.engine.temporal.processes import WorkerProcess
from tests.service.inspector.conftest import log_in
from tests.service.inspector.temporal_host import QUEUE_ENV, TEMPORAL_ENV
from tests.service.process import ServiceProcess, Tokens

pytestmark = pytest.mark.asyncio(loop_scope="session")

BUG = "a bug in the run loop: KeyError: 'a bug in this deploy'"


@pytest.mark.parametrize("told", ["serve --temporal", "host runtime"])
async def test_a_paused_run_shows_its_error_until_fixed_code_finishes_it(
    page: Page, temporal_address: str, tokens: Tokens, tmp_path: Path, told: str
) -> None:
    db = tmp_path / "paused.db"
    queue = f"inspect-pause-{uuid.uuid4().hex[:12]}"
    store = await SQLiteStore.open(str(db))
    client = await connect(temporal_address)
    runtime = Runtime(store, engine=TemporalEngine(client, task_queue=queue))
    apps.setup(runtime)
    session = f"s-{uuid.uuid4().hex[:12]}"
    await store.create_session(session, created_at=datetime.now(UTC).replace(microsecond=0))
    workers: list[WorkerProcess] = []
    worker = dict(temporal=temporal_address, db=str(db), task_queue=queue,
                  extra=("--sticky-timeout", "1"))  # fmt: skip
    env = {TEMPORAL_ENV: temporal_address, QUEUE_ENV: queue}
    options = ("--temporal", temporal_address)
    if told == "host runtime":
        options = ("--host-runtime", "tests.service.inspector.temporal_host:build")
    service = ServiceProcess(str(db), tokens.path, env=env, options=options).start()
    try:
        workers.append(
            WorkerProcess(**worker, app="tests.engine.temporal.apps:buggy_setup").start()  # type: ignore[arg-type]
        )
        handle = await runtime.agent_client("stepper").start(session, [user_message("fix me")])
        deadline = time.monotonic() + 90
        while await find_pause(client, handle.run_id) is None:
            assert time.monotonic() < deadline, "the run did not pause"
            await asyncio.sleep(0.2)
        await log_in(page, service.url, tokens.reader)
        await page.goto(f"{service.url}/ui/run?id={handle.run_id}")
        await expect(page.locator("#run-status")).to_have_text("running")
        await expect(page.locator("#run-paused-badge")).to_have_text("paused")
        paused = page.locator("#run-paused")
        await expect(paused).to_contain_text(BUG)
        await expect(paused).to_contain_text("its workflow task failed")
        await expect(paused).to_contain_text("continues by itself")
        assert workers[0].stop() == 0, workers[0].output()
        workers.append(WorkerProcess(**worker).start())  # type: ignore[arg-type]
        out = await asyncio.wait_for(handle.wait(), 120)
        assert out.status is RunStatus.COMPLETED, out.failure
        await page.reload()
        await expect(page.locator("#run-status")).to_have_text("completed")
        await expect(page.locator("#run-paused")).to_have_count(0)
        await expect(page.locator("#run-paused-badge")).to_have_count(0)
        if told == "serve --temporal":
            code, _, err = service.stop()
            assert code == 0, err  # no abort in the interpreter's teardown
    finally:
        if service.process is not None and service.process.poll() is None:
            service.kill()
        for one in workers:
            one.kill()
        await store.close()
