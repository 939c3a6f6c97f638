"""What a run's transcript chain says beside its messages: the history references it
follows, and where a history policy's window starts (a cut, or a compaction's summary).

Read from the segments :meth:`~agentledger.storage.protocol.Store.load_transcript_chain`
returns (or any records); the inspector and ``agentledger transcript`` word them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agentledger.storage.payloads import TRANSCRIPT_REFERENCED, TRANSCRIPT_WINDOW, WindowReplaces
from agentledger.storage.transcript_chain import decode_reference, decode_window
from agentledger.storage.types import Record, TranscriptSegment

__all__ = ["HistoryLink", "WindowMark", "chain_records", "history_links", "window_marks"]

Stored = tuple[str, str, int]
"""Where a message is stored: (run, record, place in the record)."""


@dataclass(frozen=True)
class HistoryLink:
    """Run ``run``'s history is run ``source``'s transcript through record ``through``:
    as its next turn, its continuation, or a fork (cut at ``through``)."""

    run: str
    kind: str
    source: str
    through: str


@dataclass(frozen=True)
class WindowMark:
    """A window a history policy applied, recorded in record ``record`` of run ``run``:
    a cut, or (``summary`` set) a compaction, with what it replaced and who wrote it."""

    policy: str
    run: str
    record: str
    summary: str
    replaces: tuple[WindowReplaces, ...]
    model: str
    prompt_id: str
    prompt_version: str


def history_links(segments: Sequence[TranscriptSegment]) -> list[HistoryLink]:
    """Each history reference the chain follows, newest first.

    Raises:
        CorruptRecordError: a reference record is damaged.
    """
    found = []
    for segment in segments:
        for record in segment.records:
            if record.type == TRANSCRIPT_REFERENCED:
                ref = decode_reference(record)
                found.append(HistoryLink(segment.run_id, ref.kind, ref.run_id, ref.through))
    return found


def window_marks(records: Iterable[Record]) -> dict[Stored, list[WindowMark]]:
    """The windows among ``records``, by the stored message each starts at.

    Raises:
        CorruptRecordError: a window record is damaged.
    """
    marks: dict[Stored, list[WindowMark]] = {}
    for record in records:
        if record.type != TRANSCRIPT_WINDOW:
            continue
        window = decode_window(record)
        start = window.start
        mark = WindowMark(
            policy=window.policy,
            run=record.run_id,
            record=record.id,
            summary=window.summary,
            replaces=tuple(window.replaces),
            model=window.model,
            prompt_id=window.prompt_id,
            prompt_version=window.prompt_version,
        )
        marks.setdefault((start.run_id, start.record, start.message), []).append(mark)
    return marks


def chain_records(segments: Sequence[TranscriptSegment]) -> list[Record]:
    """The chain's records, the oldest run's first."""
    return [r for segment in reversed(segments) for r in segment.records]
