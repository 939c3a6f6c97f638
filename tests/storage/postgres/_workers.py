"""A writer process for the races of ``test_races.py`` (run with ``python -m``).

Imports only agentledger's PostgreSQL backend (no pytest, no conformance
suite), so that a process starts quickly. The parent is the barrier: before
each command the worker prints ``ready`` and waits for a ``go`` line on
stdin, then prints the outcome as one JSON line.
"""

from __future__ import annotations

import asyncio
import base64
import json
import pickle
import sys
from typing import Any

from agentledger.errors import AgentledgerError
from agentledger.storage.postgres import PostgresStore

__all__ = ["encode_plays", "play"]


async def play(store: Any, method: str, command: Any) -> tuple[str, str]:
    """Send one command; ``("ok", "")`` or ``("error", <error class name>)``."""
    try:
        await getattr(store, method)(command)
    except AgentledgerError as e:
        return ("error", type(e).__name__)
    return ("ok", "")


def encode_plays(plays: list[tuple[str, Any]]) -> str:
    """The ``(method, command)`` list as one command-line argument."""
    return base64.b64encode(pickle.dumps(plays)).decode("ascii")


async def _main(dsn: str, plays: list[tuple[str, Any]]) -> None:
    loop = asyncio.get_running_loop()
    async with await PostgresStore.open(dsn, min_size=1, max_size=1) as store:
        for method, command in plays:
            print("ready", flush=True)
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if line.strip() != "go":
                return
            print(json.dumps(await play(store, method, command)), flush=True)


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], pickle.loads(base64.b64decode(sys.argv[2]))))
