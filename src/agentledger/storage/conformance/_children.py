"""Conformance: child run starts in a session [L2] [O2] [C2] [X1] [X2] [X4].

A child start writes the ``child_run_linked`` record on the parent's log and
the child's ``run_started`` in one operation. A new child needs a running
parent in the same session; an exact retry stays valid after the parent
stopped; any other difference is a conflict.
"""

from __future__ import annotations

from collections.abc import Callable
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
    ChildRunStart,
    Record,
    RunStatus,
    SessionStatus,
    StartOutcome,
    StartResult,
)

__all__ = ["ChildrenConformance"]

_ACTIVE = SessionStatus.ACTIVE
_ENDED = SessionStatus.ENDED


def _child(
    world: World,
    name: str,
    parent: RecordBuilder,
    *,
    agent: str = "child-agent",
    call: str = "call-1",
    tool: str = "agent_tool",
    **kw: Any,
) -> tuple[RecordBuilder, ChildRunStart]:
    """A child of ``parent`` in the parent's session and the command that starts it."""
    run = world.run(
        name, session=parent.run.session_id, parent=parent.run.run_id, agent=agent, **kw
    )
    cmd = run.child_start(parent_agent_id=parent.run.agent_id, tool_name=tool, tool_call_id=call)
    return run, cmd


async def _stop(world: World, run: RecordBuilder, status: RunStatus) -> None:
    """Bring a running run to ``status`` through the lifecycle methods."""
    if status is RunStatus.SUSPENDED:
        await world.suspend(run)
    elif status is RunStatus.CANCELED:
        await world.store.record_run_cancellation(run.cancellation("user", at=world.now()))
        await world.store.record_run_terminal(
            run.terminal(RunStatus.CANCELED, at=world.now(), reason="user")
        )
    else:
        await world.finish(run, status)


def _link_payload(**changes: str) -> bytes:
    fields = {
        "tool_name": "agent_tool",
        "tool_call_id": "call-1",
        "child_run_id": "",
        "child_agent_id": "child-agent",
    }
    fields.update(changes)
    return payloads.ChildRunLinked(**fields).encode()


# A bad ``parent_linked`` record: how to spoil it (given the child's run id),
# the error and the field it names.
_BAD_LINKS: dict[str, tuple[Callable[[Record, str], Record], type[Exception], str]] = {
    "child_run_id": (
        lambda r, cid: _with(r, payload=_link_payload(child_run_id=cid + "-other")),
        ValidationError,
        "parent_linked.payload.child_run_id",
    ),
    "child_agent_id": (
        lambda r, cid: _with(r, payload=_link_payload(child_run_id=cid, child_agent_id="x")),
        ValidationError,
        "parent_linked.payload.child_agent_id",
    ),
    "tool_name": (
        lambda r, cid: _with(r, payload=_link_payload(child_run_id=cid, tool_name="")),
        ValidationError,
        "parent_linked.payload.tool_name",
    ),
    "tool_call_id": (
        lambda r, cid: _with(r, payload=_link_payload(child_run_id=cid, tool_call_id="")),
        ValidationError,
        "parent_linked.payload.tool_call_id",
    ),
    "missing_field": (
        lambda r, cid: _with(r, payload=b'{"tool_name":"agent_tool","tool_call_id":"call-1"}'),
        ValidationError,
        "parent_linked.payload",
    ),
    "unknown_field": (
        lambda r, cid: _with(r, payload=r.payload[:-1] + b',"extra":true}'),
        ValidationError,
        "parent_linked.payload",
    ),
    "type": (
        lambda r, cid: _with(r, type="planner_note"),
        ValidationError,
        "parent_linked.type",
    ),
    "on_child_log": (
        lambda r, cid: _with(r, run_id=cid),
        RecordOwnerMismatchError,
        "run_id",
    ),
    "parent_session": (
        lambda r, cid: _with(r, session_id="elsewhere"),
        RecordOwnerMismatchError,
        "session_id",
    ),
    "parent_agent": (
        lambda r, cid: _with(r, agent_id="child-agent"),
        RecordOwnerMismatchError,
        "agent_id",
    ),
    "empty_key": (
        lambda r, cid: _with(r, event_key=""),
        ValidationError,
        "parent_linked.event_key",
    ),
}


class ChildrenConformance(ConformanceBase):
    """Capability: starting child runs on a running parent of the same session."""

    # ------------------------------------------------------------- first start

    async def test_child_start_links_on_the_parent_and_starts_the_child(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[L2] one call saves the link on the parent's log, the child and its ``run_started``."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        pid = parent.run.run_id
        await world.store.append_run_record(world.note(parent, "before-child"))
        child, cmd = _child(world, "child", parent, labels={"role": "helper"})
        cid = child.run.run_id
        result = await world.store.start_child_run(cmd)
        assert result == StartResult(
            outcome=StartOutcome.PROCEED,
            run_status=RunStatus.RUNNING,
            started=AppendResult(id="1", inserted=True, session_status=_ACTIVE),
            canceled=None,
            parent_record=AppendResult(id="3", inserted=True, session_status=_ACTIVE),
        )
        parent_log = await _log(other_store, pid)
        assert [r.type for r in parent_log] == ["run_started", "planner_note", "child_run_linked"]
        assert parent_log[2] == _with(cmd.parent_linked, id="3")
        assert payloads.ChildRunLinked.decode(parent_log[2].payload) == payloads.ChildRunLinked(
            tool_name="agent_tool",
            tool_call_id="call-1",
            child_run_id=cid,
            child_agent_id="child-agent",
        )
        child_log = await _log(other_store, cid)
        assert child_log == [_with(cmd.started, id="1")]
        assert payloads.RunStarted.decode(child_log[0].payload) == payloads.RunStarted(
            parent_run_id=pid, labels={"role": "helper"}
        )
        meta = await other_store.load_run(cid)
        assert (meta.parent_run_id, meta.session_id, meta.agent_id, meta.status) == (
            pid,
            sid,
            "child-agent",
            RunStatus.RUNNING,
        )
        assert meta.labels == {"role": "helper"}
        assert (await other_store.load_run(pid)).status is RunStatus.RUNNING

    async def test_child_link_is_committed_before_the_child_start(self, world: World) -> None:
        """[O2] in the session's commit order the parent link precedes the child's start."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        child, cmd = _child(world, "child", parent)
        await world.store.start_child_run(cmd)
        page = await world.store.list_session_run_records(sid)
        assert [(r.run_id, r.id, r.type) for r in page.records] == [
            (parent.run.run_id, "1", "run_started"),
            (parent.run.run_id, "2", "child_run_linked"),
            (child.run.run_id, "1", "run_started"),
        ]
        assert [m.run_id for m in await world.store.list_runs_by_session(sid)] == [
            parent.run.run_id,
            child.run.run_id,
        ]

    async def test_child_links_in_order_on_the_parent(self, world: World) -> None:
        """[L2] each child's link takes the parent's next record id, in start order."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        ids = []
        children = []
        for n in range(3):
            child, cmd = _child(world, f"child-{n}", parent, call=f"call-{n}")
            result = await world.store.start_child_run(cmd)
            assert result.parent_record is not None
            ids.append(result.parent_record.id)
            children.append(child.run.run_id)
        assert ids == ["2", "3", "4"]
        parent_log = await _log(world.store, parent.run.run_id)
        linked = [payloads.ChildRunLinked.decode(r.payload) for r in parent_log[1:]]
        assert [(c.child_run_id, c.tool_call_id) for c in linked] == [
            (children[0], "call-0"),
            (children[1], "call-1"),
            (children[2], "call-2"),
        ]
        appended = await world.store.append_run_record(world.note(parent, "after"))
        assert appended.id == "5"

    async def test_child_grandchild_links_on_its_own_parent(self, world: World) -> None:
        """[L2] a child's child is linked on the child's log, not the root's."""
        sid = await world.session("s")
        root = await world.root("root", session=sid)
        child, cmd = _child(world, "child", root)
        await world.store.start_child_run(cmd)
        grandchild, gcmd = _child(world, "grandchild", child, agent="leaf")
        result = await world.store.start_child_run(gcmd)
        assert result.parent_record == AppendResult(id="2", inserted=True, session_status=_ACTIVE)
        assert [r.type for r in await _log(world.store, root.run.run_id)] == [
            "run_started",
            "child_run_linked",
        ]
        assert [r.type for r in await _log(world.store, child.run.run_id)] == [
            "run_started",
            "child_run_linked",
        ]
        meta = await world.store.load_run(grandchild.run.run_id)
        assert meta.parent_run_id == child.run.run_id

    # ---------------------------------------------------------- parent checks

    @pytest.mark.parametrize(
        "status",
        [RunStatus.SUSPENDED, RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED],
    )
    async def test_child_new_child_needs_a_running_parent(
        self, world: World, status: RunStatus
    ) -> None:
        """[L2] a new child of a stopped parent is RunNotActiveError; no link is written."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        await _stop(world, parent, status)
        _, cmd = _child(world, "child", parent)
        async with world.unchanged():
            with pytest.raises(RunNotActiveError) as e:
                await world.store.start_child_run(cmd)
        assert (e.value.run_id, e.value.expected, e.value.got) == (
            parent.run.run_id,
            "running",
            status.value,
        )

    async def test_child_parent_in_another_session_is_a_mismatch(self, world: World) -> None:
        """[L2] the parent must be in the child's session: RunSessionMismatchError."""
        home = await world.session("home")
        away = await world.session("away")
        parent = await world.root("parent", session=home)
        child = world.run("child", session=away, parent=parent.run.run_id, agent="child-agent")
        cmd = child.child_start(
            parent_agent_id=parent.run.agent_id, tool_name="agent_tool", tool_call_id="call-1"
        )
        async with world.unchanged():
            with pytest.raises(RunSessionMismatchError) as e:
                await world.store.start_child_run(cmd)
        assert (e.value.run_id, e.value.expected, e.value.got) == (parent.run.run_id, away, home)

    async def test_child_sessionless_parent_is_a_mismatch(self, world: World) -> None:
        """[L2] a session child cannot hang off a one-shot parent."""
        sid = await world.session("s")
        parent = await world.one_shot("parent")
        child = world.run("child", session=sid, parent=parent.run.run_id)
        cmd = child.child_start(
            parent_agent_id=parent.run.agent_id, tool_name="agent_tool", tool_call_id="call-1"
        )
        async with world.unchanged():
            with pytest.raises(RunSessionMismatchError) as e:
                await world.store.start_child_run(cmd)
        assert (e.value.run_id, e.value.expected, e.value.got) == (parent.run.run_id, sid, "")

    async def test_child_missing_parent_is_not_found(self, world: World) -> None:
        """[L2] a child of a run that does not exist is RunNotFoundError."""
        sid = await world.session("s")
        pid = world.track_run("ghost")
        child = world.run("child", session=sid, parent=pid)
        cmd = child.child_start(parent_agent_id="agent", tool_name="t", tool_call_id="c")
        async with world.unchanged():
            with pytest.raises(RunNotFoundError) as e:
                await world.store.start_child_run(cmd)
        assert e.value.run_id == pid

    async def test_child_start_validates_its_shape(self, world: World) -> None:
        """[L2] a child start needs a session and a parent other than itself."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        _, cmd = _child(world, "child", parent)
        cases = [
            (msgspec.structs.replace(cmd.run, parent_run_id=""), "run.parent_run_id"),
            (msgspec.structs.replace(cmd.run, session_id=""), "run.session_id"),
            (msgspec.structs.replace(cmd.run, parent_run_id=cmd.run.run_id), "run.parent_run_id"),
        ]
        for run, field in cases:
            bad = RecordBuilder(run).child_start(
                parent_agent_id="agent", tool_name="agent_tool", tool_call_id="call-1"
            )
            async with world.unchanged():
                with pytest.raises(ValidationError) as e:
                    await world.store.start_child_run(bad)
            assert e.value.field == field

    @pytest.mark.parametrize("case", sorted(_BAD_LINKS))
    async def test_child_start_validates_the_link(self, world: World, case: str) -> None:
        """[L2] [J1] the link must be the parent's and name this child; nothing is written."""
        spoil, error, field = _BAD_LINKS[case]
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        child, cmd = _child(world, "child", parent)
        bad = msgspec.structs.replace(cmd, parent_linked=spoil(cmd.parent_linked, child.run.run_id))
        async with world.unchanged():
            with pytest.raises(error) as e:
                await world.store.start_child_run(bad)
        assert getattr(e.value, "field", None) == field
        if isinstance(e.value, RecordOwnerMismatchError):
            assert e.value.run_id == parent.run.run_id

    async def test_child_start_validates_both_candidates(self, world: World) -> None:
        """[C2] [J1] a child's ``run_started`` and unused ``canceled`` are both validated."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        child, cmd = _child(world, "child", parent)
        no_parent = _with(cmd.started, payload=payloads.RunStarted().encode())
        wrong_reason = child.completed(RunStatus.CANCELED, at=child.run.started_at, reason="x")
        for bad, field in (
            (msgspec.structs.replace(cmd, started=no_parent), "started.payload.parent_run_id"),
            (
                msgspec.structs.replace(cmd, canceled=wrong_reason),
                "canceled.payload.cancellation.reason",
            ),
        ):
            async with world.unchanged():
                with pytest.raises(ValidationError) as e:
                    await world.store.start_child_run(bad)
            assert e.value.field == field

    async def test_child_link_key_already_used_on_the_parent(self, world: World) -> None:
        """[L2] [X2] a link key the parent's log already holds is RecordConflictError."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        _, first = _child(world, "first", parent, call="call-1")
        await world.store.start_child_run(first)
        _, second = _child(world, "second", parent, call="call-2")
        reused = first.parent_linked.event_key
        clash = msgspec.structs.replace(
            second, parent_linked=_with(second.parent_linked, event_key=reused)
        )
        async with world.unchanged():
            with pytest.raises(RecordConflictError) as e:
                await world.store.start_child_run(clash)
        assert (e.value.run_id, e.value.field, e.value.got) == (
            parent.run.run_id,
            "parent_linked.event_key",
            reused,
        )

    async def test_child_link_key_used_by_an_ordinary_parent_record(self, world: World) -> None:
        """[L2] the link key must be fresh on the parent's log, whatever record holds it."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        _, cmd = _child(world, "child", parent)
        await world.store.append_run_record(world.note(parent, cmd.parent_linked.event_key))
        async with world.unchanged():
            with pytest.raises(RecordConflictError) as e:
                await world.store.start_child_run(cmd)
        assert (e.value.run_id, e.value.field) == (parent.run.run_id, "parent_linked.event_key")

    # ---------------------------------------------------------------- retries

    async def test_child_exact_retry_while_running(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[X1] [X4] an exact retry returns both original ids with ``inserted=False``."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        _, cmd = _child(world, "child", parent)
        await world.store.start_child_run(cmd)
        async with world.unchanged():
            retry = await other_store.start_child_run(cmd)
        assert retry == StartResult(
            outcome=StartOutcome.PROCEED,
            run_status=RunStatus.RUNNING,
            started=AppendResult(id="1", inserted=False, session_status=_ACTIVE),
            parent_record=AppendResult(id="2", inserted=False, session_status=_ACTIVE),
        )

    @pytest.mark.parametrize("status", [RunStatus.SUSPENDED, RunStatus.COMPLETED])
    async def test_child_exact_retry_after_the_parent_stopped(
        self, world: World, status: RunStatus
    ) -> None:
        """[L2] [X1] an accepted child start stays retryable after its parent stopped."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        _, cmd = _child(world, "child", parent)
        first = await world.store.start_child_run(cmd)
        await _stop(world, parent, status)
        await world.store.end_session(sid, ended_at=world.now())
        async with world.unchanged():
            retry = await world.store.start_child_run(cmd)
        assert first.parent_record is not None
        assert retry == StartResult(
            outcome=StartOutcome.PROCEED,
            run_status=RunStatus.RUNNING,
            started=AppendResult(id="1", inserted=False, session_status=_ENDED),
            parent_record=AppendResult(
                id=first.parent_record.id, inserted=False, session_status=_ENDED
            ),
        )

    async def test_child_retry_reports_the_childs_current_status(self, world: World) -> None:
        """[X4] a retry after the child finished reports ``proceed`` and ``completed``."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        child, cmd = _child(world, "child", parent)
        await world.store.start_child_run(cmd)
        await world.finish(child, RunStatus.FAILED)
        before = await world.store.load_run(child.run.run_id)
        async with world.unchanged():
            retry = await world.store.start_child_run(cmd)
        assert (retry.outcome, retry.run_status) == (StartOutcome.PROCEED, RunStatus.FAILED)
        assert retry.parent_record == AppendResult(id="2", inserted=False, session_status=_ACTIVE)
        assert await world.store.load_run(child.run.run_id) == before

    @pytest.mark.parametrize(
        "change",
        [
            "tool_call_id",
            "tool_name",
            "link.event_key",
            "link.timestamp",
            "link.turn_id",
            "labels",
            "agent_id",
            "started_at",
            "started.event_key",
        ],
    )
    async def test_child_changed_retry_is_a_conflict(self, world: World, change: str) -> None:
        """[X2] [X3] a retry differing from the accepted child start is RunConflictError."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        child, cmd = _child(world, "child", parent)
        await world.store.start_child_run(cmd)
        pa = parent.run.agent_id
        link = cmd.parent_linked
        later = child.run.started_at + timedelta(seconds=1)
        changed: ChildRunStart
        field: str
        expected: object
        got: object
        if change == "tool_call_id":
            changed = child.child_start(
                parent_agent_id=pa, tool_name="agent_tool", tool_call_id="c2"
            )
            field, expected, got = (
                "parent_linked.payload",
                link.payload,
                changed.parent_linked.payload,
            )
        elif change == "tool_name":
            changed = child.child_start(parent_agent_id=pa, tool_name="t2", tool_call_id="call-1")
            field, expected, got = (
                "parent_linked.payload",
                link.payload,
                changed.parent_linked.payload,
            )
        elif change == "link.event_key":
            changed = msgspec.structs.replace(cmd, parent_linked=_with(link, event_key="link-2"))
            field, expected, got = "parent_linked.event_key", link.event_key, "link-2"
        elif change == "link.timestamp":
            changed = child.child_start(
                parent_agent_id=pa, tool_name="agent_tool", tool_call_id="call-1", linked_at=later
            )
            field, expected, got = "parent_linked.timestamp", link.timestamp, later
        elif change == "link.turn_id":
            changed = msgspec.structs.replace(cmd, parent_linked=_with(link, turn_id="turn-2"))
            field, expected, got = "parent_linked.turn_id", "", "turn-2"
        elif change == "labels":
            changed = _rebuilt(child, labels={"x": "y"}).child_start(
                parent_agent_id=pa, tool_name="agent_tool", tool_call_id="call-1"
            )
            field, expected, got = "run.labels", {}, {"x": "y"}
        elif change == "agent_id":
            changed = _rebuilt(child, agent_id="other-agent").child_start(
                parent_agent_id=pa, tool_name="agent_tool", tool_call_id="call-1"
            )
            field, expected, got = "run.agent_id", "child-agent", "other-agent"
        elif change == "started_at":
            changed = _rebuilt(child, started_at=later).child_start(
                parent_agent_id=pa, tool_name="agent_tool", tool_call_id="call-1"
            )
            field, expected, got = "run.started_at", child.run.started_at, later
        else:
            started = _with(cmd.started, event_key="start-2")
            changed = msgspec.structs.replace(cmd, started=started)
            field, expected, got = "started.event_key", "run_started", "start-2"
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_child_run(changed)
        assert (e.value.run_id, e.value.field, e.value.expected, e.value.got) == (
            child.run.run_id,
            field,
            expected,
            got,
        )

    async def test_child_retry_under_another_parent_is_a_conflict(self, world: World) -> None:
        """[X3] a child belongs to the parent that started it first."""
        sid = await world.session("s")
        first = await world.root("first", session=sid)
        second = await world.root("second", session=sid)
        child, cmd = _child(world, "child", first)
        await world.store.start_child_run(cmd)
        moved = _rebuilt(child, parent_run_id=second.run.run_id).child_start(
            parent_agent_id=second.run.agent_id, tool_name="agent_tool", tool_call_id="call-1"
        )
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_child_run(moved)
        assert (e.value.field, e.value.expected, e.value.got) == (
            "run.parent_run_id",
            first.run.run_id,
            second.run.run_id,
        )

    async def test_child_root_run_id_cannot_become_a_child(self, world: World) -> None:
        """[X3] a run started as a root cannot be started again as someone's child."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        root = await world.root("root", session=sid)
        cmd = _rebuilt(root, parent_run_id=parent.run.run_id).child_start(
            parent_agent_id=parent.run.agent_id, tool_name="agent_tool", tool_call_id="call-1"
        )
        async with world.unchanged():
            with pytest.raises(RunConflictError) as e:
                await world.store.start_child_run(cmd)
        assert (e.value.run_id, e.value.field, e.value.expected, e.value.got) == (
            root.run.run_id,
            "run.parent_run_id",
            "",
            parent.run.run_id,
        )

    # ---------------------------------------------------------- ended session

    async def test_child_in_an_ended_session_stops(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[C2] [O2] a running parent in an ended session: link, start and stop together."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        await world.store.end_session(sid, ended_at=world.now())
        child, cmd = _child(world, "child", parent)
        cid = child.run.run_id
        result = await world.store.start_child_run(cmd)
        assert result == StartResult(
            outcome=StartOutcome.STOP,
            run_status=RunStatus.CANCELED,
            started=AppendResult(id="1", inserted=True, session_status=_ENDED),
            canceled=AppendResult(id="2", inserted=True, session_status=_ENDED),
            parent_record=AppendResult(id="2", inserted=True, session_status=_ENDED),
        )
        assert await _log(other_store, parent.run.run_id) == [
            _with(parent.root_start().started, id="1"),
            _with(cmd.parent_linked, id="2"),
        ]
        assert await _log(other_store, cid) == [
            _with(cmd.started, id="1"),
            _with(cmd.canceled, id="2"),
        ]
        meta = await other_store.load_run(cid)
        assert (meta.status, meta.start_outcome, meta.cancellation_reason) == (
            RunStatus.CANCELED,
            StartOutcome.STOP,
            "session_ended",
        )
        async with world.unchanged():
            retry = await other_store.start_child_run(cmd)
        assert retry == StartResult(
            outcome=StartOutcome.STOP,
            run_status=RunStatus.CANCELED,
            started=AppendResult(id="1", inserted=False, session_status=_ENDED),
            canceled=AppendResult(id="2", inserted=False, session_status=_ENDED),
            parent_record=AppendResult(id="2", inserted=False, session_status=_ENDED),
        )

    async def test_child_ended_session_still_needs_a_running_parent(self, world: World) -> None:
        """[C2] [L2] no stop record is written for a child of a parent that already stopped."""
        sid = await world.session("s")
        parent = await world.root("parent", session=sid)
        await world.finish(parent)
        await world.store.end_session(sid, ended_at=world.now())
        _, cmd = _child(world, "child", parent)
        async with world.unchanged():
            with pytest.raises(RunNotActiveError) as e:
                await world.store.start_child_run(cmd)
        assert (e.value.run_id, e.value.got) == (parent.run.run_id, "completed")
