"""Conformance: continuations of suspended runs [K1] [K2] [K3].

A continuation names ``predecessor_run_id``: the predecessor must exist, be
suspended and share the successor's session, agent and parent. A mismatch
writes nothing, not even a child's parent link. The predecessor id lives only
in the successor's ``run_started``; the predecessor's ``successor_run_id`` is
set in the same write, and only the first successor wins.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from agentledger.errors import (
    RunConflictError,
    RunNotActiveError,
    RunNotFoundError,
    RunSessionMismatchError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._world import AdminStore, World
from agentledger.storage.conformance._world import short_run_log as _log
from agentledger.storage.types import (
    AppendResult,
    ChildRunStart,
    RunStatus,
    SessionStatus,
    StartOutcome,
    StartResult,
)

__all__ = ["ContinuationConformance"]


async def _suspended(world: World, name: str, *, session: str, **kw: Any) -> RecordBuilder:
    """A root run of ``session`` that started and then suspended."""
    run = await world.root(name, session=session, **kw)
    await world.suspend(run, checkpoint_id=f"cp-{name}")
    return run


def _successor(world: World, name: str, pred: RecordBuilder, **kw: Any) -> RecordBuilder:
    """A root continuation of ``pred`` with the same session and agent."""
    kw.setdefault("session", pred.run.session_id)
    kw.setdefault("agent", pred.run.agent_id)
    return world.run(name, predecessor=pred.run.run_id, **kw)


def _child_cmd(run: RecordBuilder, parent: RecordBuilder, call: str = "call-1") -> ChildRunStart:
    return run.child_start(
        parent_agent_id=parent.run.agent_id, tool_name="agent_tool", tool_call_id=call
    )


async def _predecessor_in_log(store: AdminStore, run_id: str) -> str:
    """The predecessor a run's ``run_started`` names ("" for a fresh run) [K2]."""
    first = (await store.list_run_records(run_id, limit=1)).records[0]
    assert first.type == payloads.RUN_STARTED
    return payloads.RunStarted.decode(first.payload).predecessor_run_id


class ContinuationConformance(ConformanceBase):
    """Capability: starting a successor of a suspended run, once."""

    # ---------------------------------------------------------------- success

    async def test_continuation_starts_from_a_suspended_run(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[K1] [K2] [K3] the successor starts; the predecessor stays suspended and points at it."""
        sid = await world.session("s")
        pred = await _suspended(world, "pred", session=sid, labels={"team": "a"})
        pid = pred.run.run_id
        pred_log = await _log(world.store, pid)
        checkpoint = await world.store.load_run_suspension(pid)
        succ = _successor(world, "succ", pred, labels={"team": "a"})
        cmd = succ.root_start()
        result = await world.store.start_root_run(cmd)
        assert result == StartResult(
            outcome=StartOutcome.PROCEED,
            run_status=RunStatus.RUNNING,
            started=AppendResult(id="1", inserted=True, session_status=SessionStatus.ACTIVE),
        )
        pred_meta = await other_store.load_run(pid)
        assert (pred_meta.status, pred_meta.successor_run_id) == (
            RunStatus.SUSPENDED,
            succ.run.run_id,
        )
        assert await _log(other_store, pid) == pred_log
        assert await other_store.load_run_suspension(pid) == checkpoint
        succ_log = await _log(other_store, succ.run.run_id)
        assert succ_log == [msgspec.structs.replace(cmd.started, id="1")]
        assert payloads.RunStarted.decode(succ_log[0].payload) == payloads.RunStarted(
            predecessor_run_id=pid, labels={"team": "a"}
        )
        succ_meta = await other_store.load_run(succ.run.run_id)
        assert (succ_meta.status, succ_meta.parent_run_id, succ_meta.successor_run_id) == (
            RunStatus.RUNNING,
            "",
            "",
        )

    async def test_continuation_predecessor_is_only_in_run_started(self, world: World) -> None:
        """[K2] no RunMeta carries the predecessor id; only the ``run_started`` names it."""
        sid = await world.session("s")
        pred = await _suspended(world, "pred", session=sid)
        pid = pred.run.run_id
        succ = _successor(world, "succ", pred)
        await world.store.start_root_run(succ.root_start())
        assert "predecessor_run_id" not in msgspec.structs.asdict(
            await world.store.load_run(succ.run.run_id)
        )
        for meta in await world.store.list_runs_by_session(sid):
            if meta.run_id == succ.run.run_id:
                assert pid not in msgspec.to_builtins(meta).values()
        mentions = [
            (r.run_id, r.type)
            for r in (await world.store.list_session_run_records(sid)).records
            if pid.encode() in r.payload
        ]
        assert mentions == [(succ.run.run_id, "run_started")]

    async def test_continuation_chain_is_rebuilt_from_records(self, world: World) -> None:
        """[K2] [K3] following ``run_started`` predecessors walks the chain back to its root."""
        sid = await world.session("s")
        first = await _suspended(world, "first", session=sid)
        second = _successor(world, "second", first)
        await world.store.start_root_run(second.root_start())
        await world.suspend(second, "cp-second")
        third = _successor(world, "third", second)
        await world.store.start_root_run(third.root_start())
        chain = []
        rid = third.run.run_id
        while rid:
            chain.append(rid)
            rid = await _predecessor_in_log(world.store, rid)
        assert chain == [third.run.run_id, second.run.run_id, first.run.run_id]
        successors = [
            (await world.store.load_run(r.run.run_id)).successor_run_id
            for r in (first, second, third)
        ]
        assert successors == [second.run.run_id, third.run.run_id, ""]

    async def test_continuation_of_a_child(self, world: World, other_store: AdminStore) -> None:
        """[K1] a suspended child is continued under the same parent: link and start together."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        first = world.run("first", session=sid, parent=parent.run.run_id, agent="helper")
        await world.store.start_child_run(_child_cmd(first, parent))
        await world.suspend(first, "cp-first")
        again = world.run(
            "again",
            session=sid,
            parent=parent.run.run_id,
            agent="helper",
            predecessor=first.run.run_id,
        )
        result = await world.store.start_child_run(_child_cmd(again, parent, "call-2"))
        assert result.parent_record == AppendResult(
            id="3", inserted=True, session_status=SessionStatus.ACTIVE
        )
        assert [r.type for r in await _log(other_store, parent.run.run_id)] == [
            "run_started",
            "child_run_linked",
            "child_run_linked",
        ]
        assert (await other_store.load_run(first.run.run_id)).successor_run_id == again.run.run_id
        assert await _predecessor_in_log(other_store, again.run.run_id) == first.run.run_id

    async def test_continuation_of_a_child_under_the_parents_continuation(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[K1] [K3] a child that suspended its parent is continued under the parent's
        continuation (the same parent, one chain on), even two continuations on."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        first = world.run("first", session=sid, parent=parent.run.run_id, agent="helper")
        await world.store.start_child_run(_child_cmd(first, parent))
        await world.suspend(first, "cp-first")
        await world.suspend(parent, "cp-parent")
        parent2 = await world.root("parent2", session=sid, predecessor=parent.run.run_id)
        await world.suspend(parent2, "cp-parent2")
        parent3 = await world.root("parent3", session=sid, predecessor=parent2.run.run_id)
        again = world.run(
            "again",
            session=sid,
            parent=parent3.run.run_id,
            agent="helper",
            predecessor=first.run.run_id,
        )
        result = await world.store.start_child_run(_child_cmd(again, parent3))
        assert result.started.inserted
        assert (await other_store.load_run(first.run.run_id)).successor_run_id == again.run.run_id
        assert (await other_store.load_run(again.run.run_id)).parent_run_id == parent3.run.run_id
        stranger = await world.root("stranger", session=sid)  # not in the parent's chain
        late = world.run(
            "late",
            session=sid,
            parent=stranger.run.run_id,
            agent="helper",
            predecessor=again.run.run_id,
        )
        await world.suspend(again, "cp-again")
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_child_run(_child_cmd(late, stranger))
        assert e.value.field == "predecessor.parent_run_id"

    # ------------------------------------------------------------ mismatches

    async def test_continuation_predecessor_missing(self, world: World) -> None:
        """[K1] a predecessor that does not exist is RunNotFoundError; nothing is written."""
        sid = await world.session("s")
        pid = world.track_run("ghost")
        succ = world.run("succ", session=sid, predecessor=pid)
        async with world.unchanged():
            with pytest.raises(RunNotFoundError) as e:
                await world.store.start_root_run(succ.root_start())
        assert e.value.run_id == pid

    @pytest.mark.parametrize(
        "status", [RunStatus.RUNNING, RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED]
    )
    async def test_continuation_predecessor_must_be_suspended(
        self, world: World, status: RunStatus
    ) -> None:
        """[K1] only a suspended run can be continued: RunNotActiveError, nothing written."""
        sid = await world.session("s")
        pred = await world.root("pred", session=sid)
        if status is not RunStatus.RUNNING:
            await world.finish(pred, status)
        succ = _successor(world, "succ", pred)
        async with world.unchanged():
            with pytest.raises(RunNotActiveError) as e:
                await world.store.start_root_run(succ.root_start())
        assert (e.value.run_id, e.value.expected, e.value.got) == (
            pred.run.run_id,
            "suspended",
            status.value,
        )

    async def test_continuation_predecessor_in_another_session(self, world: World) -> None:
        """[K1] the predecessor must share the successor's session: RunSessionMismatchError."""
        home = await world.session("home")
        away = await world.session("away")
        pred = await _suspended(world, "pred", session=home)
        succ = _successor(world, "succ", pred, session=away)
        async with world.unchanged():
            with pytest.raises(RunSessionMismatchError) as e:
                await world.store.start_root_run(succ.root_start())
        assert (e.value.run_id, e.value.expected, e.value.got) == (pred.run.run_id, away, home)

    async def test_continuation_predecessor_of_another_agent(self, world: World) -> None:
        """[K1] the predecessor must be the same agent's run: RunConflictError."""
        sid = await world.session("s")
        pred = await _suspended(world, "pred", session=sid)
        succ = _successor(world, "succ", pred, agent="another-agent")
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_root_run(succ.root_start())
        assert (e.value.run_id, e.value.field, e.value.expected, e.value.got) == (
            succ.run.run_id,
            "predecessor.agent_id",
            "agent",
            "another-agent",
        )

    async def test_continuation_root_of_a_child_predecessor(self, world: World) -> None:
        """[K1] a root run cannot continue a child: the parent runs differ."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        child = world.run("child", session=sid, parent=parent.run.run_id)
        await world.store.start_child_run(_child_cmd(child, parent))
        await world.suspend(child)
        succ = _successor(world, "succ", child)
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_root_run(succ.root_start())
        assert (e.value.field, e.value.expected, e.value.got) == (
            "predecessor.parent_run_id",
            parent.run.run_id,
            "",
        )

    @pytest.mark.parametrize(
        "mismatch", ["missing", "running", "completed", "other_session", "agent", "parent"]
    )
    async def test_continuation_child_mismatch_writes_no_link(
        self, world: World, mismatch: str
    ) -> None:
        """[K1] a child continuation that fails its check writes nothing, not even the link."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        sibling = await world.root("sibling", session=sid)
        pred = world.run("pred", session=sid, parent=parent.run.run_id, agent="helper")
        await world.store.start_child_run(_child_cmd(pred, parent))
        pid, agent = pred.run.run_id, "helper"
        home = parent
        error: type[Exception]
        if mismatch == "missing":
            pid, error = world.track_run("ghost"), RunNotFoundError
        elif mismatch == "running":
            error = RunNotActiveError
        elif mismatch == "completed":
            await world.finish(pred)
            error = RunNotActiveError
        elif mismatch == "other_session":
            other = await world.session("other")
            stray = await _suspended(world, "stray", session=other, agent="helper")
            pid, error = stray.run.run_id, RunSessionMismatchError
        elif mismatch == "agent":
            await world.suspend(pred)
            agent, error = "another-helper", RunConflictError
        else:
            await world.suspend(pred)
            home, error = sibling, RunConflictError
        succ = world.run("succ", session=sid, parent=home.run.run_id, agent=agent, predecessor=pid)
        async with world.unchanged():
            with pytest.raises(error) as e:
                await world.store.start_child_run(_child_cmd(succ, home, "call-2"))
        if isinstance(e.value, RunConflictError):
            expected_field = {
                "agent": "predecessor.agent_id",
                "parent": "predecessor.parent_run_id",
            }
            assert e.value.field == expected_field[mismatch]
        else:
            assert getattr(e.value, "run_id", None) == pid

    async def test_continuation_run_started_must_name_the_predecessor(self, world: World) -> None:
        """[K2] [J1] the ``run_started`` payload carries exactly the command's predecessor."""
        sid = await world.session("s")
        pred = await _suspended(world, "pred", session=sid)
        succ = _successor(world, "succ", pred)
        cmd = succ.root_start()
        silent = msgspec.structs.replace(cmd.started, payload=payloads.RunStarted().encode())
        plain = world.run("plain", session=sid)
        claims = payloads.RunStarted(predecessor_run_id=pred.run.run_id).encode()
        plain_cmd = plain.root_start()
        claiming = msgspec.structs.replace(plain_cmd.started, payload=claims)
        for bad in (
            msgspec.structs.replace(cmd, started=silent),
            msgspec.structs.replace(plain_cmd, started=claiming),
        ):
            async with world.unchanged():
                with pytest.raises(ValidationError) as e:
                    await world.store.start_root_run(bad)
            assert e.value.field == "started.payload.predecessor_run_id"

    async def test_continuation_of_itself_is_invalid(self, world: World) -> None:
        """[K1] a run cannot continue itself."""
        sid = await world.session("s")
        rid = world.track_run("loop")
        run = world.run("loop", session=sid, predecessor=rid)
        async with world.unchanged():
            with pytest.raises(ValidationError) as e:
                await world.store.start_root_run(run.root_start())
        assert e.value.field == "run.predecessor_run_id"

    # ------------------------------------------------------- one successor

    async def test_continuation_second_successor_is_a_conflict(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[K3] a suspension has one successor: a second is RunConflictError, nothing written."""
        sid = await world.session("s")
        pred = await _suspended(world, "pred", session=sid)
        winner = _successor(world, "winner", pred)
        await world.store.start_root_run(winner.root_start())
        loser = _successor(world, "loser", pred)
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await other_store.start_root_run(loser.root_start())
        assert (e.value.run_id, e.value.field, e.value.expected, e.value.got) == (
            pred.run.run_id,
            "successor_run_id",
            winner.run.run_id,
            loser.run.run_id,
        )
        assert (await other_store.load_run(pred.run.run_id)).successor_run_id == winner.run.run_id

    async def test_continuation_winner_retries_succeed(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[K3] [X1] [X4] the winner's retries keep succeeding; the loser keeps conflicting."""
        sid = await world.session("s")
        pred = await _suspended(world, "pred", session=sid)
        winner = _successor(world, "winner", pred)
        cmd = winner.root_start()
        await world.store.start_root_run(cmd)
        loser = _successor(world, "loser", pred)
        async with world.unchanged():
            with pytest.raises(RunConflictError):
                await world.store.start_root_run(loser.root_start())
        async with world.unchanged():
            retry = await other_store.start_root_run(cmd)
        assert retry == StartResult(
            outcome=StartOutcome.PROCEED,
            run_status=RunStatus.RUNNING,
            started=AppendResult(id="1", inserted=False, session_status=SessionStatus.ACTIVE),
        )
        await world.finish(winner)
        async with world.unchanged():
            retry = await world.store.start_root_run(cmd)
        assert (retry.outcome, retry.run_status, retry.started.id, retry.started.inserted) == (
            StartOutcome.PROCEED,
            RunStatus.COMPLETED,
            "1",
            False,
        )
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_root_run(loser.root_start())
        assert e.value.expected == winner.run.run_id

    async def test_continuation_second_child_successor_writes_no_link(self, world: World) -> None:
        """[K3] a losing child successor leaves the parent's log untouched."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        pred = world.run("pred", session=sid, parent=parent.run.run_id)
        await world.store.start_child_run(_child_cmd(pred, parent))
        await world.suspend(pred)
        kw: dict[str, Any] = {
            "session": sid,
            "parent": parent.run.run_id,
            "predecessor": pred.run.run_id,
        }
        winner = world.run("winner", **kw)
        await world.store.start_child_run(_child_cmd(winner, parent, "call-2"))
        loser = world.run("loser", **kw)
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_child_run(_child_cmd(loser, parent, "call-3"))
        assert (e.value.run_id, e.value.field) == (pred.run.run_id, "successor_run_id")

    async def test_continuation_of_a_consumed_link_in_the_chain(self, world: World) -> None:
        """[K3] once continued, a run is done: the chain grows from its newest suspension."""
        sid = await world.session("s")
        first = await _suspended(world, "first", session=sid)
        second = _successor(world, "second", first)
        await world.store.start_root_run(second.root_start())
        await world.suspend(second, "cp-second")
        third = _successor(world, "third", second)
        await world.store.start_root_run(third.root_start())
        fork = _successor(world, "fork", first)
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_root_run(fork.root_start())
        assert (e.value.run_id, e.value.expected) == (first.run.run_id, second.run.run_id)

    async def test_continuation_retry_naming_another_predecessor(self, world: World) -> None:
        """[X3] [K2] a retry cannot change or drop the predecessor its first start named."""
        sid = await world.session("s")
        a = await _suspended(world, "a", session=sid)
        b = await _suspended(world, "b", session=sid)
        succ = _successor(world, "succ", a)
        await world.store.start_root_run(succ.root_start())
        base = succ.run
        for predecessor in (b.run.run_id, ""):
            changed = RecordBuilder(msgspec.structs.replace(base, predecessor_run_id=predecessor))
            async with world.unchanged():
                with pytest.raises(RunConflictError) as e:
                    await world.store.start_root_run(changed.root_start())
            assert (e.value.field, e.value.expected, e.value.got) == (
                "run.predecessor_run_id",
                a.run.run_id,
                predecessor,
            )
        assert (await world.store.load_run(b.run.run_id)).successor_run_id == ""

    async def test_continuation_in_an_ended_session_stops_and_consumes(self, world: World) -> None:
        """[C2] [K3] a continuation in an ended session stops, yet still takes the suspension."""
        sid = await world.session("s")
        pred = await _suspended(world, "pred", session=sid)
        await world.store.end_session(sid, ended_at=world.now())
        succ = _successor(world, "succ", pred)
        result = await world.store.start_root_run(succ.root_start())
        assert (result.outcome, result.run_status) == (StartOutcome.STOP, RunStatus.CANCELED)
        assert [r.type for r in await _log(world.store, succ.run.run_id)] == [
            "run_started",
            "run_completed",
        ]
        assert await _predecessor_in_log(world.store, succ.run.run_id) == pred.run.run_id
        assert (await world.store.load_run(pred.run.run_id)).successor_run_id == succ.run.run_id
        other = _successor(world, "other", pred)
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_root_run(other.root_start())
        assert (e.value.field, e.value.expected) == ("successor_run_id", succ.run.run_id)
