"""A process for the busy-session tests: it sends messages to one session, then waits.

Usage: python -m tests.runtime.busy_worker KIND TARGET SESSION_ID MODE NAME

KIND is ``sqlite`` (TARGET a file), ``postgres`` (TARGET a DSN) or ``service``
(TARGET ``URL TOKEN`` joined by a space). MODE:

* ``queue_then_hang``: start a turn that holds, queue a message behind it, print
  ``{"first": run_id, "queued": run_id}``, then hang until killed.
* ``steer_then_hang``: start a turn whose tool holds, send a steering message while
  it does, print ``{"first": run_id, "steer": run_id}``, then hang until killed.
* ``race``: print ``ready``, wait for ``go`` on stdin, send one message
  (``if_busy="queue"``, run id NAME), wait for its turn's end and print
  ``{"run_id", "position", "text"}``; then keep serving the session until stdin
  closes (so a turn queued behind one of its own still starts).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agentledger.runtime import QueueSink
from tests.runtime.test_busy import Echo, _runtime


async def open_store(kind: str, target: str) -> Any:
    if kind == "sqlite":
        from agentledger.storage.sqlite import SQLiteStore

        return await SQLiteStore.open(target)
    if kind == "postgres":
        from agentledger.storage.postgres import PostgresStore

        return await PostgresStore.open(target, min_size=1, max_size=2)
    from agentledger.service import StoreClient

    url, token = target.split(" ")
    return StoreClient(url, token=token)


async def main(kind: str, target: str, session_id: str, mode: str, name: str) -> None:
    store = await open_store(kind, target)
    planner = Echo()
    runtime = _runtime(store, planner, QueueSink(), if_busy="queue")
    client = runtime.agent_client("chat")
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    if mode == "steer_then_hang":
        from tests.runtime.test_busy_steer import _setup

        steered, _, started, _, _ = _setup(store)
        chat = steered.agent_client("chat")
        first = await chat.start(session_id, "look it up", run_id=f"{name}-first", if_busy="queue")
        await started.wait()
        steer = await chat.start(session_id, "cats", run_id=f"{name}-steer", if_busy="steer")
        print(json.dumps({"first": first.run_id, "steer": steer.run_id}), flush=True)
        await asyncio.Event().wait()
    if mode == "queue_then_hang":
        first = await client.start(session_id, "please wait", run_id=f"{name}-first")
        await planner.holding.wait()
        queued = await client.start(session_id, "queued while busy", run_id=f"{name}-queued")
        print(json.dumps({"first": first.run_id, "queued": queued.run_id}), flush=True)
        await asyncio.Event().wait()
    print("ready", flush=True)
    await reader.readline()
    handle = await client.start(session_id, f"message from {name}", run_id=name)
    out = await handle.wait()
    line = {"run_id": name, "position": handle.message.position, "text": out.text}
    print(json.dumps(line), flush=True)
    await reader.read()  # serve the session until the test is done with it
    await runtime.close()
    await store.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
