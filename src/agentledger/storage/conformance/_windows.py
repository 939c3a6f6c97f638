"""Conformance: windows, where a run's model input begins [V5].

A ``transcript_window_applied`` record is an ordinary record whose payload
names a message of the run's transcript chain; from it on, the model input
starts there (a compaction's summary put first). ``load_transcript_chain(...,
windowed=True)`` ends the chain at the start of the newest window within the
cuts, so a long conversation's replay reads only what the model is sent; the
plain call still returns the whole chain. A misfit window is refused on write,
and one that names a message outside its chain is reported as damage.
"""

from __future__ import annotations

from typing import Any

import pytest
from msgspec.structs import replace

from agentledger.errors import CorruptRecordError, ValidationError
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._world import World
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.storage.types import Record
from agentledger.transcript import Message, TextPart, encode_messages

__all__ = ["TranscriptWindowConformance"]


def _text(role: Any, text: str) -> Message:
    role = {"u": "user", "a": "assistant"}.get(role, role)
    return Message(role=role, parts=(TextPart(text=text),))


def _said(world: World, run: RecordBuilder, key: str, *messages: Message) -> Record:
    return run.record(
        payloads.TRANSCRIPT_APPENDED,
        encode_messages(messages),
        event_key=f"{key}:messages",
        at=world.now(),
    )


def _window(
    world: World, run: RecordBuilder, start_run: str, record: str, message: int = 0, **kw: Any
) -> Record:
    body = payloads.TranscriptWindow(
        policy="last_turns:1",
        start=payloads.TranscriptPosition(run_id=start_run, record=record, message=message),
        **kw,
    )
    return run.record(
        payloads.TRANSCRIPT_WINDOW, body.encode(), event_key="turn:1:window", at=world.now()
    )


async def _turn(
    world: World, name: str, session: str, text: str, *, after: str = "", window: Any = None
) -> RecordBuilder:
    """A completed turn: (a reference to ``after``), the user's text, (a window), the answer.

    ``window`` is ``(run, record, message)`` or a callable of the new run giving that.
    """
    run = world.run(name, session=session)
    records = []
    if after:
        last = (await world.store.load_run(after)).last_record_id
        body = payloads.TranscriptReference(kind="next_turn", run_id=after, through=last)
        records.append(
            run.record(
                payloads.TRANSCRIPT_REFERENCED,
                body.encode(),
                event_key="transcript:referenced",
                at=world.now(),
            )
        )
    records.append(_said(world, run, "input", _text("user", text)))
    result = await world.store.start_root_run(replace(run.root_start(), records=tuple(records)))
    assert result.started.inserted, result
    tail = []
    if window is not None:
        start = window(run) if callable(window) else window
        tail.append(_window(world, run, *start))
    tail.append(_said(world, run, "answer", _text("assistant", f"re: {text}")))
    await world.store.append_run_records(tail)
    await world.finish(run)
    return run


async def _position(world: World, run_id: str) -> tuple[str, str, int]:
    """The position of a turn's user message (its first ``input`` record)."""
    page = await world.store.list_run_records(run_id, limit=100)
    for record in page.records:
        if record.event_key == "input:messages":
            return (run_id, record.id, 0)
    raise AssertionError(f"run {run_id} has no input record")


class TranscriptWindowConformance(ConformanceBase):
    """Capability: windows end a windowed chain where the model input begins."""

    async def test_windowed_chain_ends_at_the_window_start(self, world: World) -> None:
        """[V5] four turns; the fourth's window starts at the third's question: the
        windowed chain holds two runs, the second from that record on."""
        sid = await world.session("s")
        one = await _turn(world, "w1", sid, "one")
        two = await _turn(world, "w2", sid, "two", after=one.run.run_id)
        three = await _turn(world, "w3", sid, "three", after=two.run.run_id)
        start = await _position(world, three.run.run_id)
        four = await _turn(world, "w4", sid, "four", after=three.run.run_id, window=start)
        four_id = four.run.run_id
        chain = await world.store.load_transcript_chain(four_id, windowed=True)
        assert [s.run_id for s in chain] == [four_id, three.run.run_id]
        assert chain[1].first == start[1]
        assert all(int(r.id) >= int(start[1]) for r in chain[1].records)
        whole = await world.store.load_transcript_chain(four_id)
        assert len(whole) == 4
        assert all(s.first == "1" for s in whole)
        said = ["three", "re: three", "four", "re: four"]
        replayed = await build_messages_from_run_log(world.store, four_id)
        assert replayed == [_text(r, t) for r, t in zip("uaua", said, strict=True)]
        full = await build_messages_from_run_log(world.store, four_id, full=True)
        assert len(full) == 8

    async def test_a_summary_goes_before_the_first_kept_message(self, world: World) -> None:
        """[V5] a compaction's summary is the first part of the first kept message."""
        sid = await world.session("s")
        one = await _turn(world, "c1", sid, "one")
        two = await _turn(world, "c2", sid, "two", after=one.run.run_id)
        start = await _position(world, two.run.run_id)
        three = await _turn(world, "c3", sid, "three", after=two.run.run_id, window=start)
        summary = payloads.TranscriptWindow(
            policy="compaction:100",
            start=payloads.TranscriptPosition(run_id=start[0], record=start[1]),
            summary="Summary: one was said.",
            replaces=(payloads.WindowReplaces(run_id=one.run.run_id, first="2", last="4"),),
            model="m",
            prompt_id="p",
            prompt_version="2",
        )
        run = world.run("c4", session=sid)
        last = (await world.store.load_run(three.run.run_id)).last_record_id
        ref = payloads.TranscriptReference(kind="next_turn", run_id=three.run.run_id, through=last)
        first = run.record(
            payloads.TRANSCRIPT_REFERENCED,
            ref.encode(),
            event_key="transcript:referenced",
            at=world.now(),
        )
        await world.store.start_root_run(replace(run.root_start(), records=(first,)))
        await world.store.append_run_records(
            [
                _said(world, run, "input", _text("user", "four")),
                run.record(
                    payloads.TRANSCRIPT_WINDOW,
                    summary.encode(),
                    event_key="turn:1:window",
                    at=world.now(),
                ),
            ]
        )
        replayed = await build_messages_from_run_log(world.store, run.run.run_id)
        assert replayed[0].parts[0] == TextPart(text="Summary: one was said.")
        assert replayed[0].parts[1:] == (TextPart(text="two"),)
        assert len(replayed) == 5  # two (with the summary), re: two, three, re: three, four

    async def test_a_cut_before_a_window_does_not_see_it(self, world: World) -> None:
        """[V5] replay through a record before a window is what was sent then."""
        sid = await world.session("s")
        one = await _turn(world, "b1", sid, "one")
        run = world.run("b2", session=sid)
        last = (await world.store.load_run(one.run.run_id)).last_record_id
        ref = payloads.TranscriptReference(kind="next_turn", run_id=one.run.run_id, through=last)
        start_records = (
            run.record(
                payloads.TRANSCRIPT_REFERENCED,
                ref.encode(),
                event_key="transcript:referenced",
                at=world.now(),
            ),
        )
        await world.store.start_root_run(replace(run.root_start(), records=start_records))
        said = _said(world, run, "input", _text("user", "two"))
        (said_result,) = await world.store.append_run_records([said])
        cut = _window(world, run, run.run.run_id, said_result.id)
        await world.store.append_run_records([cut])
        before = await build_messages_from_run_log(
            world.store, run.run.run_id, through=said_result.id
        )
        assert len(before) == 3
        after = await build_messages_from_run_log(world.store, run.run.run_id)
        assert after == [_text("user", "two")]

    async def test_a_window_outside_its_chain_is_damage(self, world: World) -> None:
        """[V5] a window naming a message its chain does not hold is reported, never
        skipped; the whole chain still reads."""
        sid = await world.session("s")
        other = await _turn(world, "o1", sid, "elsewhere")
        start = await _position(world, other.run.run_id)
        one = await _turn(world, "o2", sid, "one", window=start)
        with pytest.raises(CorruptRecordError) as caught:
            await world.store.load_transcript_chain(one.run.run_id, windowed=True)
        assert caught.value.run_id == one.run.run_id
        with pytest.raises(CorruptRecordError):
            await build_messages_from_run_log(world.store, one.run.run_id)
        assert len(await world.store.load_transcript_chain(one.run.run_id)) == 1

    async def test_a_window_of_a_run_without_a_session(self, world: World) -> None:
        """[V5] a one-shot run's own window ends its windowed chain too."""
        run = await world.one_shot("solo")
        await world.store.append_run_records([_said(world, run, "input", _text("user", "first"))])
        await world.store.append_run_records(
            [_said(world, run, "answer", _text("assistant", "ok"))]
        )
        (b,) = await world.store.append_run_records(
            [_said(world, run, "again", _text("user", "second"))]
        )
        await world.store.append_run_records([_window(world, run, run.run.run_id, b.id)])
        (segment,) = await world.store.load_transcript_chain(run.run.run_id, windowed=True)
        assert segment.first == b.id
        replayed = await build_messages_from_run_log(world.store, run.run.run_id)
        assert replayed == [_text("user", "second")]

    @pytest.mark.parametrize(
        "body",
        [
            b'{"policy":"x"}',
            b'{"policy":"x","start":{"run_id":"r","record":"0"}}',
            b'{"policy":"x","start":{"run_id":"r","record":"1","message":-1}}',
            b'{"policy":"x","start":{"run_id":"r","record":"1"},"extra":1}',
        ],
    )
    async def test_a_misfit_window_is_refused_and_changes_nothing(
        self, world: World, body: bytes
    ) -> None:
        """A window that is not exactly the typed object is refused on write."""
        sid = await world.session("s")
        run = world.run("m", session=sid)
        await world.store.start_root_run(run.root_start())
        before = await world.dump()
        bad = run.record(payloads.TRANSCRIPT_WINDOW, body, event_key="w", at=world.now())
        with pytest.raises(ValidationError):
            await world.store.append_run_records([bad])
        assert await world.dump() == before
