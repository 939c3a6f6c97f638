"""Conformance: purging sessions, the tombstone they leave and its receipt [D3] [D5] [D7].

Purge needs an ended session with no running run. It deletes the session, its
runs, checkpoints and records, and nothing else; afterwards every call that
names the session or one of its runs is ``SessionPurgedError``, so a late
retry cannot bring the data back. Purging again is a no-op that returns the
same receipt: counts, bytes and digest of what the first purge deleted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import msgspec
import pytest

from agentledger.errors import (
    SessionActiveError,
    SessionConflictError,
    SessionHasActiveRunsError,
    SessionNotFoundError,
    SessionPurgedError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._world import AdminStore, World, all_sessions, dump_store
from agentledger.storage.session_image import image_byte_total, read_session_image, session_digest
from agentledger.storage.types import (
    Checkpoint,
    ChildRunStart,
    Record,
    RootRunStart,
    RunMeta,
    RunStart,
    RunStatus,
    SessionStatus,
    StartOutcome,
)

__all__ = ["PurgeConformance"]


@dataclass
class _Purged:
    """A session filled with runs in every terminal status and ended; the commands used."""

    session_id: str
    root: RecordBuilder  # suspended, with a checkpoint
    child: RecordBuilder  # completed child of root
    failed: RecordBuilder  # failed root run
    stopped: RecordBuilder  # started after the end: [C2]
    root_start: RootRunStart
    child_start: ChildRunStart

    @property
    def runs(self) -> list[RecordBuilder]:
        return [self.root, self.child, self.failed, self.stopped]


async def _fill_and_end(world: World, name: str = "doomed") -> _Purged:
    """A session holding runs in every terminal status, then ended (not yet purged)."""
    sid = await world.session(name)
    root = world.run(f"{name}-root", session=sid)
    root_start = root.root_start()
    await world.store.start_root_run(root_start)
    child = world.run(f"{name}-child", session=sid, parent=root.run.run_id, agent="helper")
    child_start = child.child_start(
        parent_agent_id="agent", tool_name="agent_tool", tool_call_id="call-1"
    )
    await world.store.start_child_run(child_start)
    await world.store.append_run_record(world.note(child, "work"))
    await world.finish(child)
    await world.suspend(root)
    failed = await world.root(f"{name}-failed", session=sid)
    await world.finish(failed, RunStatus.FAILED)
    await world.store.end_session(sid, ended_at=world.now())
    stopped = world.run(f"{name}-stopped", session=sid)
    result = await world.store.start_root_run(stopped.root_start())
    assert result.outcome is StartOutcome.STOP
    return _Purged(sid, root, child, failed, stopped, root_start, child_start)


async def _purged(world: World, name: str = "doomed") -> _Purged:
    doomed = await _fill_and_end(world, name)
    await world.store.purge_session(doomed.session_id)
    return doomed


def _reuse(run_id: str, at: datetime, *, session: str = "", parent: str = "") -> RecordBuilder:
    """A new run that reuses ``run_id`` (a purged run's id) elsewhere."""
    return RecordBuilder(
        RunStart(
            run_id=run_id, agent_id="agent", session_id=session, parent_run_id=parent, started_at=at
        )
    )


class PurgeConformance(ConformanceBase):
    """Capability: purge, its preconditions, and the tombstone it leaves."""

    # --------------------------------------------------------- preconditions

    async def test_purge_needs_an_ended_session(self, world: World) -> None:
        """[D3] purging an active session is SessionActiveError; nothing is deleted."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.finish(run)
        async with world.unchanged():
            with pytest.raises(SessionActiveError) as e:
                await world.store.purge_session(sid)
        assert e.value.session_id == sid

    async def test_purge_refuses_running_runs(self, world: World) -> None:
        """[D3] an ended session with running runs is SessionHasActiveRunsError, naming them."""
        sid = await world.session("s")
        first = await world.root("first", session=sid)
        done = await world.root("done", session=sid)
        await world.finish(done)
        child, _ = await world.child("child", parent=first)
        await world.store.end_session(sid, ended_at=world.now())
        async with world.unchanged():
            with pytest.raises(SessionHasActiveRunsError) as e:
                await world.store.purge_session(sid)
        assert e.value.session_id == sid
        assert sorted(e.value.run_ids) == sorted([first.run.run_id, child.run.run_id])

    async def test_purge_succeeds_once_the_runs_stopped(self, world: World) -> None:
        """[D3] the refusal lasts only while a run is running."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.end_session(sid, ended_at=world.now())
        async with world.unchanged():
            with pytest.raises(SessionHasActiveRunsError):
                await world.store.purge_session(sid)
        await world.finish(run, RunStatus.CANCELED)
        await world.store.purge_session(sid)
        async with world.unchanged():
            with pytest.raises(SessionPurgedError):
                await world.store.load_session(sid)

    async def test_purge_allows_suspended_runs(self, world: World) -> None:
        """[D3] a suspended run is terminal: its session can be purged, checkpoint and all."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.suspend(run)
        await world.store.end_session(sid, ended_at=world.now())
        await world.store.purge_session(sid)
        async with world.unchanged():
            with pytest.raises(SessionPurgedError) as e:
                await world.store.load_run_suspension(run.run.run_id)
        assert (e.value.session_id, e.value.run_id) == (sid, run.run.run_id)

    async def test_purge_of_an_unknown_session(self, world: World) -> None:
        """[D3] purging a session that never existed is SessionNotFoundError, no tombstone."""
        sid = world.track_session("never")
        async with world.unchanged():
            with pytest.raises(SessionNotFoundError) as e:
                await world.store.purge_session(sid)
        assert e.value.session_id == sid
        created = await world.store.create_session(sid, created_at=world.now())
        assert created.status is SessionStatus.ACTIVE

    async def test_purge_validates_the_id(self, world: World) -> None:
        """[D3] an empty session id is a ValidationError."""
        async with world.unchanged():
            with pytest.raises(ValidationError) as e:
                await world.store.purge_session("")
        assert e.value.field == "session_id"

    # ----------------------------------------------------------------- effect

    async def test_purge_deletes_the_session_and_everything_in_it(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[D3] after purge no read finds the session, its runs, records or checkpoints."""
        doomed = await _fill_and_end(world)
        sid = doomed.session_id
        await other_store.purge_session(sid)
        for store in (world.store, other_store):
            assert sid not in {s.id for s in await all_sessions(store)}
            session_reads: list[Callable[[AdminStore], Awaitable[object]]] = [
                lambda st: st.load_session(sid),
                lambda st: st.load_session_status(sid),
                lambda st: st.list_runs_by_session(sid),
                lambda st: st.list_runs_by_session(sid, statuses=[RunStatus.COMPLETED]),
                lambda st: st.list_session_run_records(sid),
            ]
            for read in session_reads:
                async with world.unchanged():
                    with pytest.raises(SessionPurgedError) as e:
                        await read(store)
                assert (e.value.session_id, e.value.run_id) == (sid, "")
            for run in doomed.runs:
                rid = run.run.run_id
                run_reads: list[Callable[[str], Awaitable[object]]] = [
                    store.load_run,
                    store.list_run_records,
                    store.load_run_suspension,
                ]
                for run_read in run_reads:
                    async with world.unchanged():
                        with pytest.raises(SessionPurgedError) as e:
                            await run_read(rid)
                    assert (e.value.session_id, e.value.run_id) == (sid, rid)

    async def test_purge_invalidates_page_cursors(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[D3] [L9] a cursor handed out before the purge reaches nothing afterwards."""
        doomed = await _fill_and_end(world)
        sid = doomed.session_id
        rid = doomed.child.run.run_id
        session_page = await world.store.list_session_run_records(sid, limit=2)
        run_page = await world.store.list_run_records(rid, limit=1)
        assert session_page.next_cursor
        assert run_page.next_cursor
        await other_store.purge_session(sid)
        async with world.unchanged():
            with pytest.raises(SessionPurgedError) as e:
                await world.store.list_session_run_records(sid, cursor=session_page.next_cursor)
        assert (e.value.session_id, e.value.run_id) == (sid, "")
        async with world.unchanged():
            with pytest.raises(SessionPurgedError) as e:
                await world.store.list_run_records(rid, cursor=run_page.next_cursor)
        assert (e.value.session_id, e.value.run_id) == (sid, rid)

    async def test_purge_once_a_running_run_suspends(self, world: World) -> None:
        """[D3] runs going at the end may still finish by suspending; then purge proceeds."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.end_session(sid, ended_at=world.now())
        async with world.unchanged():
            with pytest.raises(SessionHasActiveRunsError) as e:
                await world.store.purge_session(sid)
        assert e.value.run_ids == (run.run.run_id,)
        await world.suspend(run)
        await world.store.purge_session(sid)
        async with world.unchanged():
            with pytest.raises(SessionPurgedError) as p:
                await world.store.load_run(run.run.run_id)
        assert (p.value.session_id, p.value.run_id) == (sid, run.run.run_id)

    async def test_purge_of_an_empty_session(self, world: World) -> None:
        """[D3] an ended session with no runs purges to a tombstone too."""
        sid = await world.session("s")
        await world.store.end_session(sid, ended_at=world.now())
        await world.store.purge_session(sid)
        async with world.unchanged():
            with pytest.raises(SessionPurgedError) as e:
                await world.store.load_session_status(sid)
        assert e.value.session_id == sid

    async def test_purge_leaves_everything_else_alone(self, world: World) -> None:
        """[D3] other sessions (active or ended) and sessionless runs are untouched."""
        live = await world.session("live")
        busy = await world.root("busy", session=live)
        helper, _ = await world.child("helper", parent=busy)
        await world.store.append_run_record(world.note(busy, "n"))
        kept = await world.session("kept")
        old = await world.root("old", session=kept)
        await world.suspend(old)
        await world.store.end_session(kept, ended_at=world.now())
        loose = await world.one_shot("loose")
        loose_child = world.run("loose-child", parent=loose.run.run_id)
        await world.store.start_one_shot_child_run(
            loose_child.one_shot_child_start(
                parent_agent_id="agent", tool_name="agent_tool", tool_call_id="c"
            )
        )
        others = [b.run.run_id for b in (busy, helper, old, loose, loose_child)]
        doomed = await _fill_and_end(world)
        before = await dump_store(world.store, [live, kept], others)
        await world.store.purge_session(doomed.session_id)
        assert await dump_store(world.store, [live, kept], others) == before
        assert [m.run_id for m in await world.store.list_runs_by_session(live)] == others[:2]

    async def test_purge_is_idempotent(self, world: World, other_store: AdminStore) -> None:
        """[D3] [D7] purging a purged session changes nothing and returns the same receipt."""
        doomed = await _fill_and_end(world)
        first = await world.store.purge_session(doomed.session_id)
        async with world.unchanged():
            assert await other_store.purge_session(doomed.session_id) == first
            assert await world.store.purge_session(doomed.session_id) == first

    # --------------------------------------------------------------- receipts

    async def test_purge_receipt_is_what_was_deleted(self, world: World) -> None:
        """[D7] the receipt's counts, bytes and digest are those of the session just before."""
        doomed = await _fill_and_end(world)
        image = await read_session_image(world.store, doomed.session_id)
        receipt = await world.store.purge_session(doomed.session_id)
        assert receipt.session_id == doomed.session_id
        assert (receipt.runs, receipt.records, receipt.checkpoints) == (
            len(image.runs),
            len(image.records),
            len(image.checkpoints),
        )
        assert (receipt.runs, receipt.checkpoints) == (4, 1)
        assert receipt.bytes == image_byte_total(image) > 0
        assert receipt.digest == session_digest(image)
        assert receipt.known
        assert receipt.purged_at is not None
        assert receipt.purged_at.utcoffset() == timedelta(0)
        assert receipt.purged_at.microsecond % 1000 == 0

    async def test_purge_conditional_on_a_digest(self, world: World) -> None:
        """[D7] [A1] with ``expected_digest``, a session that changed since (a run started after
        the end, [C2]) is refused with SessionConflictError and nothing is deleted."""
        doomed = await _fill_and_end(world)
        sid = doomed.session_id
        archived = session_digest(await read_session_image(world.store, sid))
        late = world.run("late", session=sid)
        assert (await world.store.start_root_run(late.root_start())).run_status is (
            RunStatus.CANCELED
        )
        now = session_digest(await read_session_image(world.store, sid))
        async with world.unchanged():
            with pytest.raises(SessionConflictError) as refused:
                await world.store.purge_session(sid, archived)
        assert (refused.value.session_id, refused.value.field) == (sid, "digest")
        assert (refused.value.expected, refused.value.got) == (now, archived)
        async with world.unchanged():
            with pytest.raises(ValidationError):
                await world.store.purge_session(sid, 7)  # type: ignore[arg-type]
        receipt = await world.store.purge_session(sid, now)
        assert receipt.digest == now
        assert await world.store.purge_session(sid, archived) == receipt  # kept, as any repeat

    async def test_purge_receipt_of_an_empty_session(self, world: World) -> None:
        """[D7] an ended session with no runs: zero counts, the digest of its bare image."""
        sid = await world.session("empty", labels={"tenant": "acme"})
        await world.store.end_session(sid, ended_at=world.now())
        image = await read_session_image(world.store, sid)
        receipt = await world.store.purge_session(sid)
        assert (receipt.runs, receipt.records, receipt.checkpoints, receipt.bytes) == (0, 0, 0, 0)
        assert receipt.digest == session_digest(image)

    async def test_purge_receipts_differ_between_sessions(self, world: World) -> None:
        """[D7] the digest covers the session itself: two equal-shaped sessions differ."""
        one = await _fill_and_end(world, "one")
        two = await _fill_and_end(world, "two")
        first = await world.store.purge_session(one.session_id)
        second = await world.store.purge_session(two.session_id)
        assert first.digest != second.digest
        assert (first.runs, first.records) == (second.runs, second.records)

    async def test_purge_refusals_return_no_receipt(self, world: World) -> None:
        """[D7] a refused purge keeps its error (unknown, active): no tombstone, no receipt."""
        unknown = world.track_session("unknown")
        active = await world.session("active")
        async with world.unchanged():
            with pytest.raises(SessionNotFoundError):
                await world.store.purge_session(unknown)
            with pytest.raises(SessionActiveError):
                await world.store.purge_session(active)

    async def test_purge_race_returns_one_receipt(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[D7] two purges racing: one deletes, both return that purge's receipt."""
        doomed = await _fill_and_end(world)
        image = await read_session_image(world.store, doomed.session_id)
        receipts = await asyncio.gather(
            world.store.purge_session(doomed.session_id),
            other_store.purge_session(doomed.session_id),
        )
        assert receipts[0] == receipts[1]
        assert receipts[0].digest == session_digest(image)
        assert await world.store.purge_session(doomed.session_id) == receipts[0]

    # -------------------------------------------------------------- tombstone

    async def test_purge_tombstone_blocks_session_admin(self, world: World) -> None:
        """[D3] the purged id can never be created or ended again."""
        doomed = await _purged(world)
        sid = doomed.session_id
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: world.store.create_session(sid, created_at=world.now()),
            lambda: world.store.end_session(sid, ended_at=world.now()),
        ]
        for call in calls:
            async with world.unchanged():
                with pytest.raises(SessionPurgedError) as e:
                    await call()
            assert (e.value.session_id, e.value.run_id) == (sid, "")

    async def test_purge_tombstone_blocks_starts_in_the_session(self, world: World) -> None:
        """[D3] no start can name the purged session, new run or late retry alike."""
        doomed = await _purged(world)
        sid = doomed.session_id
        fresh = world.run("fresh", session=sid)
        fresh_child = world.run("fresh-child", session=sid, parent=doomed.root.run.run_id)
        cases: list[tuple[Callable[[], Awaitable[object]], str]] = [
            (lambda: world.store.start_root_run(fresh.root_start()), ""),
            (lambda: world.store.start_root_run(doomed.root_start), doomed.root.run.run_id),
            (
                lambda: world.store.start_child_run(
                    fresh_child.child_start(
                        parent_agent_id="agent", tool_name="agent_tool", tool_call_id="late"
                    )
                ),
                "",  # names the purged session (and, too, a purged parent)
            ),
            (lambda: world.store.start_child_run(doomed.child_start), doomed.child.run.run_id),
        ]
        for call, run_id in cases:
            async with world.unchanged():
                with pytest.raises(SessionPurgedError) as e:
                    await call()
            assert e.value.session_id == sid
            if run_id:
                assert e.value.run_id == run_id

    async def test_purge_tombstone_blocks_purged_run_ids_anywhere(self, world: World) -> None:
        """[D3] a purged run's id is refused in another session and without a session."""
        doomed = await _purged(world)
        sid = doomed.session_id
        other = await world.session("other")
        host = await world.root("host", session=other)
        loose_parent = await world.one_shot("loose-parent")
        rid = doomed.failed.run.run_id
        pid = doomed.root.run.run_id
        reused = _reuse(rid, world.now(), session=other)
        reused_loose = _reuse(rid, world.now())
        reused_child = _reuse(rid, world.now(), session=other, parent=host.run.run_id)
        child_of_purged = world.run("orphan", session=other, parent=pid)
        loose_of_purged = world.run("loose-orphan", parent=pid)
        successor = world.run("successor", session=other, predecessor=pid)
        loose_reuse_child = _reuse(rid, world.now(), parent=loose_parent.run.run_id)
        cases: list[tuple[Callable[[], Awaitable[object]], str]] = [
            (lambda: world.store.start_root_run(reused.root_start()), rid),
            (lambda: world.store.start_one_shot_run(reused_loose.one_shot_start()), rid),
            (
                lambda: world.store.start_child_run(
                    reused_child.child_start(
                        parent_agent_id="agent", tool_name="agent_tool", tool_call_id="c"
                    )
                ),
                rid,
            ),
            (
                lambda: world.store.start_one_shot_child_run(
                    loose_reuse_child.one_shot_child_start(
                        parent_agent_id="agent", tool_name="agent_tool", tool_call_id="c"
                    )
                ),
                rid,
            ),
            (
                lambda: world.store.start_child_run(
                    child_of_purged.child_start(
                        parent_agent_id="agent", tool_name="agent_tool", tool_call_id="c"
                    )
                ),
                pid,
            ),
            (
                lambda: world.store.start_one_shot_child_run(
                    loose_of_purged.one_shot_child_start(
                        parent_agent_id="agent", tool_name="agent_tool", tool_call_id="c"
                    )
                ),
                pid,
            ),
            (lambda: world.store.start_root_run(successor.root_start()), pid),
        ]
        for call, run_id in cases:
            async with world.unchanged():
                with pytest.raises(SessionPurgedError) as e:
                    await call()
            assert (e.value.session_id, e.value.run_id) == (sid, run_id)
        assert [m.run_id for m in await world.store.list_runs_by_session(other)] == [
            host.run.run_id
        ]

    async def test_purge_tombstone_blocks_writes_to_purged_runs(self, world: World) -> None:
        """[D3] records, cancellations, suspensions, terminals and repairs are all refused."""
        doomed = await _purged(world)
        sid = doomed.session_id
        run = doomed.failed
        rid = run.run.run_id
        checkpoint = Checkpoint(id="late", data=b"late")
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: world.store.append_run_record(world.note(run, "late")),
            lambda: world.store.record_run_cancellation(run.cancellation("late", at=world.now())),
            lambda: world.store.record_run_suspension(run.suspension(checkpoint, at=world.now())),
            lambda: world.store.record_run_terminal(run.terminal(RunStatus.FAILED, at=world.now())),
            lambda: world.store.repair_run_terminal(run.terminal(RunStatus.FAILED, at=world.now())),
            lambda: world.store.repair_run_suspension(run.suspension(checkpoint, at=world.now())),
        ]
        for call in calls:
            async with world.unchanged():
                with pytest.raises(SessionPurgedError) as e:
                    await call()
            assert (e.value.session_id, e.value.run_id) == (sid, rid)

    async def test_purge_tombstone_blocks_exact_retries_of_old_writes(self, world: World) -> None:
        """[D3] even an exact retry of a write the store once accepted cannot resurrect data."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        note = world.note(run, "n")
        await world.store.append_run_record(note)
        terminal = run.terminal(RunStatus.COMPLETED, at=world.now())
        await world.store.record_run_terminal(terminal)
        await world.store.end_session(sid, ended_at=world.now())
        await world.store.purge_session(sid)
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: world.store.start_root_run(run.root_start()),
            lambda: world.store.append_run_record(note),
            lambda: world.store.record_run_terminal(terminal),
        ]
        for call in calls:
            async with world.unchanged():
                with pytest.raises(SessionPurgedError) as e:
                    await call()
            assert (e.value.session_id, e.value.run_id) == (sid, run.run.run_id)

    # ---------------------------------------------------------------- prompts

    async def test_purge_prompt_versions_come_from_records_only(self, world: World) -> None:
        """[D5] [D3] prompt versions are read from ``prompt_rendered`` records and child links.

        The store keeps no second list: nothing in RunMeta names a prompt, and
        once the session is purged no trace of which prompts were used remains.
        """
        assert not [f for f in RunMeta.__struct_fields__ if "prompt" in f]
        sid = await world.session("s")
        root = await world.root("root", session=sid)

        def rendered(run: RecordBuilder, prompt: str, version: str) -> Record:
            body = msgspec.json.encode({"prompt_id": prompt, "version": version})
            return run.record(
                payloads.PROMPT_RENDERED, body, event_key=f"prompt:{prompt}", at=world.now()
            )

        await world.store.append_run_record(rendered(root, "system", "v3"))
        child, _ = await world.child("child", parent=root, agent="helper")
        await world.store.append_run_record(rendered(child, "helper", "v7"))
        await world.store.append_run_record(world.note(root, "not-a-prompt"))

        async def versions(store: AdminStore, run_id: str) -> list[tuple[str, str]]:
            found: list[tuple[str, str]] = []
            for record in (await store.list_run_records(run_id)).records:
                if record.type == payloads.PROMPT_RENDERED:
                    body = msgspec.json.decode(record.payload)
                    found.append((body["prompt_id"], body["version"]))
                elif record.type == payloads.CHILD_RUN_LINKED:
                    link = payloads.ChildRunLinked.decode(record.payload)
                    found.extend(await versions(store, link.child_run_id))
            return found

        assert await versions(world.store, root.run.run_id) == [("system", "v3"), ("helper", "v7")]
        assert await versions(world.store, child.run.run_id) == [("helper", "v7")]
        await world.finish(child)
        await world.finish(root)
        await world.store.end_session(sid, ended_at=world.now())
        await world.store.purge_session(sid)
        async with world.unchanged():
            with pytest.raises(SessionPurgedError):
                await versions(world.store, root.run.run_id)
