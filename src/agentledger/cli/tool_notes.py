"""What the CLI says about tool calls beyond the transcript: effect classes, calls in doubt,
and the host's answers to them, read from a run's records and checkpoint."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentledger.storage.protocol import AdminStore
    from agentledger.storage.types import Record

__all__ = ["call_notes"]


def _decode(record: Record, kind: type) -> object:
    from agentledger.runtime.records import decode_payload

    return decode_payload(record, kind)


async def call_notes(store: AdminStore, run_id: str) -> dict[str, list[str]]:
    """Notes on the tool calls of ``run_id``, by call id, in the order they happened:
    its effect class unless ``retry``, ``in doubt`` while the run waits for a decision on
    it (``was in doubt`` once a continuation took the decision), and each answer with who
    gave it. The checkpoint is read only for a run that started or answered a once call
    (a run in doubt always did): other writers may keep checkpoints of their own.

    Raises:
        CorruptRecordError: a record or the checkpoint does not decode.
    """
    from agentledger.errors import CorruptRecordError, ValidationError
    from agentledger.runtime import records as rt
    from agentledger.runtime.checkpoint import RunCheckpoint
    from agentledger.storage.types import RunStatus

    notes: dict[str, list[str]] = {}
    once = False  # a run with no once call started or answered asks about none
    cursor = ""
    while True:
        page = await store.list_run_records(run_id, cursor=cursor, limit=1000)
        for record in page.records:
            if record.type == rt.TOOL_CALL_SCHEDULED:
                call = _decode(record, rt.ToolScheduledPayload)
                assert isinstance(call, rt.ToolScheduledPayload)
                if call.effect != "retry":
                    notes.setdefault(call.tool_call_id, []).append(call.effect)
            elif record.type == rt.TOOL_CALL_STARTED:
                once = True
            elif record.type == rt.TOOL_CALL_ANSWERED:
                once = True
                said = _decode(record, rt.ToolAnsweredPayload)
                assert isinstance(said, rt.ToolAnsweredPayload)
                text = f"answered {said.decision} by {said.by or 'the host'}"
                if said.decision == "failed":
                    text += f": {said.reason}"
                notes.setdefault(said.tool_call_id, []).append(text)
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    meta = await store.load_run(run_id)
    if once and meta.status is RunStatus.SUSPENDED:
        stored = await store.load_run_suspension(run_id)
        try:
            checkpoint = RunCheckpoint.decode(stored.data)
        except ValidationError as e:
            raise CorruptRecordError(run_id=run_id, record_id="", reason=f"checkpoint: {e}") from e
        was = "was in doubt" if meta.successor_run_id else "in doubt"  # answered since
        for doubt in checkpoint.in_doubt:
            notes.setdefault(doubt.tool_call_id, []).append(
                f"{was} (attempt {doubt.attempt}, key {doubt.key})"
            )
    return notes
