"""[G2] Derived data names its source: a run whose history was copied from another session
carries a ``transcript_history_copied`` record naming the session, run and record it was
copied from, so the copies of a session's words held elsewhere can be listed (before a
purge, to decide; after it, to see what remains).

The runtime writes the record when a fork copies a transcript into another session (a
reference never crosses sessions, so the copy is the only way across); the store keeps it
as any record, strictly decoded when listed.

A compaction summary restates the turns it replaces: one whose window record
(``transcript_window_applied``) names, among the records it ``replaces``, a run
holding a copy restates (part of) that copy, and is listed with it (``summary``
names its record). It is always in the copy's session (a chain never leaves its
session), so purging that session whole takes it too. The rule is deliberately
wide: a summary replacing any of the copy run's records is listed, since listing
one too many is the safe side of an erasure.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from agentledger.errors import CorruptRecordError
from agentledger.storage.payloads import TRANSCRIPT_WINDOW, TranscriptWindow
from agentledger.storage.types import CopiedFrom, DerivedCopy, Record

__all__ = ["HISTORY_COPIED", "CopiedFrom", "DerivedCopy", "derived_copy", "summaries_of"]

HISTORY_COPIED = "transcript_history_copied"
"""The record type naming where a run's copied history came from."""


_DECODE = msgspec.json.Decoder(CopiedFrom).decode


def derived_copy(record: Record) -> DerivedCopy:
    """The copy a ``transcript_history_copied`` record names.

    Raises:
        CorruptRecordError: its stored payload is not a ``CopiedFrom``.
    """
    try:
        source = _DECODE(record.payload)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise CorruptRecordError(
            run_id=record.run_id, record_id=record.id, reason=f"{HISTORY_COPIED}: {e}"
        ) from e
    return DerivedCopy(session_id=record.session_id, run_id=record.run_id, source=source)


_WINDOW = msgspec.json.Decoder(TranscriptWindow).decode


def summaries_of(copies: list[DerivedCopy], records: Iterable[Record]) -> list[DerivedCopy]:
    """[G2] The copies followed by the compaction summaries among ``records`` (the copies'
    sessions' window records, in commit order) that restate one of them.

    Raises:
        CorruptRecordError: a window record's stored payload does not decode.
    """
    by_run: dict[str, list[DerivedCopy]] = {}
    for copy in copies:
        by_run.setdefault(copy.run_id, []).append(copy)
    found = list(copies)
    holders = {c.session_id for c in copies}
    for record in records:
        if record.type != TRANSCRIPT_WINDOW or record.session_id not in holders:
            continue
        try:
            window = _WINDOW(record.payload)
        except (msgspec.DecodeError, UnicodeDecodeError) as e:
            raise CorruptRecordError(
                run_id=record.run_id, record_id=record.id, reason=f"{TRANSCRIPT_WINDOW}: {e}"
            ) from e
        if not window.summary:
            continue
        named = dict.fromkeys(r.run_id for r in window.replaces)
        for run_id in named:
            for copy in by_run.get(run_id, ()):
                found.append(msgspec.structs.replace(copy, run_id=record.run_id, summary=record.id))
    return found
