"""Transcript validators: can a planner ([T5]) or Bedrock ([T6]) use this transcript?

A transcript that breaks these rules is refused by providers with an opaque
error, or worse, silently misread; checking before the call names the message,
part and tool-use ids to blame. Validators only read: they never modify,
reorder or copy-and-fix their input.

`validate_planner_transcript` enforces, in this order of reading:

1. Every element is a `Message` with at least one part (providers reject empty
   messages).
2. System messages come only before the first non-system message and hold only
   `TextPart` and `CacheCheckpointPart`. Anthropic and Bedrock take the system
   prompt as a separate request field, so a later system message could only be
   sent by moving it, which [T3] forbids.
3. `ThinkingPart`, `CitationsPart` and `ToolUsePart` are model output and appear
   only in assistant messages; `ToolResultPart` appears only in user messages.
4. [T3] An assistant message with a tool use is: `ThinkingPart`\\ s, then other
   content (text, citations, images), then its `ToolUsePart`\\ s; nothing but a
   `CacheCheckpointPart` (allowed anywhere) follows a tool use.
5. [T5] Consecutive assistant messages form a group. A group with tool uses is
   followed immediately by one user message holding exactly one `ToolResultPart`
   per tool-use id of the group (none missing, extra or duplicated); its results
   come first, then optional user content.
6. A `ToolResultPart` that answers no immediately preceding tool-use group is
   an error (including a second answer to an already answered call).
7. Tool-use ids are non-empty (a part invariant) and unique across the transcript.
8. A trailing assistant group with tool uses and no results is an error (rule 5),
   unless the caller passes ``allow_pending=True``: a run that is suspended, or
   about to run those calls, legitimately waits for their results.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping

from agentledger.errors import TranscriptError
from agentledger.transcript.messages import Message
from agentledger.transcript.parts import (
    CacheCheckpointPart,
    CitationsPart,
    Part,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
)

__all__ = ["PlannerTranscriptCheck", "validate_bedrock", "validate_planner_transcript"]

_SYSTEM_PARTS = (TextPart, CacheCheckpointPart)
_ASSISTANT_ONLY = (ThinkingPart, CitationsPart, ToolUsePart)


def _kind(part: Part) -> str:
    """The JSON ``kind`` tag of a part, for error messages."""
    return str(part.__struct_config__.tag)


def _check_roles(index: int, message: Message) -> None:
    """Rules 2 and 3: which parts each role may hold."""
    for part_index, part in enumerate(message.parts):
        if message.role == "system":
            allowed = isinstance(part, _SYSTEM_PARTS)
        elif message.role == "user":
            allowed = not isinstance(part, _ASSISTANT_ONLY)
        else:
            allowed = not isinstance(part, ToolResultPart)
        if not allowed:
            raise TranscriptError(
                field=f"parts[{part_index}]",
                expected=f"a part a {message.role} message may hold",
                got=_kind(part),
                message=f"a {message.role} message cannot hold a {_kind(part)} part",
                message_index=index,
                part_index=part_index,
                tool_use_ids=_ids_of(part),
            )


def _ids_of(part: Part) -> tuple[str, ...]:
    """The tool-use id a part refers to, if any."""
    if isinstance(part, ToolUsePart):
        return (part.id,)
    if isinstance(part, ToolResultPart):
        return (part.tool_use_id,)
    return ()


def _check_assistant(index: int, message: Message, seen: MutableMapping[str, int]) -> list[str]:
    """Rules 4 and 7 for one assistant message; return its tool-use ids in order."""
    ids: list[str] = []
    for part_index, part in enumerate(message.parts):
        if isinstance(part, ToolUsePart):
            if part.id in seen:
                raise TranscriptError(
                    field=f"parts[{part_index}].id",
                    expected="a tool-use id unique in the transcript",
                    got=part.id,
                    message=f"tool-use id {part.id!r} already used in messages[{seen[part.id]}]",
                    message_index=index,
                    part_index=part_index,
                    tool_use_ids=(part.id,),
                )
            seen[part.id] = index
            ids.append(part.id)
    if not ids:
        return ids
    phase = 0  # 0: thinking, 1: other content, 2: tool uses
    for part_index, part in enumerate(message.parts):
        if isinstance(part, CacheCheckpointPart):
            continue
        step = 2 if isinstance(part, ToolUsePart) else 0 if isinstance(part, ThinkingPart) else 1
        if step < phase:
            after = "a tool_use" if phase == 2 else "text or other content"
            raise TranscriptError(
                field=f"parts[{part_index}]",
                expected="thinking, then text, then tool_use parts",
                got=_kind(part),
                message=f"a {_kind(part)} part cannot follow {after} in a tool-use message",
                message_index=index,
                part_index=part_index,
                tool_use_ids=ids,
            )
        phase = step
    return ids


def _answer_error(
    index: int, expected: str, problem: str, ids: list[str], part_index: int | None
) -> TranscriptError:
    """The error for a user message that answers its tool-use group wrongly."""
    return TranscriptError(
        field="parts" if part_index is None else f"parts[{part_index}]",
        expected=expected,
        got=ids,
        message=problem,
        message_index=index,
        part_index=part_index,
        tool_use_ids=ids,
    )


def _check_answer(index: int, message: Message, group_ids: list[str]) -> None:
    """Rules 5 and 6: ``message`` (a user message) answers the tool uses in ``group_ids``."""
    expected = set(group_ids)
    answered: set[str] = set()
    duplicated: list[str] = []
    extra: list[str] = []
    first_duplicate = first_extra = first_out_of_order = None
    content_seen = False
    for part_index, part in enumerate(message.parts):
        if isinstance(part, CacheCheckpointPart):
            continue
        if not isinstance(part, ToolResultPart):
            content_seen = True
            continue
        tool_use_id = part.tool_use_id
        if content_seen and first_out_of_order is None:
            first_out_of_order = part_index
        if tool_use_id not in expected:
            extra.append(tool_use_id)
            first_extra = part_index if first_extra is None else first_extra
        elif tool_use_id in answered:
            duplicated.append(tool_use_id)
            first_duplicate = part_index if first_duplicate is None else first_duplicate
        answered.add(tool_use_id)
    if duplicated:
        raise _answer_error(
            index,
            "one result per tool use",
            f"duplicate tool results for {duplicated}",
            duplicated,
            first_duplicate,
        )
    if extra:
        raise _answer_error(
            index,
            "results only for the tool uses of the preceding assistant group",
            f"tool results {extra} answer no tool use of the preceding assistant group",
            extra,
            first_extra,
        )
    missing = [i for i in group_ids if i not in answered]
    if missing:
        raise _answer_error(
            index,
            "a result for every tool use of the preceding assistant group",
            f"missing tool results for {missing}",
            missing,
            None,
        )
    if first_out_of_order is not None:
        raise _answer_error(
            index,
            "tool results first, then user content",
            "a tool_result part cannot follow user content",
            list(group_ids),
            first_out_of_order,
        )


class _SeenBefore(MutableMapping[str, int]):
    """The tool-use ids of a shared map first used before message ``limit``, plus its own.

    Ids map to the message that used them first, and the shared map only ever
    gains ids (an id used twice is an error), so this is the map as it stood
    when it had read ``limit`` messages, however far it has read since.
    """

    __slots__ = ("_limit", "_own", "_shared")

    def __init__(self, shared: Mapping[str, int], limit: int) -> None:
        self._shared = shared
        self._limit = limit
        self._own: dict[str, int] = {}

    def __getitem__(self, key: str) -> int:
        if key in self._own:
            return self._own[key]
        index = self._shared[key]
        if index >= self._limit:
            raise KeyError(key)
        return index

    def __setitem__(self, key: str, value: int) -> None:
        self._own[key] = value

    def __delitem__(self, key: str) -> None:
        del self._own[key]

    def __iter__(self) -> Iterator[str]:
        yield from self._own
        for key, index in self._shared.items():
            if index < self._limit and key not in self._own:
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)


class PlannerTranscriptCheck:
    """[T5] :func:`validate_planner_transcript`, read one message at a time.

    It keeps what the rules need of the messages it has read (the tool-use ids
    seen, the open assistant group), so a transcript that grows (a long run,
    turn after turn) is checked for what it adds only, with the same verdict
    and the same error as checking it whole. After an error it must not be
    used again. Validators only read their messages.
    """

    __slots__ = ("_count", "_group_ids", "_seen", "_system_allowed")

    def __init__(self) -> None:
        self._seen: MutableMapping[str, int] = {}
        self._group_ids: list[str] = []
        self._system_allowed = True
        self._count = 0

    @property
    def count(self) -> int:
        """How many messages have been read."""
        return self._count

    def fork(self) -> PlannerTranscriptCheck:
        """A check that goes on from here, as this one stands now, whatever either reads
        next: a snapshot that costs the open assistant group, not the transcript."""
        other = PlannerTranscriptCheck()
        other._seen = _SeenBefore(self._seen, self._count)
        other._group_ids = list(self._group_ids)
        other._system_allowed = self._system_allowed
        other._count = self._count
        return other

    def add(self, message: Message) -> None:
        """Read the next message.

        Raises:
            TranscriptError: the first rule it breaks (its ``message_index`` counts
                every message read so far).
        """
        index = self._count
        self._count += 1
        if not isinstance(message, Message):
            raise TranscriptError(
                field=f"messages[{index}]", expected="a Message", got=message, message_index=index
            )
        if not message.parts:
            raise TranscriptError(
                field="parts", expected="at least one part", got=(), message_index=index
            )
        _check_roles(index, message)
        if message.role == "system":
            if not self._system_allowed:
                raise TranscriptError(
                    field="role",
                    expected="system messages only before the first user or assistant message",
                    got="system",
                    message_index=index,
                )
            return
        self._system_allowed = False
        if message.role == "assistant":
            self._group_ids.extend(_check_assistant(index, message, self._seen))
            return
        if self._group_ids:
            _check_answer(index, message, self._group_ids)
        else:
            stray = [(p, i) for p, part in enumerate(message.parts) for i in _ids_of(part)]
            if stray:
                ids = [i for _, i in stray]
                raise TranscriptError(
                    field=f"parts[{stray[0][0]}]",
                    expected="tool results only right after an assistant group with tool uses",
                    got=ids,
                    message=f"tool results {ids} answer no immediately preceding tool use",
                    message_index=index,
                    part_index=stray[0][0],
                    tool_use_ids=ids,
                )
        self._group_ids = []

    def extend(self, messages: Iterable[Message]) -> None:
        """Read each message in turn (see :meth:`add`)."""
        for message in messages:
            self.add(message)

    def finish(self, *, allow_pending: bool = False) -> None:
        """Check that the transcript read so far may end here (rule 8); reads on stay possible.

        Raises:
            TranscriptError: it ends with tool uses and no results for them (unless
                ``allow_pending``).
        """
        if self._group_ids and not allow_pending:
            raise TranscriptError(
                field="messages",
                expected="one user message with the results of the last tool-use group",
                got="the end of the transcript",
                message=(
                    f"the transcript ends with tool uses {self._group_ids} and no results for them"
                ),
                message_index=self._count - 1,
                tool_use_ids=list(self._group_ids),
            )


def validate_planner_transcript(
    messages: Iterable[Message], *, allow_pending: bool = False
) -> None:
    """Check that a planner can send this transcript to any provider ([T3], [T5]).

    The rules are listed in the module docstring. ``messages`` is only read.
    ``allow_pending`` accepts a trailing tool-use group whose results are still
    to come (a run waiting for them); every other rule holds regardless.

    Raises:
        TranscriptError: the first rule broken, with ``message_index``,
            ``part_index`` (when one part is to blame) and ``tool_use_ids``.
    """
    check = PlannerTranscriptCheck()
    check.extend(messages)
    check.finish(allow_pending=allow_pending)


def validate_bedrock(messages: Iterable[Message], thinking_enabled: bool) -> None:
    """Check that Bedrock Converse accepts this transcript ([T6]).

    Runs `validate_planner_transcript` first, since Bedrock refuses the same
    structural errors. Then, with extended thinking enabled, every assistant
    message holding a tool use must start with a `ThinkingPart` (Bedrock rejects
    a tool-use turn whose reasoning was dropped). ``messages`` is only read.

    Raises:
        TranscriptError: a planner rule is broken, or a tool-use message does not
            start with thinking (``part_index`` 0, ``tool_use_ids`` its calls).
    """
    items = tuple(messages)
    validate_planner_transcript(items)
    if not thinking_enabled:
        return
    for index, message in enumerate(items):
        if message.role != "assistant":
            continue
        ids = [part.id for part in message.parts if isinstance(part, ToolUsePart)]
        if ids and not isinstance(message.parts[0], ThinkingPart):
            raise TranscriptError(
                field="parts[0]",
                expected="a thinking part first (Bedrock, thinking enabled)",
                got=_kind(message.parts[0]),
                message=(
                    "with thinking enabled, an assistant message with tool uses must start "
                    f"with a thinking part, not {_kind(message.parts[0])}"
                ),
                message_index=index,
                part_index=0,
                tool_use_ids=ids,
            )
