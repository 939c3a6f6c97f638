"""Rebuild a run's transcript from its log [R1]/[R2].

The runtime stores canonical messages as ordinary records:
``transcript_messages_seeded`` (messages that existed before the run) and
``transcript_messages_appended`` (messages accepted during it), each a JSON
array of messages. Replaying them in saved order gives the exact transcript
the provider saw; anything that cannot be decoded is reported, never skipped.

A run's history may instead be a ``transcript_messages_referenced`` record: a
reference to an earlier run's transcript through one of its records (the turn
before, the suspended run it continues, the run it forks). Replay reads the
whole chain with one ``load_transcript_chain`` and gives exactly what a copy
would have.

A ``transcript_window_applied`` record [V5] says where the model input begins
from then on: a history policy's cut, or a compaction whose summary stands
before the first kept message in place of everything before it. Replay
applies the newest window (what the model was sent); ``full=True`` ignores
windows and gives the whole conversation, for UIs and audits.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import msgspec

from agentledger.errors import CorruptRecordError, TranscriptError, ValidationError
from agentledger.storage.payloads import (
    TRANSCRIPT_REFERENCED,
    TRANSCRIPT_TYPES,
    TRANSCRIPT_WINDOW,
    TranscriptPosition,
    TranscriptReference,
    TranscriptWindow,
)
from agentledger.storage.protocol import Store, VerifiedTranscripts
from agentledger.storage.transcript_chain import decode_reference, decode_window
from agentledger.storage.types import Record, TranscriptSegment
from agentledger.transcript.codec import decode_messages, decode_verified_messages
from agentledger.transcript.messages import Message
from agentledger.transcript.parts import TextPart, ThinkingPart

__all__ = [
    "TRANSCRIPT_RECORD_TYPES",
    "MessageOrigin",
    "ReplayedWindow",
    "build_messages_from_run_log",
    "position_of",
    "replay_run_log_events",
    "replay_transcript_chain",
    "replay_with_origins",
    "with_summary",
    "without_reasoning",
]

TRANSCRIPT_RECORD_TYPES = TRANSCRIPT_TYPES
"""The record types that carry transcript messages."""


def replay_run_log_events(records: Iterable[Record]) -> list[Message]:
    """[R2] The messages of loaded records, in saved order; other records are skipped
    (windows too: this is the whole conversation of these records [V5]).

    A run whose history is a reference to another run's transcript cannot be
    replayed from its own records: that is refused, never a shorter transcript.

    Raises:
        ValidationError: a history reference among the records.
        CorruptRecordError: a transcript record whose payload is not a message array.
    """
    messages: list[Message] = []
    for record in records:
        if record.type == TRANSCRIPT_REFERENCED:
            raise ValidationError(
                field=f"records[{record.id}].type",
                expected="no history reference (build_messages_from_run_log resolves it)",
                got=record.type,
            )
        if record.type not in TRANSCRIPT_RECORD_TYPES:
            continue
        try:
            messages.extend(decode_messages(record.payload))
        except TranscriptError as e:
            raise CorruptRecordError(
                run_id=record.run_id, record_id=record.id, reason=f"{record.type}: {e}"
            ) from e
    return messages


async def build_messages_from_run_log(
    store: Store, run_id: str, *, through: str = "", full: bool = False
) -> list[Message]:
    """[R2]/[V4]/[V5] Read a run's transcript chain once and replay it.

    The run's history references are resolved: the result is exactly what the
    run would replay had each referenced transcript been copied into it, with
    the references' exclusions applied. ``through`` cuts the run's own log at
    that record id ("" for its end). The newest window at that point is
    applied, so a cut at a turn's window gives exactly the messages that turn
    sent the model; ``full`` ignores windows: the whole conversation.

    A store that declares :class:`~agentledger.storage.protocol.VerifiedTranscripts`
    (it verifies every record's checksum on read and validated every transcript
    record on write) hands over payloads already known to decode, so they skip
    the parts' invariant checks; every other store's records are decoded
    strictly, and so are a verified store's whose quick decode fails anyway
    (the strict path names the record).

    Raises:
        CorruptRecordError: damage anywhere in the chain, naming its run and record.
    """
    windowed = not full and not through  # a cut may need what an older window kept
    segments = await store.load_transcript_chain(run_id, windowed=windowed)
    verified = isinstance(store, VerifiedTranscripts) and store.transcripts_verified
    if through:
        head = segments[0]
        if not through.isdigit() or not 1 <= int(through) <= int(head.through):
            raise ValidationError(
                field="through",
                expected=f"a record id of run {run_id} (1..{head.through})",
                got=through,
            )
        cut = int(through)
        kept = tuple(r for r in head.records if int(r.id) <= cut)
        segments = (msgspec.structs.replace(head, through=through, records=kept), *segments[1:])
    return replay_transcript_chain(segments, verified=verified, full=full)


class MessageOrigin(NamedTuple):
    """Where a replayed message is stored: the run whose log holds it, its record, how
    many history references replay followed to reach it (0: the run's own log), and
    its place in the record's message array."""

    run_id: str
    record_id: str
    type: str
    depth: int
    position: int = 0


class ReplayedWindow(NamedTuple):
    """The window a replay applied: its record and its decoded payload."""

    record: Record
    window: TranscriptWindow


def with_summary(message: Message, summary: str) -> Message:
    """``message`` with a compaction's summary as its first part: how the first kept
    message is sent to the model [V5]."""
    return msgspec.structs.replace(message, parts=(TextPart(text=summary), *message.parts))


def position_of(origins: Sequence[MessageOrigin], at: TranscriptPosition) -> int | None:
    """The index of the message stored at ``at`` among ``origins`` (None if absent)."""
    wanted = (at.run_id, at.record, at.message)
    return next(
        (n for n, o in enumerate(origins) if (o.run_id, o.record_id, o.position) == wanted),
        None,
    )


def replay_transcript_chain(
    segments: Sequence[TranscriptSegment], *, verified: bool = False, full: bool = False
) -> list[Message]:
    """[V4]/[V5] The messages of a chain as ``load_transcript_chain`` returns it.

    The first segment is the run replayed; a history reference in a segment
    stands for its source's messages through the record it names (the next
    segment), without their thinking parts when that reference or any reference
    above it excludes reasoning. The governing window is applied unless ``full``.

    Raises:
        CorruptRecordError: a record that does not decode, a reference the next
            segment does not answer, or a window that starts outside the chain.
    """
    if verified and len(segments) == 1:  # no reference was followed: one decode, in order
        (segment,) = segments
        records = segment.records
        if all(r.type not in _NOT_MESSAGES for r in records) and (
            not records or int(records[-1].id) <= int(segment.through)
        ):
            try:
                return decode_verified_messages(r.payload for r in records)
            except TranscriptError:
                pass  # the strict path below names the record
    ordered, window = _ordered(segments)
    if window is not None and not full:
        return [m for m, _ in _windowed(ordered, window, verified)]
    if verified:  # one decode of consecutive records that share their exclusion
        messages: list[Message] = []
        start = 0
        while start < len(ordered):
            end = start
            exclude = ordered[start][2]
            while end < len(ordered) and ordered[end][2] == exclude:
                end += 1
            try:
                batch = decode_verified_messages(r.payload for _, r, _ in ordered[start:end])
            except TranscriptError:
                batch = [m for _, r, _ in ordered[start:end] for m in _decode(r, False)]
            messages.extend(without_reasoning(batch) if exclude else batch)
            start = end
        return messages
    out: list[Message] = []
    for _, record, exclude in ordered:
        decoded = _decode(record, False)
        out.extend(without_reasoning(decoded) if exclude else decoded)
    return out


def replay_with_origins(
    segments: Sequence[TranscriptSegment], *, verified: bool = False, full: bool = False
) -> list[tuple[Message, MessageOrigin]]:
    """:func:`replay_transcript_chain`, each message with where it is stored (a message a
    compaction's summary was put before keeps its stored origin)."""
    ordered, window = _ordered(segments)
    if window is not None and not full:
        return _windowed(ordered, window, verified)
    return _with_origins(ordered, verified)


_Entry = tuple[int, Record, bool]
_NOT_MESSAGES = frozenset({TRANSCRIPT_REFERENCED, TRANSCRIPT_WINDOW})


def _with_origins(
    ordered: Sequence[_Entry], verified: bool, skip: int = 0
) -> list[tuple[Message, MessageOrigin]]:
    """The messages of ``ordered`` with their origins, the first ``skip`` of the first
    record's array left out (before any exclusion, so indexes are the stored ones)."""
    out: list[tuple[Message, MessageOrigin]] = []
    for n, (depth, record, exclude) in enumerate(ordered):
        decoded = _decode(record, verified)
        first = skip if n == 0 else 0
        for index in range(first, len(decoded)):
            message = decoded[index]
            if exclude:
                kept = without_reasoning((message,))
                if not kept:
                    continue
                message = kept[0]
            out.append(
                (message, MessageOrigin(record.run_id, record.id, record.type, depth, index))
            )
    return out


def _windowed(
    ordered: Sequence[_Entry], window: ReplayedWindow, verified: bool
) -> list[tuple[Message, MessageOrigin]]:
    """[V5] the messages from the window's start on, its summary (if any) put first in
    the first of them, as the model was sent them."""
    start = window.window.start
    at = next(
        (
            n
            for n, (_, r, _) in enumerate(ordered)
            if (r.run_id, r.id) == (start.run_id, start.record)
        ),
        None,
    )
    pairs = _with_origins(ordered[at:], verified, start.message) if at is not None else []
    if (
        at is None
        or not pairs
        or (pairs[0][1].record_id, pairs[0][1].position)
        != (
            start.record,
            start.message,
        )
    ):
        raise CorruptRecordError(
            run_id=window.record.run_id,
            record_id=window.record.id,
            reason=(
                f"the window starts at message {start.message} of record {start.record} "
                f"of run {start.run_id}, which its transcript chain does not hold"
            ),
        )
    if window.window.summary:
        message, origin = pairs[0]
        if message.role != "user":
            raise CorruptRecordError(
                run_id=window.record.run_id,
                record_id=window.record.id,
                reason=f"the window's summary goes before a {message.role} message",
            )
        pairs[0] = (with_summary(message, window.window.summary), origin)
    return pairs


def _ordered(
    segments: Sequence[TranscriptSegment],
) -> tuple[list[_Entry], ReplayedWindow | None]:
    """The chain's message records in replay order (how many references away each is,
    and whether the references above it exclude reasoning), and the newest window."""
    by_run = {segment.run_id: segment for segment in segments}
    before: list[_Entry] = []
    after: list[list[_Entry]] = []
    window: ReplayedWindow | None = None
    exclude_reasoning = False
    segment = segments[0] if segments else None
    cut = int(segment.through) if segment else 0
    seen: set[str] = set()
    depth = 0
    while segment is not None:
        seen.add(segment.run_id)
        reference: TranscriptReference | None = None
        tail: list[_Entry] = []
        whole = cut >= int(segment.through)  # the store cut the segment there already
        newest: Record | None = None
        for record in segment.records:
            if not whole and int(record.id) > cut:
                break
            if record.type == TRANSCRIPT_WINDOW:
                newest = record
                continue
            if record.type == TRANSCRIPT_REFERENCED:
                reference = decode_reference(record)
                if reference.run_id not in by_run or reference.run_id in seen:
                    raise CorruptRecordError(
                        run_id=record.run_id,
                        record_id=record.id,
                        reason=f"names run {reference.run_id}, not in its transcript chain",
                    )
                continue
            (tail if reference is not None else before).append((depth, record, exclude_reasoning))
        after.append(tail)
        if window is None and newest is not None:  # the first run (from the newest) with one
            window = ReplayedWindow(newest, decode_window(newest))
        if reference is None:
            break
        exclude_reasoning = exclude_reasoning or reference.exclude_reasoning
        segment = by_run[reference.run_id]
        cut = int(reference.through)
        depth += 1
        if cut > int(segment.through):
            raise CorruptRecordError(
                run_id=segment.run_id,
                record_id=reference.through,
                reason=f"the chain holds run {segment.run_id} only through {segment.through}",
            )
    for tail in reversed(after):
        before.extend(tail)
    return before, window


def _decode(record: Record, verified: bool) -> list[Message]:
    try:
        if verified:
            return decode_verified_messages((record.payload,))
        return decode_messages(record.payload)
    except TranscriptError as e:
        raise CorruptRecordError(
            run_id=record.run_id, record_id=record.id, reason=f"{record.type}: {e}"
        ) from e


def without_reasoning(messages: Iterable[Message]) -> list[Message]:
    """``messages`` without their thinking parts, as a reference that excludes reasoning
    gives them; a message left with no part is dropped."""
    kept: list[Message] = []
    for message in messages:
        if any(isinstance(p, ThinkingPart) for p in message.parts):
            parts = tuple(p for p in message.parts if not isinstance(p, ThinkingPart))
            if not parts:
                continue
            message = msgspec.structs.replace(message, parts=parts)
        kept.append(message)
    return kept
