"""Conformance: batches of ordinary records through ``append_run_records`` [B1].

A batch holds records of one run, in order. It is accepted whole (each record
inserted or an exact retry [X1]) or not at all: the first refusal is raised
and the store is unchanged.
"""

from __future__ import annotations

import pytest

from agentledger.errors import (
    RecordConflictError,
    RecordOwnerMismatchError,
    RunNotActiveError,
    RunNotFoundError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._races import race, split
from agentledger.storage.conformance._world import AdminStore, World, changed
from agentledger.storage.conformance._world import run_log as _log
from agentledger.storage.types import AppendResult, SessionStatus

__all__ = ["BatchConformance"]


class BatchConformance(ConformanceBase):
    """Capability: all-or-nothing batches of records of one run."""

    async def test_batch_appends_in_order_with_consecutive_ids(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[B1] one result per record, ids consecutive, the log in batch order."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        batch = [world.note(run, f"k{i}") for i in range(4)]
        results = await world.store.append_run_records(batch)
        assert results == [
            AppendResult(id=str(i + 2), inserted=True, session_status=SessionStatus.ACTIVE)
            for i in range(4)
        ]
        log = await _log(other_store, run.run.run_id)
        assert log[1:] == [changed(r, id=str(i + 2)) for i, r in enumerate(batch)]

    async def test_batch_whose_third_record_conflicts_changes_nothing(self, world: World) -> None:
        """[B1] a conflict on the third record refuses the batch; the first two are not kept."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        stored = world.note(run, "taken")
        await world.store.append_run_record(stored)
        batch = [
            world.note(run, "a"),
            world.note(run, "b"),
            changed(stored, payload=b'{"other":1}'),
            world.note(run, "d"),
        ]
        async with world.unchanged():
            with pytest.raises(RecordConflictError) as caught:
                await world.store.append_run_records(batch)
        assert caught.value.field == "record.payload"

    async def test_batch_exact_retry_of_whole_batch_and_of_prefix(self, world: World) -> None:
        """[B1] [X1] a repeated batch, or its prefix, returns the original ids uninserted."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        batch = [world.note(run, f"k{i}") for i in range(3)]
        first = await world.store.append_run_records(batch)
        async with world.unchanged():
            again = await world.store.append_run_records(batch)
            prefix = await world.store.append_run_records(batch[:2])
        assert [(r.id, r.inserted) for r in again] == [(r.id, False) for r in first]
        assert [(r.id, r.inserted) for r in prefix] == [(r.id, False) for r in first[:2]]

    async def test_batch_mixes_retried_and_inserted_records(self, world: World) -> None:
        """[B1] a batch extending a stored prefix retries the prefix and inserts the rest."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        batch = [world.note(run, f"k{i}") for i in range(4)]
        await world.store.append_run_records(batch[:2])
        results = await world.store.append_run_records(batch)
        assert [(r.id, r.inserted) for r in results] == [
            ("2", False),
            ("3", False),
            ("4", True),
            ("5", True),
        ]
        log = await _log(world.store, run.run.run_id)
        assert [r.event_key for r in log] == ["run_started", "k0", "k1", "k2", "k3"]

    async def test_batch_repeating_a_key_inside_is_a_retry_or_a_conflict(
        self, world: World
    ) -> None:
        """[B1] [X1] a key twice in one batch: the same record is a retry, another a conflict."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        note = world.note(run, "k")
        results = await world.store.append_run_records([note, note])
        assert [(r.id, r.inserted) for r in results] == [("2", True), ("2", False)]
        async with world.unchanged():
            with pytest.raises(RecordConflictError):
                await world.store.append_run_records(
                    [world.note(run, "new"), world.note(run, "x"), changed(note, turn_id="t")]
                )
            fresh = world.note(run, "y")
            with pytest.raises(RecordConflictError):
                await world.store.append_run_records([fresh, changed(fresh, payload=b"2")])

    @pytest.mark.parametrize("kind", sorted(payloads.LIFECYCLE_TYPES))
    async def test_batch_refuses_lifecycle_types(self, world: World, kind: str) -> None:
        """[B1] [L8] a lifecycle type anywhere in the batch refuses it whole."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        bad = run.record(kind, b"{}", event_key="lc", at=world.now())
        async with world.unchanged():
            with pytest.raises(ValidationError) as caught:
                await world.store.append_run_records([world.note(run, "a"), bad])
        assert caught.value.field == "records[1].type"

    async def test_batch_refuses_records_of_two_runs(self, world: World) -> None:
        """[B1] one run per batch: a record of another run refuses the batch."""
        sid = await world.session("s")
        a = await world.root("a", session=sid)
        b = await world.root("b", session=sid)
        async with world.unchanged():
            with pytest.raises(ValidationError) as caught:
                await world.store.append_run_records(
                    [world.note(a, "a1"), world.note(a, "a2"), world.note(b, "b1")]
                )
        assert caught.value.field == "records[2].run_id"

    async def test_batch_refuses_empty_and_malformed_input(self, world: World) -> None:
        """[B1] an empty batch, a non-sequence or a bad record is a ValidationError."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        async with world.unchanged():
            for bad, field in (
                ([], "records"),
                ("abc", "records"),
                (None, "records"),
                ([world.note(run, "a"), "nope"], "records[1]"),
                ([world.note(run, "a"), changed(world.note(run, "b"), payload=b"{")], None),
            ):
                with pytest.raises(ValidationError) as caught:
                    await world.store.append_run_records(bad)  # type: ignore[arg-type]
                if field is not None:
                    assert caught.value.field == field
                else:
                    assert caught.value.field == "records[1].payload"

    async def test_batch_checks_owner_of_every_record(self, world: World) -> None:
        """[B1] [L8] a later record naming another agent refuses the batch."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        async with world.unchanged():
            with pytest.raises(RecordOwnerMismatchError) as caught:
                await world.store.append_run_records(
                    [world.note(run, "a"), changed(world.note(run, "b"), agent_id="other")]
                )
        assert caught.value.field == "agent_id"

    async def test_batch_on_a_stopped_run(self, world: World) -> None:
        """[B1] a stopped run takes no new record, but a batch of exact retries succeeds."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        batch = [world.note(run, f"k{i}") for i in range(2)]
        await world.store.append_run_records(batch)
        await world.finish(run)
        ghost = world.note(world.run("ghost"), "x")
        async with world.unchanged():
            retried = await world.store.append_run_records(batch)
            assert [(r.id, r.inserted) for r in retried] == [("2", False), ("3", False)]
            with pytest.raises(RunNotActiveError):
                await world.store.append_run_records([*batch, world.note(run, "late")])
            with pytest.raises(RunNotFoundError):
                await world.store.append_run_records([ghost])

    async def test_batch_reports_an_ended_session(self, world: World) -> None:
        """[B1] [D2] a running run of an ended session still writes, and hears it ended."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.end_session(sid, ended_at=world.now())
        results = await world.store.append_run_records([world.note(run, "a")])
        assert results[0].session_status is SessionStatus.ENDED

    async def test_race_batches_with_the_same_keys(
        self, world: World, store: AdminStore, other_store: AdminStore
    ) -> None:
        """[B1] [X5] batches claiming the same keys with different content: one wins whole."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        batches = [
            [
                run.record("planner_note", b'{"writer":%d}' % i, event_key=f"k{j}", at=world.now())
                for j in range(3)
            ]
            for i in range(self.race_writers)
        ]
        handles = [store if i % 2 == 0 else other_store for i in range(self.race_writers)]

        calls = [h.append_run_records(b) for h, b in zip(handles, batches, strict=True)]
        results = await race(calls)

        wins, losses = split(results, list)
        assert len(wins) == 1, results
        assert all(type(e) is RecordConflictError for _, e in losses), losses
        winner, appended = wins[0]
        assert [(r.id, r.inserted) for r in appended] == [("2", True), ("3", True), ("4", True)]
        log = await _log(store, run.run.run_id)
        assert log[1:] == [changed(r, id=str(j + 2)) for j, r in enumerate(batches[winner])]

    async def test_race_identical_batches(
        self, world: World, store: AdminStore, other_store: AdminStore
    ) -> None:
        """[B1] [X1] [X5] identical concurrent batches: one inserts, the rest are retries."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        batch = [world.note(run, f"k{j}") for j in range(3)]
        handles = [store if i % 2 == 0 else other_store for i in range(self.race_writers)]

        results = await race([h.append_run_records(batch) for h in handles])

        wins, losses = split(results, list)
        assert losses == []
        inserted = [all(r.inserted for r in rs) for _, rs in wins]
        assert inserted.count(True) == 1
        assert all(any(r.inserted for r in rs) == all(r.inserted for r in rs) for _, rs in wins)
        assert {tuple(r.id for r in rs) for _, rs in wins} == {("2", "3", "4")}
