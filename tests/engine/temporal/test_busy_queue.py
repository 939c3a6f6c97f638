"""On Temporal the queue is Temporal's: a queued turn starts when the turn ahead ends, once,
in arrival order, even when every process that queued messages is gone (workers alive)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from temporalio.client import Client

from agentledger.engine.temporal import create_replayer, create_worker
from agentledger.engine.temporal.options import EVENTS_PER_RUN, EVENTS_TO_START_DUE
from agentledger.errors import RunNotFoundError
from agentledger.runtime import Agent, QueueSink, Runtime
from agentledger.storage import MessageFate, RunStatus
from agentledger.storage.protocol import Store
from agentledger.storage.replay import build_messages_from_run_log
from tests.engine.temporal.harness import temporal_runtime
from tests.engine.temporal.processes import ROOT
from tests.runtime.support import types
from tests.runtime.test_busy import Echo, _text

_WITHIN = 60


@asynccontextmanager
async def _worker(client: Client, store: Store, planner: Echo, queue: str) -> AsyncIterator[None]:
    """A worker with a runtime of its own: no host runtime follows anything through it."""
    runtime = Runtime(store, stream=QueueSink())
    runtime.register_agent(Agent("chat", planner, if_busy="queue"))
    async with create_worker(runtime, client, queue):
        yield
    await runtime.close()


async def _ended(store: Store, run_id: str) -> None:
    """Wait until ``run_id`` exists in the store and no longer runs."""
    while True:
        try:
            if (await store.load_run(run_id)).status is not RunStatus.RUNNING:
                return
        except RunNotFoundError:
            pass
        await asyncio.sleep(0.02)


async def _answer(store: Store, run_id: str) -> str:
    transcript = await build_messages_from_run_log(store, run_id, full=True)
    assert transcript[-1].role == "assistant"
    return _text(transcript[-1])


async def _check_ran_once_in_order(store: Store, session: str, ids: dict[str, str]) -> None:
    await asyncio.wait_for(_ended(store, ids["two"]), _WITHIN)
    for key in ("first", "one", "two"):
        assert (await store.load_run(ids[key])).status is RunStatus.COMPLETED
    assert await _answer(store, ids["one"]) == "re: one (2 user messages)"
    assert await _answer(store, ids["two"]) == "re: two (3 user messages)"  # after "one"
    for key in ("one", "two"):
        kinds = await types(store, ids[key])
        assert kinds.count("run_started") == 1
        assert kinds.count("run_completed") == 1
    runs = [r.run_id for r in await store.list_runs_by_session(session)]
    assert runs == [ids["first"], ids["one"], ids["two"]]  # one run per message, in order
    assert await store.load_pending_messages(session) == []


async def test_the_worker_starts_queued_turns_after_the_host_closed(
    temporal_client: Client, store: Store, session: str
) -> None:
    """The host queues two messages and closes its runtime: the worker alone starts them."""
    planner = Echo()
    queue = f"test-{uuid.uuid4().hex[:12]}"

    def setup(runtime: Runtime) -> None:
        runtime.register_agent(Agent("chat", Echo(), if_busy="queue"))

    async with _worker(temporal_client, store, planner, queue):
        async with temporal_runtime(
            temporal_client, store, setup, task_queue=queue, worker=False
        ) as host:
            chat = host.agent_client("chat")
            first = await chat.start(session, "please wait")
            await asyncio.wait_for(planner.holding.wait(), _WITHIN)
            one = await chat.start(session, "one")
            two = await chat.start(session, "two")
            assert (one.message.fate, two.message.fate) == (MessageFate.QUEUED, MessageFate.QUEUED)
            await host.close()  # it follows nothing any more
        planner.release.set()
        ids = {"first": first.run_id, "one": one.run_id, "two": two.run_id}
        await _check_ran_once_in_order(store, session, ids)
    for key in ("first", "two"):  # the step that started the next turn replays (or had none)
        history = await temporal_client.get_workflow_handle(ids[key]).fetch_history()
        replayed = await create_replayer().replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None, replayed.replay_failure
        # A message waited behind "first" (its workflow took the step that starts it);
        # none behind "two" (its ending said so: no step at all).
        waited = EVENTS_TO_START_DUE if key == "first" else 0
        assert len(history.events) == EVENTS_PER_RUN + waited


async def test_the_worker_starts_queued_turns_after_the_host_was_killed(
    temporal_client: Client,
    temporal_address: str,
    store: Store,
    store_kind: str,
    worker_db: str,
    session: str,
) -> None:
    """A host process queues two messages behind a running turn and is SIGKILLed."""
    planner = Echo()
    queue = f"test-{uuid.uuid4().hex[:12]}"
    name = f"h-{uuid.uuid4().hex[:8]}"
    async with _worker(temporal_client, store, planner, queue):
        host = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.engine.temporal.busy_host",
            temporal_address, queue, store_kind, worker_db, session, name,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"},
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            assert host.stdout is not None
            line = await asyncio.wait_for(host.stdout.readline(), _WITHIN)
            assert line, f"the host exited ({await host.wait()})"
            ids = json.loads(line)
        finally:
            host.send_signal(signal.SIGKILL)
            await asyncio.wait_for(host.wait(), _WITHIN)
        (one, two) = await store.load_pending_messages(session)
        assert (one.run_id, two.run_id) == (ids["one"], ids["two"])
        assert (await store.load_run(ids["first"])).status is RunStatus.RUNNING
        planner.release.set()
        await _check_ran_once_in_order(store, session, ids)


async def test_a_host_that_follows_and_the_worker_start_each_turn_once(
    temporal_client: Client, store: Store, session: str
) -> None:
    """The host still follows the turn ahead while the worker starts what is due: of their
    two starts of a turn Temporal accepts one, and the host's handles follow that one."""
    planner = Echo()
    queue = f"test-{uuid.uuid4().hex[:12]}"

    def setup(runtime: Runtime) -> None:
        runtime.register_agent(Agent("chat", Echo(), if_busy="queue"))

    async with (
        _worker(temporal_client, store, planner, queue),
        temporal_runtime(temporal_client, store, setup, task_queue=queue, worker=False) as host,
    ):
        chat = host.agent_client("chat")
        first = await chat.start(session, "please wait")
        await asyncio.wait_for(planner.holding.wait(), _WITHIN)
        one = await chat.start(session, "one")
        two = await chat.start(session, "two")
        planner.release.set()
        outs = await asyncio.wait_for(asyncio.gather(one.wait(), two.wait()), _WITHIN)
        assert [o.text for o in outs] == [
            "re: one (2 user messages)", "re: two (3 user messages)"
        ]  # fmt: skip
        ids = {"first": first.run_id, "one": one.run_id, "two": two.run_id}
        await _check_ran_once_in_order(store, session, ids)
        await host.close()


async def test_a_turn_whose_workflow_another_started_is_followed_not_started_again(
    temporal_client: Client, store: Store, session: str
) -> None:
    """A runtime opening the session finds the due turn's workflow already started (by the
    worker or another host): Temporal refuses its start, and it follows that workflow."""
    planner = Echo()
    queue = f"test-{uuid.uuid4().hex[:12]}"

    def setup(runtime: Runtime) -> None:
        runtime.register_agent(Agent("chat", Echo(), if_busy="queue"))

    async with temporal_runtime(temporal_client, store, setup, task_queue=queue, worker=False) as a:
        one = await a.agent_client("chat").start(session, "one")  # no worker yet: not run
        (pending,) = await store.load_pending_messages(session)
        assert pending.run_id == one.run_id
        async with temporal_runtime(
            temporal_client, store, setup, task_queue=queue, worker=False
        ) as b:
            assert await b.start_queued(session) == []  # its workflow exists: not again
            async with _worker(temporal_client, store, planner, queue):
                assert (await asyncio.wait_for(one.wait(), _WITHIN)).text == (
                    "re: one (1 user messages)"
                )
            await b.close()
        await a.close()
    kinds = await types(store, one.run_id)
    assert (kinds.count("run_started"), kinds.count("run_completed")) == (1, 1)
    assert [r.run_id for r in await store.list_runs_by_session(session)] == [one.run_id]
