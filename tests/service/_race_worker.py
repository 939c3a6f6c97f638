"""Code run in spawned client processes for the process race test.

Kept apart from the test module so a spawned interpreter imports only this
and the package, not pytest's collection of a test file.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from agentledger.errors import AgentledgerError
from agentledger.service import StoreClient
from agentledger.storage import RecordBuilder, RunStart, RunStatus

T0 = datetime(2026, 8, 1, tzinfo=UTC)
TERMINALS = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED)


def at(ms: int) -> datetime:
    """A fixed time, equal in every process."""
    return T0 + timedelta(milliseconds=ms)


def run_start(run_id: str, session_id: str, **kw: Any) -> RunStart:
    """The identity every process builds for ``run_id``."""
    return RunStart(run_id=run_id, agent_id="agent", session_id=session_id, started_at=at(1), **kw)


async def _op(store: StoreClient, kind: str, target: str, me: int) -> Any:
    session = f"{target}-session"
    if kind == "start":
        run = RecordBuilder(run_start(target, session, labels={"writer": str(me)}))
        return await store.start_root_run(run.root_start())
    run = RecordBuilder(run_start(target, session))
    if kind == "cancel":
        return await store.record_run_cancellation(run.cancellation(f"reason-{me}", at=at(2)))
    status = TERMINALS[me % len(TERMINALS)]
    return await store.record_run_terminal(
        run.terminal(status, at=at(3), event_key=f"run_completed-{me}")
    )


async def _race(
    url: str, token: str, me: int, barrier: Any, plan: list[tuple[str, str]], out: Any
) -> None:
    async with StoreClient(url, token=token) as store:
        await store.load_session_status(f"{plan[0][1]}-session")  # warm the connection
        for number, (kind, target) in enumerate(plan):
            await asyncio.to_thread(barrier.wait)
            try:
                outcome = await _op(store, kind, target, me)
            except AgentledgerError as e:
                outcome = e
            out.put((number, me, outcome))


def race_worker(
    url: str, token: str, me: int, barrier: Any, plan: list[tuple[str, str]], out: Any
) -> None:
    """One contending client process: every race of ``plan``, released by ``barrier``."""
    asyncio.run(_race(url, token, me, barrier, plan, out))
