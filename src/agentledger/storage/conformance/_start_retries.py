"""Conformance: a start retried with other records than its first write carried [L10]/[X2].

A start that carried records wrote them right after ``run_started``, in order.
Its retry must carry the same records in the same order: then it returns the
original ids and writes nothing. One that carries fewer (even a leading part
of them), more, or the same in another order is a conflict
(:class:`RunConflictError` on ``records``) and writes nothing, even when the
run appended records of its own since.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from msgspec.structs import replace

from agentledger.errors import RunConflictError
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._world import World
from agentledger.storage.types import Record, StartResult

__all__ = ["StartRetryConformance"]

Start = Callable[[Any], Awaitable[StartResult]]


async def _retries_of(
    world: World, run: RecordBuilder, start: Start, cmd: Any, later: bool = True
) -> None:
    """Start ``cmd`` (carrying at least two records), then retry it every wrong way."""
    first = await start(cmd)
    assert [r.inserted for r in first.records] == [True] * len(cmd.records), first
    if later:  # the run's own append after the start: the log goes on past the start's records
        await world.store.append_run_record(world.note(run, "after-the-start"))
    carried: tuple[Record, ...] = cmd.records
    extra = world.note(run, "never-carried")
    wrong = {
        "the first record only": carried[:1],
        "the last record only": carried[-1:],
        "all but the last": carried[:-1],
        "a record more": (*carried, extra),
        "reordered": (carried[-1], *carried[:-1]),
        "none": (),
    }
    async with world.unchanged():
        for name, records in wrong.items():
            with pytest.raises(RunConflictError) as caught:
                await start(replace(cmd, records=records))
            assert caught.value.run_id == run.run.run_id, name
        again = await start(cmd)
    assert again.records == tuple(replace(r, inserted=False) for r in first.records)
    assert again.started == replace(first.started, inserted=False)


class StartRetryConformance(ConformanceBase):
    """Capability: a start's retry carries exactly the records its first write did."""

    async def test_root_start_retried_with_other_records_conflicts(self, world: World) -> None:
        """A history reference and the user's message, retried with one of them: a conflict."""
        sid = await world.session("s")
        source = await world.root("src", session=sid)
        await world.finish(source)
        run = world.run("r", session=sid)
        reference = run.record(
            payloads.TRANSCRIPT_REFERENCED,
            payloads.TranscriptReference(
                kind="next_turn", run_id=source.run.run_id, through="2"
            ).encode(),
            event_key="transcript:referenced",
            at=world.now(),
        )
        cmd = replace(run.root_start(), records=(reference, world.note(run, "user")))
        await _retries_of(world, run, world.store.start_root_run, cmd)

    async def test_root_start_of_three_records_retried_with_two_conflicts(
        self, world: World
    ) -> None:
        """Plain records, no later append: the retry's records are still all of the first's."""
        sid = await world.session("s")
        run = world.run("r", session=sid)
        notes = tuple(world.note(run, k) for k in ("a", "b", "c"))
        cmd = replace(run.root_start(), records=notes)
        await _retries_of(world, run, world.store.start_root_run, cmd, later=False)

    async def test_child_start_retried_with_other_records_conflicts(self, world: World) -> None:
        sid = await world.session("s")
        parent = await world.root("p", session=sid)
        run = world.run("c", session=sid, parent=parent.run.run_id)
        cmd = run.child_start(
            parent_agent_id=parent.run.agent_id, tool_name="agent_tool", tool_call_id="call-1"
        )
        cmd = replace(cmd, records=(world.note(run, "a"), world.note(run, "b")))
        await _retries_of(world, run, world.store.start_child_run, cmd)

    async def test_one_shot_start_retried_with_other_records_conflicts(self, world: World) -> None:
        run = world.run("o")
        cmd = replace(run.one_shot_start(), records=(world.note(run, "a"), world.note(run, "b")))
        await _retries_of(world, run, world.store.start_one_shot_run, cmd)

    async def test_one_shot_child_start_retried_with_other_records_conflicts(
        self, world: World
    ) -> None:
        parent = await world.one_shot("p")
        run = world.run("c", parent=parent.run.run_id)
        cmd = run.one_shot_child_start(
            parent_agent_id=parent.run.agent_id, tool_name="agent_tool", tool_call_id="call-1"
        )
        cmd = replace(cmd, records=(world.note(run, "a"), world.note(run, "b")))
        await _retries_of(world, run, world.store.start_one_shot_child_run, cmd)

    async def test_start_that_carried_nothing_retried_with_a_record_conflicts(
        self, world: World
    ) -> None:
        """The run appended a record after its start: a retry carrying it is not the start."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        note = world.note(run, "a")
        await world.store.append_run_record(note)
        async with world.unchanged():
            with pytest.raises(RunConflictError):
                await world.store.start_root_run(replace(run.root_start(), records=(note,)))
            again = await world.store.start_root_run(run.root_start())
        assert (again.started.inserted, again.records) == (False, ())
