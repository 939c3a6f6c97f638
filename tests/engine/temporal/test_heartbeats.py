"""What a run's planner turns and tool calls send the server while they run: no heartbeat
on a first attempt that ends within its first heartbeat interval.

A first attempt's start is what no heartbeat details say (see
:class:`~agentledger.engine.temporal.worker._Starts`; ``test_crash_count.py`` pins
the count, ``test_crash_loop.py`` the real deaths), so it is not sent: each
heartbeat is a write on the server. The heartbeats are watched with Temporal's own
activity interceptor on the real worker.
"""

from __future__ import annotations

import contextvars
import time
from typing import Any

from temporalio.client import Client
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from agentledger.runtime import Agent, ModelPlanner, Runtime, user_message
from agentledger.runtime.wire import PLAN_TURN, TOOL_CALL
from agentledger.storage import RunStatus
from agentledger.storage.protocol import Store
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.engine.temporal.harness import temporal_runtime
from tests.runtime.test_tool_loop import weather

_started: contextvars.ContextVar[float] = contextvars.ContextVar("_started")

_HEARTBEAT_TIMEOUT = 30.0
_INTERVAL = 1.0
"""The worker's heartbeat interval for that timeout: a third of it, at most a second."""


class _Beats(Interceptor):
    """Records each heartbeat: (activity, attempt, seconds since the attempt started)."""

    def __init__(self) -> None:
        self.beats: list[tuple[str, int, float]] = []
        self.ran: list[tuple[str, int]] = []

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next, self)


class _Inbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, beats: _Beats) -> None:
        super().__init__(next)
        self._beats = beats

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        super().init(_Outbound(outbound, self._beats))

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        _started.set(time.monotonic())
        return await super().execute_activity(input)


class _Outbound(ActivityOutboundInterceptor):
    def __init__(self, next: ActivityOutboundInterceptor, beats: _Beats) -> None:
        super().__init__(next)
        self._beats = beats

    def heartbeat(self, *details: Any) -> None:
        info = self.info()
        since = time.monotonic() - _started.get()
        self._beats.beats.append((info.activity_type, info.attempt, since))
        super().heartbeat(*details)


async def test_a_first_attempt_sends_no_heartbeat_before_its_first_interval(
    temporal_client: Client, store: Store, session: str
) -> None:
    """A one-tool run: its planner turns and tool call heartbeat only after an interval."""
    model = ScriptedModel([tool_calls(("c1", "weather", {"city": "Paris"})), reply("Sunny.")])

    def setup(runtime: Runtime) -> None:
        runtime.register_model("m", model)
        runtime.register_agent(Agent("chat", ModelPlanner("m"), tools=[weather]))

    watch = _Beats()
    async with temporal_runtime(
        temporal_client,
        store,
        setup,
        heartbeat_timeout=_HEARTBEAT_TIMEOUT,
        interceptors=[watch],
    ) as runtime:
        out = await runtime.agent_client("chat").run(session, [user_message("Weather?")])
    assert out.status is RunStatus.COMPLETED, out.failure
    early = [
        (name, attempt, since)
        for name, attempt, since in watch.beats
        if name in (PLAN_TURN, TOOL_CALL) and attempt == 1 and since < _INTERVAL
    ]
    assert early == []
