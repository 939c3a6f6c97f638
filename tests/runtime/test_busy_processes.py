"""A message while a run is busy, across processes: a process killed after queueing, and
messages sent at the same moment by several processes (SQLite, PostgreSQL, the service)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentledger.runtime import QueueSink, RunHandle
from agentledger.storage import RunStatus
from tests.runtime.support import now_ms, types
from tests.runtime.test_busy import Echo, _runtime

pytestmark = pytest.mark.asyncio

ROOT = Path(__file__).resolve().parents[2]
_TIMEOUT = 60


@pytest.fixture(params=["sqlite", "postgres", "service"])
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """A backend kind and what a worker process opens it with."""
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path / "busy.db")
    elif request.param == "postgres":
        yield "postgres", request.getfixturevalue("postgres_dsn")
    else:
        url, token = request.getfixturevalue("served")
        yield "service", f"{url} {token}"


async def _open(kind: str, where: str) -> Any:
    from tests.runtime.busy_worker import open_store

    return await open_store(kind, where)


async def _spawn(kind: str, where: str, session: str, mode: str, name: str) -> Any:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.runtime.busy_worker", kind, where, session, mode, name,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def _line(process: Any) -> str:
    line = await asyncio.wait_for(process.stdout.readline(), _TIMEOUT)
    assert line, f"the worker exited ({await process.wait()})"
    return str(line.decode().strip())


async def test_a_process_killed_after_queueing(target: tuple[str, str]) -> None:
    """The queued message still runs, once, when another runtime repairs the turn ahead."""
    kind, where = target
    store = await _open(kind, where)
    session = f"s-{uuid.uuid4().hex}"
    await store.create_session(session, created_at=now_ms())
    worker = await _spawn(kind, where, session, "queue_then_hang", f"k-{uuid.uuid4().hex[:8]}")
    try:
        ids = json.loads(await _line(worker))
    finally:
        worker.send_signal(signal.SIGKILL)
        await asyncio.wait_for(worker.wait(), _TIMEOUT)
    assert (await store.load_run(ids["first"])).status is RunStatus.RUNNING
    (pending,) = await store.load_pending_messages(session)
    assert pending.run_id == ids["queued"]
    runtime = _runtime(store, Echo())
    await runtime.ensure_run_completion(ids["first"])  # repair: the turn ahead ends
    assert (await store.load_run(ids["first"])).status is RunStatus.FAILED
    out = await asyncio.wait_for(RunHandle(runtime, ids["queued"]).wait(), _TIMEOUT)
    assert out.status is RunStatus.COMPLETED
    assert out.text == "re: queued while busy (2 user messages)"
    other = _runtime(store, Echo())  # a second repair, or another runtime opening the session
    await other.ensure_run_completion(ids["first"])
    assert await other.start_queued(session) == []
    kinds = await types(store, ids["queued"])
    assert kinds.count("run_started") == 1
    assert kinds.count("run_completed") == 1
    assert await store.load_pending_messages(session) == []
    await runtime.close()
    await other.close()
    await store.close()


async def test_a_process_killed_between_a_steer_and_its_take(target: tuple[str, str]) -> None:
    """The steering message is not lost: its run, repaired, ended without taking it, so it
    becomes the next turn, once (and is never also taken)."""
    from agentledger.storage import MessageFate
    from tests.runtime.test_busy_steer import _setup

    kind, where = target
    store = await _open(kind, where)
    session = f"s-{uuid.uuid4().hex}"
    await store.create_session(session, created_at=now_ms())
    worker = await _spawn(kind, where, session, "steer_then_hang", f"k-{uuid.uuid4().hex[:8]}")
    try:
        ids = json.loads(await _line(worker))
    finally:
        worker.send_signal(signal.SIGKILL)
        await asyncio.wait_for(worker.wait(), _TIMEOUT)
    (pending,) = await store.load_pending_messages(session)
    assert (pending.run_id, pending.fate) == (ids["steer"], MessageFate.STEERING)
    runtime, planner, _, _, _ = _setup(store)
    await runtime.ensure_run_completion(ids["first"])  # repair: the run ends, untaken
    assert (await store.load_run(ids["first"])).status is not RunStatus.RUNNING
    out = await asyncio.wait_for(RunHandle(runtime, ids["steer"]).wait(), _TIMEOUT)
    assert out.status is RunStatus.COMPLETED
    assert planner.seen[-1][-1] == "cats"
    assert "session_message_steered" not in await types(store, ids["first"])
    kinds = await types(store, ids["steer"])
    assert kinds.count("run_started") == 1
    assert await store.load_pending_messages(session) == []
    await runtime.close()
    await store.close()


async def test_messages_at_the_same_moment_from_several_processes(
    target: tuple[str, str],
) -> None:
    """Each process sends one message at once: one order, every message answered, once."""
    kind, where = target
    store = await _open(kind, where)
    session = f"s-{uuid.uuid4().hex}"
    await store.create_session(session, created_at=now_ms())
    names = [f"p{i}-{uuid.uuid4().hex[:8]}" for i in range(3)]
    workers = [await _spawn(kind, where, session, "race", name) for name in names]
    try:
        for worker in workers:
            assert await _line(worker) == "ready"
        for worker in workers:
            worker.stdin.write(b"go\n")
            await worker.stdin.drain()
        answers = [json.loads(await _line(worker)) for worker in workers]
    finally:
        for worker in workers:
            worker.stdin.close()
        for worker in workers:
            await asyncio.wait_for(worker.wait(), _TIMEOUT)
    by_position = sorted(answers, key=lambda a: a["position"])
    assert [a["position"] for a in by_position] == [1, 2, 3]
    for answer in by_position:
        expected = f"re: message from {answer['run_id']} ({answer['position']} user messages)"
        assert answer["text"] == expected
        kinds = await types(store, answer["run_id"])
        assert kinds.count("run_started") == 1
        assert kinds.count("run_completed") == 1
    stored = await store.list_session_messages(session)
    assert [m.run_id for m in stored] == [a["run_id"] for a in by_position]
    assert all(m.started for m in stored)
    await store.close()


async def test_queue_stream_event(tmp_path: Path) -> None:
    """The stream says each message's fate (a second runtime over the same file)."""
    from agentledger.runtime import events
    from agentledger.storage.sqlite import SQLiteStore

    store = await SQLiteStore.open(tmp_path / "e.db")
    await store.create_session("s", created_at=now_ms())
    sink = QueueSink()
    planner = Echo()
    planner.release.set()
    runtime = _runtime(store, planner, sink)
    out = await runtime.agent_client("chat").run("s", "hi", if_busy="queue")
    (event,) = [e for e in sink.events if isinstance(e, events.MessageSubmitted)]
    assert (event.run_id, event.fate, event.position) == (out.run_id, "start", 1)
    await runtime.close()
    await store.close()
