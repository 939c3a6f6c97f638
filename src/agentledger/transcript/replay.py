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
from agentledger.storage.integrity import verified_transcripts
from agentledger.storage.payloads import TRANSCRIPT_TYPES
from agentledger.storage.protocol import Store
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
    """[R2] Page through a run's records and replay its transcript.

    ``pending`` are records of the run not written yet (the caller writes them
    later, with what it decides): those whose event key the log does not hold
    are replayed after it, so the transcript is what the log will say.

    A store that verifies every record's checksum on read and validated every
    transcript record on write (:func:`~agentledger.storage.integrity.verified_transcripts`)
    returns bytes already known to decode, so they skip the parts' invariant
    checks; every other store's records are decoded strictly.
    """
    records: list[Record] = []
    cursor = ""
    while True:
        page = await store.list_run_records(run_id, cursor=cursor, limit=MAX_PAGE_LIMIT)
        records.extend(page.records)
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    if pending:
        stored = {record.event_key for record in records}
        unwritten = [record for record in pending if record.event_key not in stored]
        return [*_replay_stored(store, records), *replay_run_log_events(unwritten)]
    return _replay_stored(store, records)


def _replay_stored(store: Store, records: list[Record]) -> list[Message]:
    if not verified_transcripts(store):
        return replay_run_log_events(records)
    try:
        return decode_verified_messages(
            [record.payload for record in records if record.type in TRANSCRIPT_RECORD_TYPES]
        )
    except TranscriptError:
        return replay_run_log_events(records)  # raises, naming the record
