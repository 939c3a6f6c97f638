"""Transcript replay from the run log [R1]/[R2]."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from agentledger.errors import CorruptRecordError, ValidationError
from agentledger.storage import MemoryStore, RecordBuilder, RunStart
from agentledger.storage.payloads import PROMPT_RENDERED, TRANSCRIPT_APPENDED, TRANSCRIPT_SEEDED
from agentledger.transcript import (
    Message,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    build_messages_from_run_log,
    encode_messages,
    replay_run_log_events,
)

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _at(n: int) -> datetime:
    return T0 + timedelta(milliseconds=n)


def _user(text: str) -> Message:
    return Message(role="user", parts=(TextPart(text=text),))


async def _run() -> tuple[MemoryStore, RecordBuilder]:
    store = MemoryStore()
    await store.create_session("s", created_at=T0)
    run = RecordBuilder(RunStart(run_id="r", agent_id="chat", session_id="s", started_at=T0))
    await store.start_root_run(run.root_start())
    return store, run


async def test_replay_keeps_saved_order_and_skips_other_records() -> None:
    """[R1] [R2] seeded then appended messages come back in saved order, exactly."""
    store, run = await _run()
    seeded = [_user("earlier question"), Message(role="assistant", parts=(TextPart(text="a"),))]
    call = Message(
        role="assistant",
        parts=(ToolUsePart(id="t1", name="search", input={"q": "x", "n": 12345678901234567890}),),
    )
    result = Message(role="user", parts=(ToolResultPart(tool_use_id="t1", content=[1, "two"]),))
    answer = Message(role="assistant", parts=(TextPart(text="done"),))
    writes = [
        (TRANSCRIPT_SEEDED, encode_messages(seeded)),
        (PROMPT_RENDERED, b'{"prompt_id":"chat.system","version":"3"}'),
        (TRANSCRIPT_APPENDED, encode_messages([_user("new question"), call])),
        ("planner_note", b'{"note":"thinking about it"}'),
        (TRANSCRIPT_APPENDED, encode_messages([result, answer])),
    ]
    for n, (kind, payload) in enumerate(writes):
        await store.append_run_record(run.record(kind, payload, event_key=f"e{n}", at=_at(n + 1)))
    expected = [*seeded, _user("new question"), call, result, answer]
    assert await build_messages_from_run_log(store, "r") == expected
    page = await store.list_run_records("r", limit=1000)
    assert replay_run_log_events(page.records) == expected


async def test_replay_pages_through_long_logs() -> None:
    """[R2] build_messages_from_run_log follows every page, not just the first."""
    store, run = await _run()
    for n in range(1205):
        payload = encode_messages([_user(f"m{n}")])
        await store.append_run_record(
            run.record(TRANSCRIPT_APPENDED, payload, event_key=f"m{n}", at=_at(n + 1))
        )
    messages = await build_messages_from_run_log(store, "r")
    assert messages == [_user(f"m{n}") for n in range(1205)]


async def test_a_store_refuses_a_transcript_record_it_could_not_replay() -> None:
    """[R1] a transcript payload that is not a valid message array is refused on write."""
    store, run = await _run()
    bad = b'[{"role":"user","parts":[],"x":1}]'
    with pytest.raises(ValidationError) as caught:
        await store.append_run_record(
            run.record(TRANSCRIPT_APPENDED, bad, event_key="b", at=_at(1))
        )
    assert caught.value.field == "record.payload[0].x"
    assert len((await store.list_run_records("r")).records) == 1  # run_started only


def test_replay_fails_loudly_on_a_record_it_cannot_decode() -> None:
    """[R2] a transcript record that is not a message array is corruption, never skipped."""
    run = RecordBuilder(RunStart(run_id="r", agent_id="chat", session_id="s", started_at=T0))
    good = encode_messages([_user("ok")])
    bad = b'[{"role":"user","parts":[],"x":1}]'
    records = [
        msgspec.structs.replace(
            run.record(TRANSCRIPT_APPENDED, good, event_key="a", at=_at(1)), id="2"
        ),
        msgspec.structs.replace(
            run.record(TRANSCRIPT_APPENDED, bad, event_key="b", at=_at(2)), id="3"
        ),
    ]
    with pytest.raises(CorruptRecordError) as caught:
        replay_run_log_events(records)
    assert caught.value.run_id == "r"
    assert caught.value.record_id == "3"
    assert TRANSCRIPT_APPENDED in caught.value.reason
