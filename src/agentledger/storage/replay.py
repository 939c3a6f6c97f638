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
from operator import attrgetter
from typing import NamedTuple

import msgspec

from agentledger.errors import CorruptRecordError, TranscriptError, ValidationError
from agentledger.storage.payloads import (
    TRANSCRIPT_REFERENCED,
    TRANSCRIPT_TYPES,
    TRANSCRIPT_WINDOW,
    TranscriptPosition,
    TranscriptWindow,
)
from agentledger.storage.protocol import Store, VerifiedTranscripts
from agentledger.storage.transcript_chain import (
    ChainWindow,
    TranscriptChain,
    load_transcript_chain,
    resolve_chain,
)
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
    "summary_first",
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
    chain = await load_transcript_chain(store, run_id, windowed=not full, through=through)
    verified = isinstance(store, VerifiedTranscripts) and store.transcripts_verified
    return replay_transcript_chain(chain, verified=verified, full=full)


class MessageOrigin(NamedTuple):
    """Where a replayed message is stored: the run whose log holds it, its record, how
    many history references replay followed to reach it (0: the run's own log), and
    its place in the record's message array."""

    run_id: str
    record_id: str
    type: str
    depth: int
    position: int = 0


ReplayedWindow = ChainWindow
"""The window a replay applies: its record, its decoded payload and the link holding it."""

Chain = TranscriptChain | Sequence[TranscriptSegment]
"""What replay reads: a resolved chain, or the segments a store's
``load_transcript_chain`` returned (resolved here, windowed unless ``full``)."""


def with_summary(message: Message, summary: str) -> Message:
    """``message`` with a compaction's summary as its first part: how the first kept
    message is sent to the model [V5]."""
    return msgspec.structs.replace(message, parts=(TextPart(text=summary), *message.parts))


def summary_first(message: Message, record: Record, window: TranscriptWindow) -> Message:
    """The first kept message as ``window`` (stored as ``record``) sends it to the model:
    with its summary first, if it has one [V5]. Replay and the transcript cache both
    apply a window through this.

    Raises:
        CorruptRecordError: a summary before a message that is not the user's.
    """
    if not window.summary:
        return message
    if message.role != "user":
        raise CorruptRecordError(
            run_id=record.run_id,
            record_id=record.id,
            reason=f"the window's summary goes before a {message.role} message",
        )
    return with_summary(message, window.summary)


def position_of(origins: Sequence[MessageOrigin], at: TranscriptPosition) -> int | None:
    """The index of the message stored at ``at`` among ``origins`` (None if absent)."""
    wanted = (at.run_id, at.record, at.message)
    return next(
        (n for n, o in enumerate(origins) if (o.run_id, o.record_id, o.position) == wanted),
        None,
    )


def _resolved(chain: Chain, full: bool) -> TranscriptChain:
    if isinstance(chain, TranscriptChain):
        return chain
    return resolve_chain(chain, windowed=not full)


def replay_transcript_chain(
    chain: Chain, *, verified: bool = False, full: bool = False
) -> list[Message]:
    """[V4]/[V5] The messages of a transcript chain.

    A history reference stands for its source's messages through the record it
    names (the next link), without their thinking parts when that reference or
    any reference above it excludes reasoning. The governing window is applied
    unless ``full``.

    Raises:
        CorruptRecordError: a record that does not decode, a reference the
            chain does not answer, or a window that starts outside the chain.
    """
    resolved = _resolved(chain, full)
    if verified and len(resolved.links) == 1:  # no reference was followed: one decode, in order
        (link,) = resolved.links
        if link.reference is None and link.window is None:  # every record a message array
            try:
                return decode_verified_messages(map(_PAYLOAD, resolved.segments[0].records))
            except TranscriptError:
                pass  # the strict path below names the record
    ordered = _ordered(resolved)
    window = resolved.window
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
    chain: Chain, *, verified: bool = False, full: bool = False
) -> list[tuple[Message, MessageOrigin]]:
    """:func:`replay_transcript_chain`, each message with where it is stored (a message a
    compaction's summary was put before keeps its stored origin)."""
    resolved = _resolved(chain, full)
    ordered = _ordered(resolved)
    if resolved.window is not None and not full:
        return _windowed(ordered, resolved.window, verified)
    return _with_origins(ordered, verified)


_Entry = tuple[int, Record, bool]
_NOT_MESSAGES = frozenset({TRANSCRIPT_REFERENCED, TRANSCRIPT_WINDOW})
_PAYLOAD = attrgetter("payload")


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
    message, origin = pairs[0]
    pairs[0] = (summary_first(message, window.record, window.window), origin)
    return pairs


def _ordered(chain: TranscriptChain) -> list[_Entry]:
    """The chain's message records in replay order: each link's records before its
    reference, the next link's, then its records after the reference; each with how
    many references away it is and whether the references above it exclude reasoning."""
    before: list[_Entry] = []
    after: list[list[_Entry]] = []
    for link, segment in zip(chain.links, chain.segments, strict=True):
        entry_of = (link.depth, link.exclude_reasoning)
        split = int(link.reference.id) if link.reference is not None else None
        tail: list[_Entry] = []
        for record in segment.records:
            if record.type in _NOT_MESSAGES:
                continue
            entry = (entry_of[0], record, entry_of[1])
            if split is not None and int(record.id) > split:
                tail.append(entry)
            else:
                before.append(entry)
        after.append(tail)
    for tail in reversed(after):
        before.extend(tail)
    return before


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
