"""Conformance: histories by reference [V1]-[V4].

A run start may carry one ``transcript_messages_referenced`` record: its history
is another run's transcript through one of its records, stored as a reference,
not a copy. The store checks it in the start's own transaction (the source
exists in the same session, has the status the kind needs, holds the record)
and refuses otherwise, writing nothing. ``load_transcript_chain`` returns the
run and every source its history reaches; replaying it gives exactly what a
literal copy would.
"""

from __future__ import annotations

from typing import Any

import pytest
from msgspec.structs import replace

from agentledger.errors import (
    RunConflictError,
    RunNotActiveError,
    RunNotFoundError,
    RunSessionMismatchError,
    SessionPurgedError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._races import race, split
from agentledger.storage.conformance._world import World
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.storage.types import Record, RootRunStart, StartResult
from agentledger.transcript import Message, TextPart, ThinkingPart, encode_messages

__all__ = ["HistoryReferenceConformance"]


def _text(role: Any, text: str) -> Message:
    return Message(role=role, parts=(TextPart(text=text),))


def _said(world: World, run: RecordBuilder, key: str, *messages: Message) -> Record:
    return run.record(
        payloads.TRANSCRIPT_APPENDED,
        encode_messages(messages),
        event_key=f"{key}:messages",
        at=world.now(),
    )


def _reference(
    world: World,
    run: RecordBuilder,
    source: str,
    through: str,
    kind: str = "next_turn",
    **kw: Any,
) -> Record:
    body = payloads.TranscriptReference(kind=kind, run_id=source, through=through, **kw)  # type: ignore[arg-type]
    return run.record(
        payloads.TRANSCRIPT_REFERENCED,
        body.encode(),
        event_key="transcript:referenced",
        at=world.now(),
    )


async def _turn(
    world: World,
    name: str,
    session: str,
    text: str,
    *,
    after: str = "",
    thinking: bool = False,
    exclude_reasoning: bool = False,
) -> RecordBuilder:
    """A completed turn: (a reference to ``after``), the user's text, the answer."""
    run = world.run(name, session=session)
    records = []
    if after:
        last = (await world.store.load_run(after)).last_record_id
        records.append(_reference(world, run, after, last, exclude_reasoning=exclude_reasoning))
    answer: tuple[Any, ...] = (TextPart(text=f"re: {text}"),)
    if thinking:
        answer = (ThinkingPart(text=f"thinking about {text}", signature="sig"), *answer)
    records.append(_said(world, run, "input", _text("user", text)))
    records.append(_said(world, run, "answer", Message(role="assistant", parts=answer)))
    result = await world.store.start_root_run(replace(run.root_start(), records=tuple(records)))
    assert result.started.inserted, result
    await world.finish(run)
    return run


def _start(run: RecordBuilder, *records: Record) -> RootRunStart:
    return replace(run.root_start(), records=records)


class HistoryReferenceConformance(ConformanceBase):
    """Capability: a run whose history is another run's transcript, by reference."""

    # ---------------------------------------------------------------- success

    async def test_next_turn_chain_replays_as_a_copy_would(self, world: World) -> None:
        """[V1] [V4] three turns by reference replay exactly the literal conversation."""
        sid = await world.session("s")
        one = await _turn(world, "t1", sid, "hello")
        two = await _turn(world, "t2", sid, "again", after=one.run.run_id)
        three = await _turn(world, "t3", sid, "last", after=two.run.run_id)
        expected = [
            _text("user", "hello"),
            _text("assistant", "re: hello"),
            _text("user", "again"),
            _text("assistant", "re: again"),
            _text("user", "last"),
            _text("assistant", "re: last"),
        ]
        assert await build_messages_from_run_log(world.store, three.run.run_id) == expected
        chain = await world.store.load_transcript_chain(three.run.run_id)
        assert [s.run_id for s in chain] == [r.run.run_id for r in (three, two, one)]
        for segment in chain:
            meta = await world.store.load_run(segment.run_id)
            assert segment.through == meta.last_record_id
            assert all(int(r.id) <= int(segment.through) for r in segment.records)
        assert [r.type for r in chain[0].records] == [
            payloads.TRANSCRIPT_REFERENCED,
            payloads.TRANSCRIPT_APPENDED,
            payloads.TRANSCRIPT_APPENDED,
        ]

    async def test_last_record_id_follows_the_log(self, world: World) -> None:
        """``RunMeta.last_record_id`` is the newest record of the run's log."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        assert (await world.store.load_run(run.run.run_id)).last_record_id == "1"
        await world.store.append_run_record(world.note(run, "n"))
        assert (await world.store.load_run(run.run.run_id)).last_record_id == "2"
        await world.finish(run)
        assert (await world.store.load_run(run.run.run_id)).last_record_id == "3"

    async def test_a_run_without_reference_is_its_own_chain(self, world: World) -> None:
        """[V4] a run with literal history (or none) is one segment through its end."""
        sid = await world.session("s")
        run = await _turn(world, "t1", sid, "hello")
        (segment,) = await world.store.load_transcript_chain(run.run.run_id)
        assert segment.run_id == run.run.run_id
        assert segment.through == (await world.store.load_run(run.run.run_id)).last_record_id
        one_shot = await world.one_shot("o")
        (alone,) = await world.store.load_transcript_chain(one_shot.run.run_id)
        assert (alone.run_id, alone.through, alone.records) == (one_shot.run.run_id, "1", ())

    async def test_fork_references_a_record_in_the_middle(self, world: World) -> None:
        """[V2] a fork may cut its source anywhere, even a running one; the cut holds."""
        sid = await world.session("s")
        source = world.run("src", session=sid)
        said = [_said(world, source, f"m{i}", _text("user" if i % 2 == 0 else "assistant", str(i)))
                for i in range(4)]  # fmt: skip
        await world.store.start_root_run(_start(source, *said))  # ids 2..5, still running
        fork = world.run("fork", session=sid)
        cmd = _start(fork, _reference(world, fork, source.run.run_id, "3", kind="fork"),
                     _said(world, fork, "input", _text("user", "branch")))  # fmt: skip
        await world.store.start_root_run(cmd)
        replayed = await build_messages_from_run_log(world.store, fork.run.run_id)
        assert replayed == [_text("user", "0"), _text("assistant", "1"), _text("user", "branch")]
        chain = await world.store.load_transcript_chain(fork.run.run_id)
        assert chain[1].through == "3"
        assert [r.id for r in chain[1].records] == ["2", "3"]  # the cut, not the whole log

    async def test_continuation_references_its_suspended_predecessor(self, world: World) -> None:
        """[V2] a continuation's reference names its predecessor through its last record."""
        sid = await world.session("s")
        pred = world.run("pred", session=sid)
        await world.store.start_root_run(_start(pred, _said(world, pred, "in", _text("user", "q"))))
        await world.suspend(pred)
        last = (await world.store.load_run(pred.run.run_id)).last_record_id
        succ = world.run("succ", session=sid, predecessor=pred.run.run_id)
        ref = _reference(world, succ, pred.run.run_id, last, kind="continuation")
        await world.store.start_root_run(_start(succ, ref))
        assert await build_messages_from_run_log(world.store, succ.run.run_id) == [
            _text("user", "q")
        ]

    async def test_exclude_reasoning_composes_down_the_chain(self, world: World) -> None:
        """[V4] reasoning a reference excluded stays excluded for every later turn."""
        sid = await world.session("s")
        one = await _turn(world, "t1", sid, "a", thinking=True)
        two = await _turn(world, "t2", sid, "b", after=one.run.run_id, thinking=True,
                          exclude_reasoning=True)  # fmt: skip
        three = await _turn(world, "t3", sid, "c", after=two.run.run_id)
        replayed = await build_messages_from_run_log(world.store, three.run.run_id)
        kinds = [[type(p).__name__ for p in m.parts] for m in replayed]
        assert kinds == [
            ["TextPart"],
            ["TextPart"],  # turn 1's thinking: excluded by turn 2, for good
            ["TextPart"],
            ["ThinkingPart", "TextPart"],  # turn 2's own thinking: turn 3 keeps it
            ["TextPart"],
            ["TextPart"],
        ]

    async def test_exact_retry_returns_the_original_ids(self, world: World) -> None:
        """[X1] a retried start with the same reference is answered with the first ids."""
        sid = await world.session("s")
        one = await _turn(world, "t1", sid, "a")
        two = world.run("t2", session=sid)
        last = (await world.store.load_run(one.run.run_id)).last_record_id
        cmd = _start(two, _reference(world, two, one.run.run_id, last))
        first = await world.store.start_root_run(cmd)
        again = await world.store.start_root_run(cmd)
        assert again.records[0].id == first.records[0].id == "2"
        assert not again.records[0].inserted

    async def test_retry_with_another_reference_is_a_conflict(self, world: World) -> None:
        """[X2] [X3] the same start naming another source is a conflict, never an overwrite."""
        sid = await world.session("s")
        one = await _turn(world, "t1", sid, "a")
        other = await _turn(world, "t1b", sid, "b")
        two = world.run("t2", session=sid)
        last = (await world.store.load_run(one.run.run_id)).last_record_id
        await world.store.start_root_run(_start(two, _reference(world, two, one.run.run_id, last)))
        other_last = (await world.store.load_run(other.run.run_id)).last_record_id
        changed = _start(two, _reference(world, two, other.run.run_id, other_last))
        async with world.unchanged():
            with pytest.raises(RunConflictError):
                await world.store.start_root_run(changed)

    async def test_racing_starts_with_different_references(self, world: World) -> None:
        """[X5] two writers start one run from two sources: exactly one wins."""
        sid = await world.session("s")
        sources = [await _turn(world, f"src{i}", sid, str(i)) for i in range(2)]
        run = world.run("t", session=sid)
        cmds = []
        for source in sources:
            last = (await world.store.load_run(source.run.run_id)).last_record_id
            cmds.append(_start(run, _reference(world, run, source.run.run_id, last)))
        results = await race([world.store.start_root_run(c) for c in cmds])
        wins, losses = split(results, StartResult)
        assert len(wins) == 1
        assert len(losses) == 1
        assert isinstance(losses[0][1], RunConflictError), losses
        chain = await world.store.load_transcript_chain(run.run.run_id)
        assert chain[1].run_id == sources[wins[0][0]].run.run_id

    async def test_purged_session_takes_its_chain(self, world: World) -> None:
        """[D7] purge removes every run of the chain: a read says the session was purged."""
        sid = await world.session("s")
        one = await _turn(world, "t1", sid, "a")
        two = await _turn(world, "t2", sid, "b", after=one.run.run_id)
        await world.store.end_session(sid, ended_at=world.now())
        await world.store.purge_session(sid)
        with pytest.raises(SessionPurgedError):
            await world.store.load_transcript_chain(two.run.run_id)

    async def test_chain_of_a_missing_run(self, world: World) -> None:
        """A chain read of a run the store never held is RunNotFoundError."""
        with pytest.raises(RunNotFoundError):
            await world.store.load_transcript_chain(world.id("nope"))

    # ---------------------------------------------------------------- refusals

    async def _refused(self, world: World, cmd: RootRunStart, error: type[Exception]) -> None:
        async with world.unchanged():
            with pytest.raises(error):
                await world.store.start_root_run(cmd)
        with pytest.raises(RunNotFoundError):
            await world.store.load_run(cmd.run.run_id)

    async def test_reference_to_a_missing_run_is_refused(self, world: World) -> None:
        """[V3] the source must exist."""
        sid = await world.session("s")
        run = world.run("t", session=sid)
        cmd = _start(run, _reference(world, run, world.id("ghost"), "1"))
        await self._refused(world, cmd, RunNotFoundError)

    async def test_reference_across_sessions_is_refused(self, world: World) -> None:
        """[V2] [V3] no reference crosses a session."""
        one = await _turn(world, "t1", await world.session("a"), "a")
        run = world.run("t", session=await world.session("b"))
        last = (await world.store.load_run(one.run.run_id)).last_record_id
        cmd = _start(run, _reference(world, run, one.run.run_id, last))
        await self._refused(world, cmd, RunSessionMismatchError)

    async def test_next_turn_needs_a_completed_source(self, world: World) -> None:
        """[V1] [V3] a next turn follows a completed run, not a running one."""
        sid = await world.session("s")
        source = await world.root("src", session=sid)
        run = world.run("t", session=sid)
        cmd = _start(run, _reference(world, run, source.run.run_id, "1"))
        await self._refused(world, cmd, RunNotActiveError)

    async def test_next_turn_must_end_at_the_source_end(self, world: World) -> None:
        """[V1] [V3] a next turn takes the whole transcript: through its last record."""
        sid = await world.session("s")
        one = await _turn(world, "t1", sid, "a")
        run = world.run("t", session=sid)
        cmd = _start(run, _reference(world, run, one.run.run_id, "2"))
        await self._refused(world, cmd, ValidationError)

    async def test_through_past_the_source_log_is_refused(self, world: World) -> None:
        """[V3] the record a reference ends at must be a record of its source."""
        sid = await world.session("s")
        one = await _turn(world, "t1", sid, "a")
        run = world.run("t", session=sid)
        cmd = _start(run, _reference(world, run, one.run.run_id, "99", kind="fork"))
        await self._refused(world, cmd, ValidationError)

    async def test_continuation_reference_must_name_the_predecessor(self, world: World) -> None:
        """[V2] [V3] a continuation's reference names its own suspended predecessor."""
        sid = await world.session("s")
        pred = await world.root("pred", session=sid)
        await world.suspend(pred)
        other = await world.root("other", session=sid)
        await world.suspend(other, checkpoint_id="cp2")
        succ = world.run("succ", session=sid, predecessor=pred.run.run_id)
        last = (await world.store.load_run(other.run.run_id)).last_record_id
        cmd = _start(succ, _reference(world, succ, other.run.run_id, last, kind="continuation"))
        await self._refused(world, cmd, ValidationError)

    async def test_malformed_reference_is_refused(self, world: World) -> None:
        """[J1] a reference decodes as exactly one typed object."""
        sid = await world.session("s")
        run = world.run("t", session=sid)
        bodies = (
            b'{"kind":"next_turn","run_id":"x"}',
            b'{"kind":"later","run_id":"x","through":"1"}',
            b'{"kind":"fork","run_id":"x","through":"01"}',
        )
        for body in bodies:
            bad = run.record(
                payloads.TRANSCRIPT_REFERENCED, body, event_key="transcript:referenced",
                at=world.now(),
            )  # fmt: skip
            await self._refused(world, _start(run, bad), ValidationError)

    async def test_two_references_are_refused(self, world: World) -> None:
        """[V3] a run has at most one history reference."""
        sid = await world.session("s")
        one = await _turn(world, "t1", sid, "a")
        run = world.run("t", session=sid)
        last = (await world.store.load_run(one.run.run_id)).last_record_id
        first = _reference(world, run, one.run.run_id, last)
        second = replace(first, event_key="transcript:referenced:again")
        await self._refused(world, _start(run, first, second), ValidationError)

    async def test_reference_outside_a_start_is_refused(self, world: World) -> None:
        """[V3] only a start may carry a reference: an append would skip its checks."""
        sid = await world.session("s")
        one = await _turn(world, "t1", sid, "a")
        run = await world.root("t", session=sid)
        last = (await world.store.load_run(one.run.run_id)).last_record_id
        ref = _reference(world, run, one.run.run_id, last)
        async with world.unchanged():
            with pytest.raises(ValidationError):
                await world.store.append_run_record(ref)
            with pytest.raises(ValidationError):
                await world.store.append_run_records([ref])

    async def test_one_shot_run_cannot_reference(self, world: World) -> None:
        """[V3] a run without a session has nothing to reference."""
        sid = await world.session("s")
        one = await _turn(world, "t1", sid, "a")
        run = world.run("o")
        last = (await world.store.load_run(one.run.run_id)).last_record_id
        cmd = replace(run.one_shot_start(), records=(_reference(world, run, one.run.run_id, last),))
        async with world.unchanged():
            with pytest.raises(ValidationError):
                await world.store.start_one_shot_run(cmd)
