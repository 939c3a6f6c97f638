"""Host runtimes for ``agentledger serve --host-runtime`` that let a test interrupt its start-up.

``waiting``: says so in ``$STARTUP_MARK`` (a file it creates), then waits forever, so the
test can send Ctrl-C while ``serve`` is starting (its store open, nothing listening yet).
``interrupting``: sends Ctrl-C to its own process as soon as the HTTP server has taken
over SIGINT, before it can say it listens.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path
from typing import Any

from agentledger.runtime.planner import Answer


class NoHost:
    """A host runtime that never acts (these tests stop before any request)."""

    async def resume(self, run_id: str, answer: Answer) -> str:
        raise NotImplementedError

    async def fork(
        self, source_run_id: str, message: str, through: str, session_id: str | None = None
    ) -> str:
        raise NotImplementedError

    async def cancel(self, run_id: str, reason: str) -> bool:
        raise NotImplementedError

    def temporal_client(self) -> None:
        return None

    async def close(self) -> None:
        return None


async def waiting(store: Any) -> NoHost:
    await asyncio.to_thread(Path(os.environ["STARTUP_MARK"]).write_text, "starting\n")
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def interrupting(store: Any) -> NoHost:
    before = signal.getsignal(signal.SIGINT)

    def interrupt() -> None:
        while signal.getsignal(signal.SIGINT) is before:  # until the server takes it over
            threading.Event().wait(0.001)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    return NoHost()
