"""Conformance: writers in separate processes racing the same change [X5] [K3] [X1].

Each writer is a spawned Python process that opens its own handle through the
backend's :class:`~._opener.StoreOpener`, so nothing but the database
serializes them. The parent is the barrier: every writer prints ``ready``,
and only when all have does the parent send ``go`` to each.

A backend that lives in one process (like ``MemoryStore``) cannot be opened
from another: its class sets ``process_races = False`` and gives no opener.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from agentledger.errors import (
    AgentledgerError,
    RunCancellationConflictError,
    RunConflictError,
    RunNotFoundError,
    RunTerminalConflictError,
)
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._opener import StoreOpener
from agentledger.storage.conformance._world import AdminStore, World, run_log
from agentledger.storage.types import RunStart, RunStatus

__all__ = ["ProcessRaceConformance", "Scenario", "build_scenarios", "check_winner"]

_WORKER = "agentledger.storage.conformance._process_worker"
_TIMEOUT = 120.0


@dataclass
class Scenario:
    """One change that ``len(commands)`` writers race; exactly one may insert it."""

    name: str
    method: str
    commands: list[Any]
    loser_error: type[AgentledgerError] | None  # None: every loser is an exact retry
    run_id: str  # the run whose state shows the winner


async def build_scenarios(world: World, writers: int) -> list[Scenario]:
    """Set up the races of [X5] [K3] [X1] in ``world`` and build every writer's command."""
    sid = await world.session("s")
    same = world.run("same", session=sid).root_start()
    start_id = world.track_run("start")
    at = world.now()
    starts = [
        RecordBuilder(
            RunStart(
                run_id=start_id, agent_id="agent", session_id=sid, started_at=at,
                labels={"writer": str(i)},
            )
        ).root_start()
        for i in range(writers)
    ]  # fmt: skip
    cancel = await world.root("cancel", session=sid)
    cancels = [cancel.cancellation(f"reason-{i}", at=world.now()) for i in range(writers)]
    pred = await world.root("pred", session=sid)
    await world.suspend(pred, "cp")
    successors = [
        world.run(f"succ-{i}", session=sid, predecessor=pred.run.run_id).root_start()
        for i in range(writers)
    ]
    term = await world.root("term", session=sid)
    statuses = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED)
    terminals = [
        term.terminal(statuses[i % 3], at=world.now(), event_key=f"done-{i}")
        for i in range(writers)
    ]
    tools = await world.root("tools", session=sid)
    saves = [(tools.run.run_id, "call", b"writer %d" % i) for i in range(writers)]
    return [
        Scenario("identical start", "start_root_run", [same] * writers, None, same.run.run_id),
        Scenario("tool result", "save_tool_result", saves, None, tools.run.run_id),
        Scenario("start", "start_root_run", starts, RunConflictError, start_id),
        Scenario(
            "cancellation", "record_run_cancellation", cancels, RunCancellationConflictError,
            cancel.run.run_id,
        ),
        Scenario("successor", "start_root_run", successors, RunConflictError, pred.run.run_id),
        Scenario(
            "terminal", "record_run_terminal", terminals, RunTerminalConflictError,
            term.run.run_id,
        ),
    ]  # fmt: skip


def winner(scenario: Scenario, outcomes: list[tuple[str, str]]) -> int:
    """The one writer that inserted; every other got the scenario's conflict (or retried)."""
    wins = [i for i, (kind, _) in enumerate(outcomes) if kind == "inserted"]
    assert len(wins) == 1, (scenario.name, outcomes)
    error = scenario.loser_error
    lost = ("retried", "") if error is None else ("error", error.__name__)
    others = [tuple(o) for i, o in enumerate(outcomes) if i != wins[0]]
    assert others == [lost] * (len(outcomes) - 1), (scenario.name, outcomes)
    return wins[0]


async def check_winner(store: AdminStore, scenario: Scenario, won: int) -> None:
    """The store shows the winning writer's change, and only it."""
    cmd = scenario.commands[won]
    meta = await store.load_run(scenario.run_id)
    log = await run_log(store, scenario.run_id)
    if scenario.name in ("identical start", "start"):
        assert meta.labels == cmd.run.labels
        assert [(r.id, r.payload) for r in log] == [("1", cmd.started.payload)]
    elif scenario.name == "cancellation":
        assert meta.cancellation_reason == cmd.reason
        assert [r.event_key for r in log][1:] == [cmd.record.event_key]
    elif scenario.name == "tool result":
        run_id, key, data = cmd
        assert await store.load_tool_result(run_id, key) == data
        assert [r.type for r in log] == ["run_started"]  # private: never a record
    elif scenario.name == "successor":
        assert meta.successor_run_id == cmd.run.run_id
        for i, other in enumerate(scenario.commands):
            if i != won:
                with pytest.raises(RunNotFoundError):
                    await store.load_run(other.run.run_id)
    else:
        assert meta.status is cmd.status
        assert log[-1].event_key == cmd.record.event_key
        assert [r.id for r in log] == [str(i) for i in range(1, len(log) + 1)]


def _child_environment() -> dict[str, str]:
    """This interpreter's import path for the writers, so they find the opener's module."""
    env = dict(os.environ)
    paths = [p for p in sys.path if p] + [env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


async def _spawn(opener: StoreOpener, plays: list[tuple[str, Any]]) -> asyncio.subprocess.Process:
    # Imported here, not above: the package must not import the module ``-m`` runs.
    from agentledger.storage.conformance._process_worker import encode_plays

    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", _WORKER, opener.encode(), encode_plays(plays),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=_child_environment(),
    )  # fmt: skip


async def _line(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout=_TIMEOUT)
    assert line, f"racing process {proc.pid} exited ({await proc.wait()}); see its stderr above"
    return line.decode().strip()


class ProcessRaceConformance(ConformanceBase):
    """Capability: races between writers in separate processes.

    Requires a ``store_opener`` fixture: a :class:`StoreOpener` that opens a
    handle on the same database as ``store_factory`` from another process.
    A backend that lives in one process sets ``process_races = False``.
    """

    process_races: ClassVar[bool] = True
    """Whether handles can be opened from other processes (False drops these tests)."""

    process_writers: ClassVar[int] = 4
    """How many processes race each change."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.process_races:  # declared, not skipped: the tests do not exist here
            cls.test_races_across_processes = None  # type: ignore[assignment,method-assign]

    @pytest.fixture
    def store_opener(self) -> StoreOpener:
        raise NotImplementedError(
            "a StoreConformance subclass must define a `store_opener` fixture returning a "
            "StoreOpener('module:function', *args) that opens the store_factory's database "
            "from another process, or set `process_races = False` for a store that lives "
            "in one process"
        )

    async def test_races_across_processes(
        self, world: World, store: AdminStore, store_opener: StoreOpener
    ) -> None:
        """[X5] [K3] [X1] start, cancellation, successor, terminal, an exact retry and a
        tool result save, each raced by ``process_writers`` processes: exactly one inserts."""
        scenarios = await build_scenarios(world, self.process_writers)
        procs = await asyncio.gather(
            *(
                _spawn(store_opener, [(s.method, s.commands[i]) for s in scenarios])
                for i in range(self.process_writers)
            )
        )
        try:
            for scenario in scenarios:
                ready = await asyncio.gather(*(_line(p) for p in procs))
                assert ready == ["ready"] * len(procs), ready
                for p in procs:
                    assert p.stdin is not None
                    p.stdin.write(b"go\n")
                await asyncio.gather(*(p.stdin.drain() for p in procs if p.stdin))
                lines = await asyncio.gather(*(_line(p) for p in procs))
                outcomes = [tuple(json.loads(line)) for line in lines]
                await check_winner(store, scenario, winner(scenario, outcomes))
            for p in procs:
                assert await asyncio.wait_for(p.wait(), timeout=_TIMEOUT) == 0
        finally:
            for p in procs:
                if p.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        p.kill()
                    await p.wait()
