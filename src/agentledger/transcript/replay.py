"""Rebuild a run's transcript from its log [R1]/[R2].

The runtime stores canonical messages as ordinary records:
``transcript_messages_seeded`` (messages that existed before the run) and
``transcript_messages_appended`` (messages accepted during it), each a JSON
array of messages. Replaying them in saved order gives the exact transcript
the provider saw; anything that cannot be decoded is reported, never skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agentledger.errors import CorruptRecordError, TranscriptError
from agentledger.storage.payloads import TRANSCRIPT_TYPES
from agentledger.storage.protocol import Store, VerifiedTranscripts
from agentledger.storage.types import Record
from agentledger.storage.validation import MAX_PAGE_LIMIT
from agentledger.transcript.codec import decode_messages, decode_verified_messages
from agentledger.transcript.messages import Message

__all__ = ["TRANSCRIPT_RECORD_TYPES", "build_messages_from_run_log", "replay_run_log_events"]

TRANSCRIPT_RECORD_TYPES = TRANSCRIPT_TYPES
"""The record types that carry transcript messages."""


def replay_run_log_events(records: Iterable[Record]) -> list[Message]:
    """[R2] The messages of loaded records, in saved order; other records are skipped.

    Raises:
        CorruptRecordError: a transcript record whose payload is not a message array.
    """
    messages: list[Message] = []
    for record in records:
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
    store: Store, run_id: str, *, pending: Sequence[Record] = ()
) -> list[Message]:
    """[R2] Read a run's whole log and replay its transcript.

    ``pending`` are records of the run not written yet (the caller writes them
    later, with what it decides): those whose event key the log does not hold
    are replayed after it, so the transcript is what the log will say.

    A store that declares :class:`~agentledger.storage.protocol.VerifiedTranscripts`
    (it verifies every record's checksum on read and validated every transcript
    record on write) hands over the transcript payloads of its log, checked as
    a listing would be, and already known to decode, so they skip the parts'
    invariant checks. Every other store is paged through ``list_run_records``
    and its records are decoded strictly; so is a verified one whose quick
    decode fails anyway (the strict path names the record), and one with owed
    transcript records, whose event keys must be compared with the log's.
    """
    owed = [record for record in pending if record.type in TRANSCRIPT_RECORD_TYPES]
    if not owed and isinstance(store, VerifiedTranscripts) and store.transcripts_verified:
        payloads = await store.verified_transcript_payloads(run_id)
        try:
            return decode_verified_messages(payloads)
        except TranscriptError:
            pass
    records: list[Record] = []
    cursor = ""
    while True:
        page = await store.list_run_records(run_id, cursor=cursor, limit=MAX_PAGE_LIMIT)
        records.extend(page.records)
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    stored = {record.event_key for record in records}
    return replay_run_log_events([*records, *(r for r in owed if r.event_key not in stored)])
