"""A racing process of :class:`~._processes.ProcessRaceConformance` (run with ``python -m``).

``python -m agentledger.storage.conformance._process_worker OPENER PLAYS``:
opens its own handle with the :class:`~._opener.StoreOpener` (JSON) and, for
each ``(method, command)`` in ``PLAYS`` (pickled, base64), prints ``ready``,
waits for a ``go`` line on stdin (the parent is the barrier), makes the call
and prints its outcome as one JSON line.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import pickle
import sys
from typing import Any

from agentledger.errors import AgentledgerError
from agentledger.storage.conformance._opener import StoreOpener
from agentledger.storage.types import AppendResult, StartResult

__all__ = ["decode_plays", "encode_plays", "play"]


async def play(store: Any, method: str, command: Any) -> tuple[str, str]:
    """Send one command: ``("inserted"|"retried", "")`` or ``("error", <error class name>)``.

    A tuple is the positional arguments of a call (a tool result save, which
    "inserted" when the store kept this writer's bytes, else adopted another's).
    """
    try:
        if isinstance(command, tuple):  # positional arguments: (run_id, call_key, data)
            result = await getattr(store, method)(*command)
        else:
            result = await getattr(store, method)(command)
    except AgentledgerError as e:
        return ("error", type(e).__name__)
    except Exception as e:  # anything else is a leak the parent reports
        return ("leaked", f"{type(e).__module__}.{type(e).__name__}: {e}")
    if isinstance(result, StartResult):
        inserted = result.started.inserted
    elif isinstance(result, AppendResult):
        inserted = result.inserted
    elif isinstance(result, bytes) and isinstance(command, tuple):
        inserted = result == command[-1]  # a saved tool result: its own bytes were kept
    else:
        return ("leaked", f"{method} returned {result!r}")
    return ("inserted" if inserted else "retried", "")


def encode_plays(plays: list[tuple[str, Any]]) -> str:
    """The ``(method, command)`` list as one command-line argument."""
    return base64.b64encode(pickle.dumps(plays)).decode("ascii")


def decode_plays(text: str) -> list[tuple[str, Any]]:
    """The list :func:`encode_plays` wrote."""
    plays: list[tuple[str, Any]] = pickle.loads(base64.b64decode(text))
    return plays


async def _main(opener: StoreOpener, plays: list[tuple[str, Any]]) -> None:
    loop = asyncio.get_running_loop()
    store = await opener.open()
    try:
        for method, command in plays:
            print("ready", flush=True)
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if line.strip() != "go":
                return
            print(json.dumps(await play(store, method, command)), flush=True)
    finally:
        close = getattr(store, "close", None)
        if close is not None and inspect.iscoroutinefunction(close):
            await close()


if __name__ == "__main__":
    asyncio.run(_main(StoreOpener.decode(sys.argv[1]), decode_plays(sys.argv[2])))
