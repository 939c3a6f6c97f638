"""[T5] PlannerTranscriptCheck read piece by piece gives validate_planner_transcript's verdict.

A long run's transcript is checked for what each turn adds only; these
properties say that this never changes the verdict, nor the error, whatever
the transcript and however it is cut into pieces.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentledger.errors import TranscriptError
from agentledger.transcript import (
    CacheCheckpointPart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    validate_planner_transcript,
)
from agentledger.transcript.validate import PlannerTranscriptCheck
from tests.transcript.strategies import planner_transcripts

MANY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_ids = st.sampled_from(["a", "b", "c", "d"])
_loose_parts: st.SearchStrategy[Part] = st.one_of(
    st.builds(TextPart, text=st.sampled_from(["", "hi", "ok"])),
    st.builds(ThinkingPart, text=st.just("hmm"), signature=st.just("s")),
    st.builds(ToolUsePart, id=_ids, name=st.just("t"), input=st.just({})),
    st.builds(ToolResultPart, tool_use_id=_ids, content=st.just("r")),
    st.just(CacheCheckpointPart()),
)
_loose_messages = st.builds(
    Message,
    role=st.sampled_from(["system", "user", "assistant"]),
    parts=st.lists(_loose_parts, max_size=4).map(tuple),
)


@st.composite
def _mutated(draw: st.DrawFn) -> list[Any]:
    """A valid transcript, then maybe one change: a message dropped, repeated, moved,
    replaced by a loose one or by something that is not a message."""
    transcript: list[Any] = list(draw(planner_transcripts()))
    change = draw(st.sampled_from(["none", "drop", "repeat", "move", "loose", "junk"]))
    i = draw(st.integers(min_value=0, max_value=len(transcript) - 1))
    if change == "drop":
        del transcript[i]
    elif change == "repeat":
        transcript.insert(i, transcript[i])
    elif change == "move":
        transcript.insert(draw(st.integers(0, len(transcript))), transcript.pop(i))
    elif change == "loose":
        transcript[i] = draw(_loose_messages)
    elif change == "junk":
        transcript[i] = "not a message"
    return transcript


transcripts = st.one_of(_mutated(), st.lists(_loose_messages, max_size=8))


def _verdict(run: Any) -> tuple[Any, ...] | None:
    """None when ``run()`` passes; else what its TranscriptError says, in full."""
    try:
        run()
    except TranscriptError as e:
        return (
            str(e),
            e.field,
            e.expected,
            repr(e.got),
            e.message_index,
            e.part_index,
            e.tool_use_ids,
        )
    return None


def _whole(messages: list[Any], allow_pending: bool) -> tuple[Any, ...] | None:
    return _verdict(lambda: validate_planner_transcript(messages, allow_pending=allow_pending))


def _pieces(messages: list[Any], cuts: list[int], allow_pending: bool) -> tuple[Any, ...] | None:
    def run() -> None:
        check = PlannerTranscriptCheck()
        start = 0
        for cut in [*sorted(cuts), len(messages)]:
            check.extend(messages[start:cut])
            check.finish(allow_pending=True)  # a look at the end between pieces changes nothing
            start = cut
        check.finish(allow_pending=allow_pending)

    return _verdict(run)


@MANY
@given(transcripts, st.data(), st.booleans())
def test_pieces_give_the_verdict_of_the_whole(
    messages: list[Any], data: st.DataObject, allow_pending: bool
) -> None:
    """Reading a transcript in any pieces gives the whole check's verdict and error."""
    cuts = data.draw(st.lists(st.integers(0, len(messages)), max_size=4))
    assert _pieces(messages, cuts, allow_pending) == _whole(messages, allow_pending)


@MANY
@given(transcripts, st.data(), st.booleans())
def test_a_fork_tries_a_message_and_leaves_the_check_as_it_was(
    messages: list[Any], data: st.DataObject, allow_pending: bool
) -> None:
    """fork() then one more message gives the verdict of the prefix plus that message; the
    check it came from, read on to the end, still gives the whole verdict."""
    cut = data.draw(st.integers(0, len(messages)))
    extra = data.draw(
        st.one_of(
            _loose_messages,
            st.sampled_from(messages or [Message(role="user", parts=(TextPart(text="x"),))]),
        )
    )
    check = PlannerTranscriptCheck()
    before = _verdict(lambda: check.extend(messages[:cut]))
    if before is not None:  # the prefix is already wrong: the whole check says so too
        assert _whole(messages[:cut], True) == before
        return

    def tried() -> None:
        fork = check.fork()
        fork.add(extra)
        fork.finish(allow_pending=allow_pending)

    assert _verdict(tried) == _whole([*messages[:cut], extra], allow_pending)

    def rest() -> None:
        check.extend(messages[cut:])
        check.finish(allow_pending=allow_pending)

    assert _verdict(rest) == _whole(messages, allow_pending)


def test_the_strategies_draw_valid_and_invalid_transcripts() -> None:
    """The properties above see both verdicts (a sanity check of the strategies)."""
    seen: set[bool] = set()

    @settings(max_examples=200, deadline=None)
    @given(transcripts)
    def look(messages: list[Any]) -> None:
        seen.add(_whole(messages, False) is None)

    look()
    assert seen == {True, False}
