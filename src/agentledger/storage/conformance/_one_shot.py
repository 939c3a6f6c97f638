"""Conformance: sessionless runs and their children [L3] [L4] [X1] [X2] [X4].

A one-shot run belongs to no session: its start saves the run and its
``run_started``. A one-shot child needs an existing, sessionless, running
parent on its first call; its link and start are saved together, an exact
retry succeeds even after the parent ended, and a changed retry conflicts.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import pytest

from agentledger.errors import (
    RecordConflictError,
    RecordOwnerMismatchError,
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
from agentledger.storage.conformance._world import changed as _with
from agentledger.storage.conformance._world import rebuilt as _rebuilt
from agentledger.storage.conformance._world import short_run_log as _log
from agentledger.storage.types import (
    AppendResult,
    OneShotChildRunStart,
    Record,
    RunMeta,
    RunStatus,
    StartOutcome,
    StartResult,
)

__all__ = ["OneShotConformance"]


def _child(
    world: World, name: str, parent: RecordBuilder, *, call: str = "call-1", **kw: Any
) -> tuple[RecordBuilder, OneShotChildRunStart]:
    """A sessionless child of ``parent`` and the command that starts it."""
    run = world.run(name, parent=parent.run.run_id, agent="child-agent", **kw)
    cmd = run.one_shot_child_start(
        parent_agent_id=parent.run.agent_id, tool_name="agent_tool", tool_call_id=call
    )
    return run, cmd


async def _stop(world: World, run: RecordBuilder, status: RunStatus) -> None:
    if status is RunStatus.SUSPENDED:
        await world.suspend(run)
    else:
        await world.finish(run, status)


class OneShotConformance(ConformanceBase):
    """Capability: runs with no session, and sessionless children of them."""

    # ------------------------------------------------------------ one-shot run

    async def test_one_shot_start_saves_a_sessionless_run(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[L3] a one-shot start saves the run, with no session, and its ``run_started``."""
        run = world.run("r", labels={"kind": "batch"})
        rid = run.run.run_id
        cmd = run.one_shot_start()
        result = await world.store.start_one_shot_run(cmd)
        assert result == StartResult(
            outcome=StartOutcome.PROCEED,
            run_status=RunStatus.RUNNING,
            started=AppendResult(id="1", inserted=True, session_status=None),
            canceled=None,
            parent_record=None,
        )
        assert await other_store.load_run(rid) == RunMeta(
            run_id=rid,
            agent_id="agent",
            session_id="",
            parent_run_id="",
            status=RunStatus.RUNNING,
            start_outcome=StartOutcome.PROCEED,
            started_at=run.run.started_at,
            updated_at=run.run.started_at,
            labels={"kind": "batch"},
            cancellation_reason="",
            successor_run_id="",
            last_record_id="1",
        )
        records = await _log(other_store, rid)
        assert records == [_with(cmd.started, id="1")]
        assert records[0].session_id == ""
        assert payloads.RunStarted.decode(records[0].payload) == payloads.RunStarted(
            labels={"kind": "batch"}
        )

    async def test_one_shot_records_report_no_session(self, world: World) -> None:
        """[L3] records of a one-shot run report ``session_status=None`` and number on."""
        run = await world.one_shot("r")
        appended = await world.store.append_run_record(world.note(run, "n1"))
        assert appended == AppendResult(id="2", inserted=True, session_status=None)
        done = await world.store.record_run_terminal(
            run.terminal(RunStatus.COMPLETED, at=world.now())
        )
        assert done == AppendResult(id="3", inserted=True, session_status=None)
        assert [r.type for r in await _log(world.store, run.run.run_id)] == [
            "run_started",
            "planner_note",
            "run_completed",
        ]

    async def test_one_shot_run_is_in_no_session(self, world: World) -> None:
        """[L3] a one-shot run appears in no session's run list or log."""
        sid = await world.session("s")
        session_run = await world.root("in-session", session=sid)
        await world.one_shot("loose")
        assert [m.run_id for m in await world.store.list_runs_by_session(sid)] == [
            session_run.run.run_id
        ]
        page = await world.store.list_session_run_records(sid)
        assert [r.run_id for r in page.records] == [session_run.run.run_id]

    async def test_one_shot_start_refuses_a_session_or_parent(self, world: World) -> None:
        """[L3] a one-shot start names neither a session nor a parent."""
        sid = await world.session("s")
        parent = await world.one_shot("parent")
        for run, field in (
            (world.run("r", session=sid), "run.session_id"),
            (world.run("r", parent=parent.run.run_id), "run.parent_run_id"),
        ):
            async with world.unchanged():
                with pytest.raises(ValidationError) as e:
                    await world.store.start_one_shot_run(run.one_shot_start())
            assert e.value.field == field

    async def test_one_shot_start_validates_the_started_record(self, world: World) -> None:
        """[L3] [J1] the one-shot ``run_started`` must fit the run exactly."""
        run = world.run("r", labels={"kind": "batch"})
        cmd = run.one_shot_start()
        cases: list[tuple[Record, type[Exception], str]] = [
            (_with(cmd.started, session_id="s"), RecordOwnerMismatchError, "session_id"),
            (
                _with(cmd.started, timestamp=cmd.started.timestamp + timedelta(milliseconds=1)),
                ValidationError,
                "started.timestamp",
            ),
            (
                _with(cmd.started, payload=payloads.RunStarted().encode()),
                ValidationError,
                "started.payload.labels",
            ),
            (_with(cmd.started, type="planner_note"), ValidationError, "started.type"),
        ]
        for started, error, field in cases:
            async with world.unchanged():
                with pytest.raises(error) as e:
                    await world.store.start_one_shot_run(
                        msgspec.structs.replace(cmd, started=started)
                    )
            assert getattr(e.value, "field", None) == field

    async def test_one_shot_exact_retry(self, world: World, other_store: AdminStore) -> None:
        """[X1] [X4] an exact retry returns id "1" with ``inserted=False``, changing nothing."""
        run = world.run("r")
        cmd = run.one_shot_start()
        await world.store.start_one_shot_run(cmd)
        async with world.unchanged():
            retry = await other_store.start_one_shot_run(cmd)
        assert retry == StartResult(
            outcome=StartOutcome.PROCEED,
            run_status=RunStatus.RUNNING,
            started=AppendResult(id="1", inserted=False, session_status=None),
        )

    @pytest.mark.parametrize("status", [RunStatus.SUSPENDED, RunStatus.COMPLETED, RunStatus.FAILED])
    async def test_one_shot_retry_after_the_run_stopped(
        self, world: World, status: RunStatus
    ) -> None:
        """[X4] a retry after the run stopped: ``proceed``, the current status, id "1"."""
        run = world.run("r")
        cmd = run.one_shot_start()
        await world.store.start_one_shot_run(cmd)
        await _stop(world, run, status)
        before = await world.store.load_run(run.run.run_id)
        async with world.unchanged():
            retry = await world.store.start_one_shot_run(cmd)
        assert retry == StartResult(
            outcome=StartOutcome.PROCEED,
            run_status=status,
            started=AppendResult(id="1", inserted=False, session_status=None),
        )
        assert (await world.store.load_run(run.run.run_id)).updated_at == before.updated_at

    @pytest.mark.parametrize(
        ("change", "field"),
        [
            ("agent_id", "run.agent_id"),
            ("labels", "run.labels"),
            ("started_at", "run.started_at"),
            ("event_key", "started.event_key"),
            ("turn_id", "started.turn_id"),
        ],
    )
    async def test_one_shot_changed_retry_is_a_conflict(
        self, world: World, change: str, field: str
    ) -> None:
        """[X2] [X3] a retry that differs from the first one-shot start is RunConflictError."""
        run = world.run("r")
        cmd = run.one_shot_start()
        await world.store.start_one_shot_run(cmd)
        if change == "agent_id":
            changed = _rebuilt(run, agent_id="other").one_shot_start()
        elif change == "labels":
            changed = _rebuilt(run, labels={"k": "v"}).one_shot_start()
        elif change == "started_at":
            later = run.run.started_at + timedelta(seconds=1)
            changed = _rebuilt(run, started_at=later).one_shot_start()
        else:
            value = {"event_key": "start-2", "turn_id": "turn-2"}[change]
            changed = msgspec.structs.replace(cmd, started=_with(cmd.started, **{change: value}))
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_one_shot_run(changed)
        assert (e.value.run_id, e.value.field) == (run.run.run_id, field)

    async def test_one_shot_id_of_a_session_run_is_a_conflict(self, world: World) -> None:
        """[X3] a session run's id cannot be started again without its session."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        loose = _rebuilt(run, session_id="").one_shot_start()
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_one_shot_run(loose)
        assert (e.value.run_id, e.value.field, e.value.expected, e.value.got) == (
            run.run.run_id,
            "run.session_id",
            sid,
            "",
        )

    # ------------------------------------------------------------ one-shot child

    async def test_one_shot_child_links_and_starts_together(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[L4] the link on the parent's log and the child's start are saved together."""
        parent = await world.one_shot("parent")
        pid = parent.run.run_id
        child, cmd = _child(world, "child", parent)
        cid = child.run.run_id
        result = await world.store.start_one_shot_child_run(cmd)
        assert result == StartResult(
            outcome=StartOutcome.PROCEED,
            run_status=RunStatus.RUNNING,
            started=AppendResult(id="1", inserted=True, session_status=None),
            canceled=None,
            parent_record=AppendResult(id="2", inserted=True, session_status=None),
        )
        parent_log = await _log(other_store, pid)
        assert [r.type for r in parent_log] == ["run_started", "child_run_linked"]
        assert parent_log[1] == _with(cmd.parent_linked, id="2")
        assert payloads.ChildRunLinked.decode(parent_log[1].payload) == payloads.ChildRunLinked(
            tool_name="agent_tool",
            tool_call_id="call-1",
            child_run_id=cid,
            child_agent_id="child-agent",
        )
        child_log = await _log(other_store, cid)
        assert child_log == [_with(cmd.started, id="1")]
        assert payloads.RunStarted.decode(child_log[0].payload).parent_run_id == pid
        meta = await other_store.load_run(cid)
        assert (meta.session_id, meta.parent_run_id, meta.status) == ("", pid, RunStatus.RUNNING)

    async def test_one_shot_child_needs_an_existing_parent(self, world: World) -> None:
        """[L4] a child of a run that does not exist is RunNotFoundError."""
        pid = world.track_run("ghost")
        child = world.run("child", parent=pid)
        cmd = child.one_shot_child_start(parent_agent_id="agent", tool_name="t", tool_call_id="c")
        async with world.unchanged():
            with pytest.raises(RunNotFoundError) as e:
                await world.store.start_one_shot_child_run(cmd)
        assert e.value.run_id == pid

    async def test_one_shot_child_needs_a_sessionless_parent(self, world: World) -> None:
        """[L4] the parent must have no session: RunSessionMismatchError, nothing written."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        _, cmd = _child(world, "child", parent)
        async with world.unchanged():
            with pytest.raises(RunSessionMismatchError) as e:
                await world.store.start_one_shot_child_run(cmd)
        assert (e.value.run_id, e.value.expected, e.value.got) == (parent.run.run_id, "", sid)

    @pytest.mark.parametrize(
        "status", [RunStatus.SUSPENDED, RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED]
    )
    async def test_one_shot_child_needs_a_running_parent(
        self, world: World, status: RunStatus
    ) -> None:
        """[L4] no new child after the parent ended: RunNotActiveError, no link."""
        parent = await world.one_shot("parent")
        await _stop(world, parent, status)
        _, cmd = _child(world, "child", parent)
        async with world.unchanged():
            with pytest.raises(RunNotActiveError) as e:
                await world.store.start_one_shot_child_run(cmd)
        assert (e.value.run_id, e.value.expected, e.value.got) == (
            parent.run.run_id,
            "running",
            status.value,
        )

    async def test_one_shot_child_refuses_a_session_or_no_parent(self, world: World) -> None:
        """[L4] a one-shot child names a parent and no session."""
        sid = await world.session("s")
        parent = await world.one_shot("parent")
        for run, field in (
            (world.run("child", parent=parent.run.run_id, session=sid), "run.session_id"),
            (world.run("orphan"), "run.parent_run_id"),
        ):
            cmd = run.one_shot_child_start(
                parent_agent_id=parent.run.agent_id, tool_name="t", tool_call_id="c"
            )
            async with world.unchanged():
                with pytest.raises(ValidationError) as e:
                    await world.store.start_one_shot_child_run(cmd)
            assert e.value.field == field

    async def test_one_shot_child_validates_the_link(self, world: World) -> None:
        """[L4] [J1] the link must be the parent's record and name this child."""
        parent = await world.one_shot("parent")
        child, cmd = _child(world, "child", parent)
        wrong_child = payloads.ChildRunLinked(
            tool_name="agent_tool",
            tool_call_id="call-1",
            child_run_id=parent.run.run_id,
            child_agent_id="child-agent",
        ).encode()
        cases: list[tuple[Record, type[Exception], str]] = [
            (_with(cmd.parent_linked, run_id=child.run.run_id), RecordOwnerMismatchError, "run_id"),
            (
                _with(cmd.parent_linked, payload=wrong_child),
                ValidationError,
                "parent_linked.payload.child_run_id",
            ),
            (_with(cmd.parent_linked, payload=b"{}"), ValidationError, "parent_linked.payload"),
        ]
        for link, error, field in cases:
            async with world.unchanged():
                with pytest.raises(error) as e:
                    await world.store.start_one_shot_child_run(
                        msgspec.structs.replace(cmd, parent_linked=link)
                    )
            assert getattr(e.value, "field", None) == field

    async def test_one_shot_child_link_key_already_used(self, world: World) -> None:
        """[L4] a link key the parent already holds is RecordConflictError."""
        parent = await world.one_shot("parent")
        _, first = _child(world, "first", parent)
        await world.store.start_one_shot_child_run(first)
        _, second = _child(world, "second", parent, call="call-2")
        key = first.parent_linked.event_key
        clash = msgspec.structs.replace(
            second, parent_linked=_with(second.parent_linked, event_key=key)
        )
        async with world.unchanged():
            with pytest.raises(RecordConflictError) as e:
                await world.store.start_one_shot_child_run(clash)
        assert (e.value.run_id, e.value.field, e.value.got) == (
            parent.run.run_id,
            "parent_linked.event_key",
            key,
        )

    async def test_one_shot_child_exact_retry_after_the_parent_ended(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[L4] [X1] an accepted child start is retryable after the parent completed."""
        parent = await world.one_shot("parent")
        child, cmd = _child(world, "child", parent)
        await world.store.start_one_shot_child_run(cmd)
        await world.finish(child)
        await world.finish(parent)
        async with world.unchanged():
            retry = await other_store.start_one_shot_child_run(cmd)
        assert retry == StartResult(
            outcome=StartOutcome.PROCEED,
            run_status=RunStatus.COMPLETED,
            started=AppendResult(id="1", inserted=False, session_status=None),
            parent_record=AppendResult(id="2", inserted=False, session_status=None),
        )

    @pytest.mark.parametrize(
        ("change", "field"),
        [
            ("tool_call_id", "parent_linked.payload"),
            ("link.event_key", "parent_linked.event_key"),
            ("link.timestamp", "parent_linked.timestamp"),
            ("labels", "run.labels"),
        ],
    )
    async def test_one_shot_child_changed_retry_is_a_conflict(
        self, world: World, change: str, field: str
    ) -> None:
        """[L4] [X2] a changed retry of a one-shot child start is RunConflictError."""
        parent = await world.one_shot("parent")
        child, cmd = _child(world, "child", parent)
        await world.store.start_one_shot_child_run(cmd)
        await world.finish(parent)
        pa = parent.run.agent_id
        if change == "tool_call_id":
            changed = child.one_shot_child_start(
                parent_agent_id=pa, tool_name="agent_tool", tool_call_id="call-2"
            )
        elif change == "link.event_key":
            changed = msgspec.structs.replace(
                cmd, parent_linked=_with(cmd.parent_linked, event_key="link-2")
            )
        elif change == "link.timestamp":
            changed = child.one_shot_child_start(
                parent_agent_id=pa,
                tool_name="agent_tool",
                tool_call_id="call-1",
                linked_at=child.run.started_at + timedelta(seconds=1),
            )
        else:
            changed = _rebuilt(child, labels={"k": "v"}).one_shot_child_start(
                parent_agent_id=pa, tool_name="agent_tool", tool_call_id="call-1"
            )
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_one_shot_child_run(changed)
        assert (e.value.run_id, e.value.field) == (child.run.run_id, field)

    async def test_one_shot_child_of_a_one_shot_child(self, world: World) -> None:
        """[L4] a sessionless child can have sessionless children of its own."""
        root = await world.one_shot("root")
        child, cmd = _child(world, "child", root)
        await world.store.start_one_shot_child_run(cmd)
        grandchild, gcmd = _child(world, "grandchild", child)
        result = await world.store.start_one_shot_child_run(gcmd)
        assert result.parent_record == AppendResult(id="2", inserted=True, session_status=None)
        assert [r.type for r in await _log(world.store, child.run.run_id)] == [
            "run_started",
            "child_run_linked",
        ]
        assert (await world.store.load_run(grandchild.run.run_id)).parent_run_id == (
            child.run.run_id
        )
