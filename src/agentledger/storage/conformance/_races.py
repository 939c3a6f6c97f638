"""Conformance: concurrent writers racing the same change [X5] [K3].

Each test builds ``race_writers`` calls first, spreads them over two handles
on one database (``store`` and ``other_store``, alternating) and releases them
together behind one gate. MemoryStore interleaves them as asyncio tasks;
backends whose calls run in threads or connections race for real. Process
races belong to the SQLite and PostgreSQL test files.

"Exactly one winner" is counted from the results: every other writer must
get the exact conflict class, and the store must show the winner's values.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from agentledger.errors import (
    RecordConflictError,
    RunCancellationConflictError,
    RunConflictError,
    RunNotActiveError,
    RunNotFoundError,
    RunSuspensionConflictError,
    RunTerminalConflictError,
)
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._world import AdminStore, World, all_pages
from agentledger.storage.conformance._world import run_log as _log
from agentledger.storage.types import (
    AppendResult,
    Checkpoint,
    RunStart,
    RunStatus,
    StartOutcome,
    StartResult,
)

__all__ = ["RaceConformance"]

T = TypeVar("T")


async def race(calls: Sequence[Awaitable[T]]) -> list[T | BaseException]:
    """Await every call at once behind one gate; results (or errors) in call order.

    The calls are built first; every writer is scheduled and parked on the gate
    before any of them may touch the store, so none gets a head start.
    """
    gate = asyncio.Event()
    all_parked = asyncio.Event()
    parked = 0

    async def writer(call: Awaitable[T]) -> T:
        nonlocal parked
        parked += 1
        if parked == len(calls):
            all_parked.set()
        await gate.wait()
        return await call

    tasks = [asyncio.ensure_future(writer(call)) for call in calls]
    if tasks:
        await all_parked.wait()
    gate.set()
    return await asyncio.gather(*tasks, return_exceptions=True)


def split(
    results: Sequence[T | BaseException], kind: type[T]
) -> tuple[list[tuple[int, T]], list[tuple[int, BaseException]]]:
    """(index, value) of the successes of type ``kind`` and (index, error) of the rest."""
    wins: list[tuple[int, T]] = []
    losses: list[tuple[int, BaseException]] = []
    for i, result in enumerate(results):
        if isinstance(result, kind):
            wins.append((i, result))
        else:
            assert isinstance(result, BaseException), result
            losses.append((i, result))
    return wins, losses


def assert_losers(losses: Sequence[tuple[int, BaseException]], error: type[Exception]) -> None:
    """Every losing writer got exactly ``error`` (not a subclass, not a crash)."""
    wrong = [(i, type(e).__name__, e) for i, e in losses if type(e) is not error]
    assert not wrong, f"expected only {error.__name__} from the losers, got {wrong}"


class RaceConformance(ConformanceBase):
    """Capability: races between concurrent writers on two handles."""

    def handles(self, store: AdminStore, other_store: AdminStore) -> list[AdminStore]:
        """The handle of each writer: ``store`` and ``other_store`` alternating."""
        return [store if i % 2 == 0 else other_store for i in range(self.race_writers)]

    # ------------------------------------------------------------------ starts

    async def test_race_identical_root_starts(
        self, world: World, store: AdminStore, other_store: AdminStore
    ) -> None:
        """[X5] [X1] identical concurrent starts: one inserts, the rest are exact retries."""
        sid = await world.session("s")
        run = world.run("r", session=sid)
        cmd = run.root_start()
        handles = self.handles(store, other_store)

        results = await race([h.start_root_run(cmd) for h in handles])

        wins, losses = split(results, StartResult)
        assert losses == []
        assert [r.started.inserted for _, r in wins].count(True) == 1
        for _, result in wins:
            assert result.outcome is StartOutcome.PROCEED
            assert result.run_status is RunStatus.RUNNING
            assert result.started.id == "1"
            assert result.canceled is None
        log = await _log(store, run.run.run_id)
        assert [(r.id, r.type) for r in log] == [("1", payloads.RUN_STARTED)]

    async def test_race_conflicting_root_starts(
        self, world: World, store: AdminStore, other_store: AdminStore
    ) -> None:
        """[X5] starts claiming one run id with different labels: exactly one wins."""
        sid = await world.session("s")
        rid = world.track_run("r")
        at = world.now()
        cmds = [
            RecordBuilder(
                RunStart(
                    run_id=rid,
                    agent_id="agent",
                    session_id=sid,
                    started_at=at,
                    labels={"writer": str(i)},
                )
            ).root_start()
            for i in range(self.race_writers)
        ]
        handles = self.handles(store, other_store)

        results = await race([h.start_root_run(c) for h, c in zip(handles, cmds, strict=True)])

        wins, losses = split(results, StartResult)
        assert len(wins) == 1, results
        assert_losers(losses, RunConflictError)
        winner, result = wins[0]
        assert result.started.inserted is True
        meta = await other_store.load_run(rid)
        assert meta.labels == {"writer": str(winner)}
        log = await _log(store, rid)
        assert [r.payload for r in log] == [cmds[winner].started.payload]

    async def test_race_successors_of_one_suspension(
        self, world: World, store: AdminStore, other_store: AdminStore
    ) -> None:
        """[X5] [K3] successors of one suspension: one starts, the others write nothing."""
        sid = await world.session("s")
        pred = await world.root("pred", session=sid)
        await world.suspend(pred)
        successors = [
            world.run(f"next-{i}", session=sid, predecessor=pred.run.run_id)
            for i in range(self.race_writers)
        ]
        handles = self.handles(store, other_store)

        results = await race(
            [h.start_root_run(s.root_start()) for h, s in zip(handles, successors, strict=True)]
        )

        wins, losses = split(results, StartResult)
        assert len(wins) == 1, results
        assert_losers(losses, RunConflictError)
        winner = successors[wins[0][0]].run.run_id
        assert wins[0][1].started.inserted is True
        assert (await store.load_run(pred.run.run_id)).successor_run_id == winner
        for i, _ in losses:
            loser = successors[i].run.run_id
            try:
                await other_store.load_run(loser)
            except RunNotFoundError:
                pass
            else:
                raise AssertionError(f"losing successor {loser!r} was stored")
        assert [m.run_id for m in await store.list_runs_by_session(sid)] == [
            pred.run.run_id,
            winner,
        ]
        retry = await other_store.start_root_run(successors[wins[0][0]].root_start())
        assert (retry.started.id, retry.started.inserted) == ("1", False)

    # --------------------------------------------------------------- lifecycle

    async def test_race_cancellations_with_different_reasons(
        self, world: World, store: AdminStore, other_store: AdminStore
    ) -> None:
        """[X5] [X3] two cancellations with different reasons: exactly one wins."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        at = world.now()
        cmds = [run.cancellation(f"reason-{i}", at=at) for i in range(self.race_writers)]
        handles = self.handles(store, other_store)

        results = await race(
            [h.record_run_cancellation(c) for h, c in zip(handles, cmds, strict=True)]
        )

        wins, losses = split(results, AppendResult)
        assert len(wins) == 1, results
        assert_losers(losses, RunCancellationConflictError)
        winner, result = wins[0]
        assert (result.id, result.inserted) == ("2", True)
        meta = await other_store.load_run(run.run.run_id)
        assert meta.cancellation_reason == f"reason-{winner}"
        assert meta.status is RunStatus.RUNNING
        log = await _log(store, run.run.run_id)
        assert [(r.id, r.type, r.payload) for r in log[1:]] == [
            ("2", payloads.CANCELLATION_INTENT, cmds[winner].record.payload)
        ]

    async def test_race_terminals_with_different_statuses(
        self, world: World, store: AdminStore, other_store: AdminStore
    ) -> None:
        """[X5] terminals with different statuses and keys: exactly one wins."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        at = world.now()
        statuses = [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED]
        cmds = [
            run.terminal(statuses[i % 3], at=at, event_key=f"run_completed-{i}")
            for i in range(self.race_writers)
        ]
        handles = self.handles(store, other_store)

        results = await race([h.record_run_terminal(c) for h, c in zip(handles, cmds, strict=True)])

        wins, losses = split(results, AppendResult)
        assert len(wins) == 1, results
        assert_losers(losses, RunTerminalConflictError)
        winner, result = wins[0]
        assert (result.id, result.inserted) == ("2", True)
        meta = await other_store.load_run(run.run.run_id)
        assert meta.status is cmds[winner].status
        log = await _log(store, run.run.run_id)
        assert [(r.id, r.event_key) for r in log] == [
            ("1", "run_started"),
            ("2", f"run_completed-{winner}"),
        ]

    async def test_race_suspensions_with_different_checkpoints(
        self, world: World, store: AdminStore, other_store: AdminStore
    ) -> None:
        """[X5] [X3] suspensions with different checkpoints: exactly one wins."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        at = world.now()
        cmds = [
            run.suspension(Checkpoint(id=f"cp-{i}", data=bytes([i])), at=at)
            for i in range(self.race_writers)
        ]
        handles = self.handles(store, other_store)

        results = await race(
            [h.record_run_suspension(c) for h, c in zip(handles, cmds, strict=True)]
        )

        wins, losses = split(results, AppendResult)
        assert len(wins) == 1, results
        assert_losers(losses, RunSuspensionConflictError)
        winner, result = wins[0]
        assert (result.id, result.inserted) == ("2", True)
        assert await other_store.load_run_suspension(run.run.run_id) == cmds[winner].checkpoint
        assert (await store.load_run(run.run.run_id)).status is RunStatus.SUSPENDED

    # ----------------------------------------------------------------- records

    async def test_race_appends_of_distinct_keys(
        self, world: World, store: AdminStore, other_store: AdminStore
    ) -> None:
        """[X5] [L8] [L9] concurrent appends: ids "1".."N+1", no gaps, log in id order."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        records = [world.note(run, f"note-{i}") for i in range(self.race_writers)]
        handles = self.handles(store, other_store)

        results = await race(
            [h.append_run_record(r) for h, r in zip(handles, records, strict=True)]
        )

        wins, losses = split(results, AppendResult)
        assert losses == []
        assert all(r.inserted for _, r in wins)
        n = self.race_writers
        assert sorted(int(r.id) for _, r in wins) == list(range(2, n + 2))
        log = await _log(other_store, run.run.run_id)
        assert [r.id for r in log] == [str(i) for i in range(1, n + 2)]
        by_key = {records[i].event_key: r.id for i, r in wins}
        assert {r.event_key: r.id for r in log[1:]} == by_key
        session_log = await all_pages(store.list_session_run_records, sid)
        assert [(r.run_id, r.id) for r in session_log] == [(r.run_id, r.id) for r in log]

    async def test_race_appends_of_one_key(
        self, world: World, store: AdminStore, other_store: AdminStore
    ) -> None:
        """[X5] [X3] one event key with different payloads: one wins, the rest conflict."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        at = world.now()
        records = [
            run.record("planner_note", b'{"writer":%d}' % i, event_key="note", at=at)
            for i in range(self.race_writers)
        ]
        handles = self.handles(store, other_store)

        results = await race(
            [h.append_run_record(r) for h, r in zip(handles, records, strict=True)]
        )

        wins, losses = split(results, AppendResult)
        assert len(wins) == 1, results
        assert_losers(losses, RecordConflictError)
        winner, result = wins[0]
        assert (result.id, result.inserted) == ("2", True)
        log = await _log(other_store, run.run.run_id)
        assert [(r.id, r.payload) for r in log[1:]] == [("2", records[winner].payload)]

    # ---------------------------------------------------------------- children

    async def test_race_child_starts_against_parent_terminal(
        self, world: World, store: AdminStore, other_store: AdminStore
    ) -> None:
        """[X5] [L2] children racing their parent's end: each accepted child is linked first."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        pid = parent.run.run_id
        children = [
            world.run(f"child-{i}", session=sid, parent=pid) for i in range(self.race_writers - 1)
        ]
        terminal = parent.terminal(RunStatus.COMPLETED, at=world.now())
        handles = self.handles(store, other_store)
        calls: list[Awaitable[Any]] = [
            h.start_child_run(
                c.child_start(
                    parent_agent_id=parent.run.agent_id,
                    tool_name="agent_tool",
                    tool_call_id=f"call-{c.run.run_id}",
                )
            )
            for h, c in zip(handles, children, strict=False)
        ]
        middle = len(calls) // 2
        calls.insert(middle, handles[-1].record_run_terminal(terminal))

        results = await race(calls)

        ended = results.pop(middle)
        assert isinstance(ended, AppendResult), ended
        assert ended.inserted is True
        log = await _log(store, pid)
        assert log[-1].event_key == terminal.record.event_key
        assert log[-1].id == ended.id
        links = {r.event_key: r for r in log if r.type == payloads.CHILD_RUN_LINKED}
        accepted = 0
        for child, result in zip(children, results, strict=True):
            cid = child.run.run_id
            key = f"child_run_linked:{cid}"
            if isinstance(result, StartResult):
                accepted += 1
                assert result.parent_record is not None
                assert key in links, f"child {cid!r} started but is not linked on its parent"
                assert links[key].id == result.parent_record.id
                assert int(links[key].id) < int(ended.id), "child linked after parent's end"
                assert (await other_store.load_run(cid)).status is RunStatus.RUNNING
            else:
                assert type(result) is RunNotActiveError, result
                assert key not in links
                try:
                    await other_store.load_run(cid)
                except RunNotFoundError:
                    pass
                else:
                    raise AssertionError(f"refused child {cid!r} was stored")
        assert len(links) == accepted
        assert [r.id for r in log] == [str(i) for i in range(1, accepted + 3)]
