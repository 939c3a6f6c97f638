"""Conformance: lifecycle commands that carry ordinary records [L1]-[L7] with [B1].

A start, a suspension or a terminal may carry ordinary records of its run in
``records``: a start writes them right after ``run_started`` when it
proceeds (none when it stops [C2]); a suspension or terminal writes them just
before its lifecycle record. All in one transaction: an exact retry of the
whole command returns the original ids [X1], a retry whose records differ is
a conflict, and a refused command changes nothing.
"""

from __future__ import annotations

import pytest
from msgspec.structs import replace

from agentledger.errors import (
    RecordConflictError,
    RecordOwnerMismatchError,
    RunConflictError,
    RunNotFoundError,
    RunSuspensionConflictError,
    RunTerminalConflictError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._races import race, split
from agentledger.storage.conformance._world import AdminStore, World, changed
from agentledger.storage.conformance._world import run_log as _log
from agentledger.storage.types import (
    AppendResult,
    Checkpoint,
    RunStatus,
    SessionStatus,
    StartOutcome,
    StartResult,
)

__all__ = ["CarriedRecordsConformance"]

_ACTIVE = SessionStatus.ACTIVE


class CarriedRecordsConformance(ConformanceBase):
    """Capability: starts, suspensions and terminals that write their run's records too."""

    async def test_start_writes_carried_records_after_run_started(self, world: World) -> None:
        """A proceeding start stores its records as ids 2, 3 ... and reports them."""
        sid = await world.session("s")
        run = world.run("r", session=sid)
        notes = (world.note(run, "a"), world.note(run, "b"))
        cmd = replace(run.root_start(), records=notes)
        result = await world.store.start_root_run(cmd)
        assert result.outcome is StartOutcome.PROCEED
        assert result.records == (
            AppendResult(id="2", inserted=True, session_status=_ACTIVE),
            AppendResult(id="3", inserted=True, session_status=_ACTIVE),
        )
        log = await _log(world.store, run.run.run_id)
        assert log[1:] == [changed(n, id=str(i + 2)) for i, n in enumerate(notes)]
        assert log[0].type == payloads.RUN_STARTED
        async with world.unchanged():
            again = await world.store.start_root_run(cmd)
        assert again.records == tuple(replace(r, inserted=False) for r in result.records)
        assert again.started == replace(result.started, inserted=False)

    async def test_stopped_start_writes_no_carried_records(self, world: World) -> None:
        """[C2] a start on an ended session stores its stop, not its records."""
        sid = await world.session("s")
        await world.store.end_session(sid, ended_at=world.now())
        run = world.run("r", session=sid)
        cmd = replace(run.root_start(), records=(world.note(run, "a"),))
        result = await world.store.start_root_run(cmd)
        assert (result.outcome, result.records) == (StartOutcome.STOP, ())
        types = [r.type for r in await _log(world.store, run.run.run_id)]
        assert types == [payloads.RUN_STARTED, payloads.RUN_COMPLETED]
        assert (await world.store.start_root_run(cmd)).records == ()

    async def test_start_retry_with_other_records_conflicts(self, world: World) -> None:
        """[X1]/[X3] changed or extra carried records make a start retry a conflict."""
        sid = await world.session("s")
        run = world.run("r", session=sid)
        cmd = replace(run.root_start(), records=(world.note(run, "a"),))
        await world.store.start_root_run(cmd)
        other = changed(cmd.records[0], payload=b'{"other":1}')
        async with world.unchanged():
            with pytest.raises(RunConflictError) as caught:
                await world.store.start_root_run(replace(cmd, records=(other,)))
            assert caught.value.field == "records[0].payload"
            with pytest.raises(RunConflictError) as caught:
                await world.store.start_root_run(
                    replace(cmd, records=(*cmd.records, world.note(run, "late")))
                )
            assert caught.value.field == "records[1].event_key"

    async def test_race_of_starts_carrying_different_records(
        self, world: World, store: AdminStore, other_store: AdminStore
    ) -> None:
        """[X5] concurrent starts of one run with other carried records: one wins whole."""
        sid = await world.session("s")
        run = world.run("r", session=sid)
        cmd = run.root_start()
        note = world.note(run, "a")
        commands = [
            replace(cmd, records=(changed(note, payload=b'{"writer":%d}' % i),)) for i in range(4)
        ]
        results = await race(
            [(store, other_store)[i % 2].start_root_run(c) for i, c in enumerate(commands)]
        )
        wins, losses = split(results, StartResult)
        assert (len(wins), len(losses)) == (1, 3), results
        assert all(type(error) is RunConflictError for _, error in losses), losses
        [(winner, _)] = wins
        log = await _log(other_store, run.run.run_id)
        assert log[1:] == [changed(commands[winner].records[0], id="2")]

    async def test_bad_carried_record_refuses_the_start(self, world: World) -> None:
        """A lifecycle type, another run's record or a key clash refuses it; no run exists."""
        sid = await world.session("s")
        run = world.run("r", session=sid)
        stranger = world.run("x", session=sid)
        cmd = run.root_start()
        bad = (
            (ValidationError, (changed(world.note(run, "a"), type=payloads.RUN_SUSPENDED),)),
            (ValidationError, (world.note(stranger, "a"),)),
            (RecordOwnerMismatchError, (changed(world.note(run, "a"), agent_id="other"),)),
            (RecordConflictError, (world.note(run, cmd.started.event_key),)),
        )
        for error, records in bad:
            with pytest.raises(error):
                await world.store.start_root_run(replace(cmd, records=records))
        with pytest.raises(RunNotFoundError):
            await world.store.load_run(run.run.run_id)

    async def test_child_start_carries_the_childs_records(self, world: World) -> None:
        """[L2] the link goes on the parent's log, the carried records on the child's."""
        sid = await world.session("s")
        parent = await world.root("p", session=sid)
        run = world.run("c", session=sid, parent=parent.run.run_id)
        cmd = run.child_start(
            parent_agent_id=parent.run.agent_id, tool_name="agent_tool", tool_call_id="call-1"
        )
        note = world.note(run, "a")
        result = await world.store.start_child_run(replace(cmd, records=(note,)))
        assert result.records == (AppendResult(id="2", inserted=True, session_status=_ACTIVE),)
        assert [r.type for r in await _log(world.store, parent.run.run_id)] == [
            payloads.RUN_STARTED,
            payloads.CHILD_RUN_LINKED,
        ]
        assert (await _log(world.store, run.run.run_id))[1:] == [changed(note, id="2")]

    async def test_suspension_writes_carried_records_first(self, world: World) -> None:
        """[L6] records then ``run_suspended``, once; a changed retry conflicts."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        stored = world.note(run, "stored")
        await world.store.append_run_record(stored)
        notes = (stored, world.note(run, "a"))  # an exact retry and a new record
        cmd = replace(
            run.suspension(Checkpoint(id="cp", data=b"\x00cp"), at=world.now()), records=notes
        )
        result = await world.store.record_run_suspension(cmd)
        assert result == AppendResult(
            id="4",
            inserted=True,
            session_status=_ACTIVE,
            records=(
                AppendResult(id="2", inserted=False, session_status=_ACTIVE),
                AppendResult(id="3", inserted=True, session_status=_ACTIVE),
            ),
        )
        log = await _log(world.store, run.run.run_id)
        assert [r.event_key for r in log[1:]] == ["stored", "a", cmd.record.event_key]
        assert (await world.store.load_run(run.run.run_id)).status is RunStatus.SUSPENDED
        async with world.unchanged():
            again = await world.store.record_run_suspension(cmd)
            assert again == replace(
                result,
                inserted=False,
                records=tuple(replace(r, inserted=False) for r in result.records),
            )
            with pytest.raises(RunSuspensionConflictError) as caught:
                await world.store.record_run_suspension(
                    replace(cmd, records=(stored, changed(notes[1], payload=b'{"x":2}')))
                )
            assert caught.value.field == "records[1].payload"

    async def test_terminal_writes_carried_records_all_or_none(self, world: World) -> None:
        """[L7] a bad carried record refuses the terminal; a good one precedes it."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = run.terminal(RunStatus.COMPLETED, at=world.now())
        notes = (world.note(run, "a"), world.note(run, "b"))
        async with world.unchanged():
            for records in (
                (notes[0], changed(notes[1], type=payloads.RUN_STARTED)),
                (notes[0], world.note(run, cmd.record.event_key)),
            ):
                with pytest.raises((ValidationError, RecordConflictError)):
                    await world.store.record_run_terminal(replace(cmd, records=records))
            with pytest.raises(ValidationError) as caught:
                await world.store.repair_run_terminal(replace(cmd, records=notes))
            assert caught.value.field == "records"
        result = await world.store.record_run_terminal(replace(cmd, records=notes))
        assert (result.id, [(r.id, r.inserted) for r in result.records]) == (
            "4",
            [("2", True), ("3", True)],
        )
        log = await _log(world.store, run.run.run_id)
        assert [r.event_key for r in log[1:]] == ["a", "b", cmd.record.event_key]
        with pytest.raises(RunTerminalConflictError) as conflict:
            await world.store.record_run_terminal(replace(cmd, records=(world.note(run, "z"),)))
        assert conflict.value.field == "records[0].event_key"
