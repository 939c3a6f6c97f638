"""[G2] Derived data names its source: a run whose history was copied from another session
carries a ``transcript_history_copied`` record naming the session, run and record it was
copied from, so the copies of a session's words held elsewhere can be listed (before a
purge, to decide; after it, to see what remains).

The runtime writes the record when a fork copies a transcript into another session (a
reference never crosses sessions, so the copy is the only way across); the store keeps it
as any record, strictly decoded when listed.
"""

from __future__ import annotations

import msgspec

from agentledger.errors import CorruptRecordError
from agentledger.storage.types import CopiedFrom, DerivedCopy, Record

__all__ = ["HISTORY_COPIED", "CopiedFrom", "DerivedCopy", "derived_copy"]

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
