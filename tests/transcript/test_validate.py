"""Validators: planner transcripts ([T3], [T5]) and Bedrock's thinking rule ([T6])."""

from __future__ import annotations

import contextlib
import copy

import pytest

from agentledger.demo import build_demo_transcript
from agentledger.errors import TranscriptError
from agentledger.transcript import (
    CacheCheckpointPart,
    CitationsPart,
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    encode_messages,
    validate_bedrock,
    validate_planner_transcript,
)


def system(text: str = "be brief") -> Message:
    return Message(role="system", parts=(TextPart(text=text),))


def user(*parts: Part | str) -> Message:
    return Message(
        role="user", parts=tuple(TextPart(text=p) if isinstance(p, str) else p for p in parts)
    )


def assistant(*parts: Part | str) -> Message:
    return Message(
        role="assistant", parts=tuple(TextPart(text=p) if isinstance(p, str) else p for p in parts)
    )


def call(id: str) -> ToolUsePart:
    return ToolUsePart(id=id, name="lookup", input={"q": id})


def result(id: str, *, is_error: bool = False) -> ToolResultPart:
    return ToolResultPart(tool_use_id=id, content={"ok": not is_error}, is_error=is_error)


THINK = ThinkingPart(text="hmm", signature="sig")


def _planner_error(messages: list[Message]) -> TranscriptError:
    with pytest.raises(TranscriptError) as info:
        validate_planner_transcript(messages)
    return info.value


VALID: dict[str, list[Message]] = {
    "demo": build_demo_transcript(),
    "no tools": [system(), user("hi"), assistant("hello"), user("bye"), assistant("ciao")],
    "no system": [user("hi"), assistant("hello")],
    "two system messages first": [system("a"), system("b"), user("hi")],
    "parallel calls answered in another order": [
        user("go"),
        assistant(THINK, "on it", call("a"), call("b")),
        user(result("b"), result("a", is_error=True), "and then?"),
        assistant("done"),
    ],
    "a group of two assistant messages answered once": [
        user("go"),
        assistant(call("a")),
        assistant("also", call("b")),
        user(result("a"), result("b")),
    ],
    "checkpoints anywhere": [
        Message(role="system", parts=(TextPart(text="s"), CacheCheckpointPart())),
        user("go", CacheCheckpointPart()),
        assistant(CacheCheckpointPart(), THINK, call("a"), CacheCheckpointPart()),
        user(result("a"), CacheCheckpointPart(), "more", CacheCheckpointPart()),
    ],
    "several text parts and citations before the call": [
        user("go"),
        assistant(THINK, THINK, "a", CitationsPart(text="b", citations=()), call("a")),
        user(result("a")),
    ],
    "assistant without tools may order freely": [user("q"), assistant("a", THINK, "b")],
    "assistant starts": [assistant("hello"), user("hi")],
}


@pytest.mark.parametrize("messages", VALID.values(), ids=VALID.keys())
def test_valid_transcripts_pass(messages: list[Message]) -> None:
    """[T3][T5] transcripts following every rule pass."""
    validate_planner_transcript(messages)
    validate_planner_transcript(tuple(messages))
    validate_planner_transcript(iter(messages))


def test_a_trailing_group_without_results_is_refused_by_default() -> None:
    """[T5] a tool-use group must be followed by its results: a transcript ending with
    unanswered tool uses is an error unless the caller says a run waits for them."""
    messages = [user("go"), assistant(THINK, "on it", call("a")), assistant(call("b"))]
    error = _planner_error(messages)
    assert error.tool_use_ids == ("a", "b")
    assert error.message_index == 2
    assert "no results" in str(error)
    validate_planner_transcript(messages, allow_pending=True)
    with pytest.raises(TranscriptError):  # the keyword never relaxes the other rules
        validate_planner_transcript([*messages, user("no results")], allow_pending=True)


def test_a_missing_result_is_named() -> None:
    """[T5] every tool use of the group needs a result in the next user message."""
    error = _planner_error([user("go"), assistant(call("a"), call("b")), user(result("a"))])
    assert error.message_index == 2
    assert error.tool_use_ids == ("b",)
    assert error.part_index is None
    assert "missing" in str(error)


def test_a_group_answered_only_with_text_misses_every_result() -> None:
    """[T5] a user message that ignores the calls misses all of them, in call order."""
    error = _planner_error([user("go"), assistant(call("b"), call("a")), user("hello?")])
    assert (error.message_index, error.tool_use_ids) == (2, ("b", "a"))


def test_results_split_across_the_group_boundary_are_missing() -> None:
    """[T5] results must all be in the one user message right after the group."""
    messages = [user("go"), assistant(call("a"), call("b")), user(result("a")), user(result("b"))]
    error = _planner_error(messages)
    assert (error.message_index, error.tool_use_ids) == (2, ("b",))


def test_an_extra_result_is_named() -> None:
    """[T5] a result for an id the group did not call is an error, naming the id and part."""
    error = _planner_error([user("go"), assistant(call("a")), user(result("a"), result("zzz"))])
    assert (error.message_index, error.part_index, error.tool_use_ids) == (2, 1, ("zzz",))


def test_a_duplicate_result_is_named() -> None:
    """[T5] two results for one call are an error at the second one."""
    messages = [
        user("go"),
        assistant(call("a"), call("b")),
        user(result("a"), result("b"), result("a")),
    ]
    error = _planner_error(messages)
    assert (error.message_index, error.part_index, error.tool_use_ids) == (2, 2, ("a",))


@pytest.mark.parametrize(
    ("messages", "message_index", "ids"),
    [
        ([user(result("a"))], 0, ("a",)),
        ([user("go"), assistant("no tools here"), user(result("a"))], 2, ("a",)),
        ([user("go"), assistant(call("a")), user(result("a")), user(result("a"))], 3, ("a",)),
        ([system(), user("x", result("a"), result("b"))], 1, ("a", "b")),
    ],
    ids=["first message", "after a group without tools", "answer repeated later", "two strays"],
)
def test_a_result_answering_no_preceding_group_is_an_error(
    messages: list[Message], message_index: int, ids: tuple[str, ...]
) -> None:
    """[T5] a tool result must answer the assistant group immediately before it."""
    error = _planner_error(messages)
    assert (error.message_index, error.tool_use_ids) == (message_index, ids)


@pytest.mark.parametrize(
    ("messages", "message_index", "part_index"),
    [
        ([user("go"), assistant(call("a"), call("a"))], 1, 1),
        ([user("go"), assistant(call("a")), user(result("a")), assistant(call("a"))], 3, 0),
    ],
    ids=["same message", "later message"],
)
def test_tool_use_ids_are_unique_across_the_transcript(
    messages: list[Message], message_index: int, part_index: int
) -> None:
    """[T5] a tool-use id used twice is an error at the second use."""
    error = _planner_error(messages)
    assert (error.message_index, error.part_index, error.tool_use_ids) == (
        message_index,
        part_index,
        ("a",),
    )


def test_tool_use_ids_cannot_be_empty() -> None:
    """[T5] an empty tool-use id cannot exist, so no validator ever sees one."""
    with pytest.raises(TranscriptError):
        ToolUsePart(id="", name="n", input={})
    with pytest.raises(TranscriptError):
        ToolResultPart(tool_use_id="", content=None)


@pytest.mark.parametrize(
    ("tool_message", "part_index"),
    [
        (assistant(call("a"), "text after the call"), 1),
        (assistant("text", THINK, call("a")), 1),
        (assistant(call("a"), THINK), 1),
        (assistant(THINK, call("a"), ImagePart(format="png", url="u")), 2),
    ],
    ids=["text after tool_use", "thinking after text", "thinking after tool_use", "image after"],
)
def test_assistant_tool_use_messages_keep_their_order(
    tool_message: Message, part_index: int
) -> None:
    """[T3] thinking, then text, then tool uses; nothing but a checkpoint after a tool use."""
    error = _planner_error([user("go"), tool_message, user(result("a"))])
    assert (error.message_index, error.part_index, error.tool_use_ids) == (1, part_index, ("a",))


def test_results_come_before_user_content() -> None:
    """[T3] in the answering user message, tool results come first, then user content."""
    messages = [user("go"), assistant(call("a"), call("b")), user(result("a"), "wait", result("b"))]
    error = _planner_error(messages)
    assert (error.message_index, error.part_index) == (2, 2)
    assert set(error.tool_use_ids) == {"a", "b"}


def test_system_messages_come_only_first() -> None:
    """[T5] a system message after a user or assistant message is refused (it cannot be placed)."""
    error = _planner_error([system(), user("hi"), system("new rules")])
    assert error.message_index == 2
    assert error.field == "role"


@pytest.mark.parametrize(
    ("messages", "message_index", "part_index"),
    [
        ([Message(role="system", parts=(ImagePart(format="png", url="u"),))], 0, 0),
        ([Message(role="system", parts=(TextPart(text="s"), THINK))], 0, 1),
        ([user(call("a"))], 0, 0),
        ([user(THINK)], 0, 0),
        ([user(CitationsPart(text="c", citations=()))], 0, 0),
        ([user("go"), assistant(call("a"), result("a"))], 1, 1),
    ],
    ids=["image in system", "thinking in system", "tool_use in user", "thinking in user",
         "citations in user", "tool_result in assistant"],
)  # fmt: skip
def test_parts_belong_to_their_role(
    messages: list[Message], message_index: int, part_index: int
) -> None:
    """[T5] each role holds only its parts: model output in assistant, results in user messages.

    System messages hold only text and cache checkpoints.
    """
    error = _planner_error(messages)
    assert (error.message_index, error.part_index) == (message_index, part_index)


def test_empty_messages_are_refused() -> None:
    """[T5] a message with no parts is refused; providers reject empty content."""
    error = _planner_error([user("hi"), Message(role="assistant", parts=())])
    assert (error.message_index, error.field) == (1, "parts")


def test_non_messages_are_refused() -> None:
    """[T5] every element must be a Message."""
    error = _planner_error([user("hi"), {"role": "assistant"}])  # type: ignore[list-item]
    assert error.message_index == 1


BEDROCK_VALID = [
    user("go"),
    assistant(THINK, "checking", call("a")),
    user(result("a")),
    assistant("no tools, no thinking needed"),
]


def test_bedrock_accepts_thinking_first_tool_use_messages() -> None:
    """[T6] with thinking enabled, tool-use messages starting with thinking pass."""
    validate_bedrock(BEDROCK_VALID, thinking_enabled=True)
    validate_bedrock(iter(BEDROCK_VALID), thinking_enabled=True)


@pytest.mark.parametrize(
    "first",
    [TextPart(text="checking"), CacheCheckpointPart(), call("a")],
    ids=["text first", "checkpoint first", "tool_use first"],
)
def test_bedrock_requires_thinking_first_when_enabled(first: Part) -> None:
    """[T6] with thinking enabled, an assistant tool-use message must start with a ThinkingPart."""
    parts = (first, call("a")) if not isinstance(first, ToolUsePart) else (first,)
    messages = [user("go"), Message(role="assistant", parts=parts), user(result("a"))]
    with pytest.raises(TranscriptError) as info:
        validate_bedrock(messages, thinking_enabled=True)
    error = info.value
    assert (error.message_index, error.part_index, error.tool_use_ids) == (1, 0, ("a",))
    validate_bedrock(messages, thinking_enabled=False)


def test_bedrock_also_applies_the_planner_rules() -> None:
    """[T6] validate_bedrock runs validate_planner_transcript first (Bedrock refuses the same)."""
    messages = [user("go"), assistant(THINK, call("a"))]
    validate_bedrock([*messages, user(result("a"))], thinking_enabled=True)
    with pytest.raises(TranscriptError) as info:
        validate_bedrock([*messages, user("no results")], thinking_enabled=False)
    assert info.value.tool_use_ids == ("a",)


@pytest.mark.parametrize("messages", [*VALID.values(), BEDROCK_VALID], ids=[*VALID, "bedrock"])
def test_validators_do_not_modify_their_input(messages: list[Message]) -> None:
    """[T5][T6] validators only read: the list and every message are unchanged afterwards."""
    snapshot, before, ids = (
        copy.deepcopy(messages),
        encode_messages(messages),
        list(map(id, messages)),
    )
    validate_planner_transcript(messages)
    validate_bedrock(messages, thinking_enabled=False)
    with contextlib.suppress(TranscriptError):
        validate_bedrock(messages, thinking_enabled=True)
    assert messages == snapshot
    assert encode_messages(messages) == before
    assert list(map(id, messages)) == ids


def test_failing_validation_does_not_modify_its_input() -> None:
    """[T5] a refused transcript is left exactly as it was."""
    messages = [user("go"), assistant(call("a"), call("b")), user(result("b"), "late", result("a"))]
    before = encode_messages(messages)
    with pytest.raises(TranscriptError):
        validate_planner_transcript(messages)
    assert encode_messages(messages) == before
