"""A host process for the Temporal queue tests: it queues messages, then waits to be killed.

Usage: python -m tests.engine.temporal.busy_host TEMPORAL TASK_QUEUE KIND TARGET SESSION NAME

It runs no worker: its runtime (TemporalEngine on TASK_QUEUE, store KIND
``sqlite`` with TARGET a file or ``postgres`` with TARGET a DSN) starts a turn
that holds (``please wait``), waits until the store shows it running, queues
``one`` then ``two`` behind it, prints ``{"first", "one", "two"}`` (run ids)
and hangs until killed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agentledger.engine.temporal import TemporalEngine, connect
from agentledger.errors import RunNotFoundError
from agentledger.runtime import Agent, QueueSink, Runtime
from tests.runtime.test_busy import Echo


async def open_store(kind: str, target: str) -> Any:
    if kind == "sqlite":
        from agentledger.storage.sqlite import SQLiteStore

        return await SQLiteStore.open(target)
    from agentledger.storage.postgres import PostgresStore

    return await PostgresStore.open(target, min_size=1, max_size=2)


async def main(temporal: str, queue: str, kind: str, target: str, session: str, name: str) -> None:
    store = await open_store(kind, target)
    client = await connect(temporal)
    runtime = Runtime(store, engine=TemporalEngine(client, task_queue=queue), stream=QueueSink())
    runtime.register_agent(Agent("chat", Echo(), if_busy="queue"))
    chat = runtime.agent_client("chat")
    first = await chat.start(session, "please wait", run_id=f"{name}-first")
    while True:  # the worker (in the test's process) has started the turn
        try:
            await store.load_run(first.run_id)
            break
        except RunNotFoundError:
            await asyncio.sleep(0.02)
    one = await chat.start(session, "one", run_id=f"{name}-one")
    two = await chat.start(session, "two", run_id=f"{name}-two")
    print(json.dumps({"first": first.run_id, "one": one.run_id, "two": two.run_id}), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
