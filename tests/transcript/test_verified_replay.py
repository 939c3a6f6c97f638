"""Replay's verified decode path: taken only for checked, checksum-verified stored records."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentledger.errors import (
    CorruptRecordError,
    RunNotFoundError,
    TranscriptError,
    ValidationError,
)
from agentledger.storage import MemoryStore, RecordBuilder, RunStart
from agentledger.storage.integrity import record_checksum, run_seed
from agentledger.storage.payloads import TRANSCRIPT_APPENDED
from agentledger.storage.protocol import VerifiedTranscripts
from agentledger.storage.sqlite import SQLiteStore
from agentledger.transcript import (
    Message,
    TextPart,
    ToolUsePart,
    build_messages_from_run_log,
    decode_messages,
    encode_messages,
    replay_run_log_events,
)
from agentledger.transcript.codec import decode_verified_messages

from .strategies import message_lists

T0 = datetime(2026, 3, 1, tzinfo=UTC)
# Valid JSON of the right shape, but a tool call with an empty id: only the
# parts' invariant checks (``__post_init__``) refuse it.
INVARIANT_BROKEN = (
    b'[{"role":"assistant","parts":[{"kind":"tool_use","id":"","name":"t","input":{}}]}]'
)
GOOD = b'[{"role":"user","parts":[{"kind":"text","text":"hi"}]}]'


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(message_lists, max_size=4))
def test_the_verified_decode_equals_the_strict_one(transcripts: list[list[Message]]) -> None:
    """Over random transcripts both paths give equal values of the same types and bytes."""
    payloads = [encode_messages(transcript) for transcript in transcripts]
    strict = [message for payload in payloads for message in decode_messages(payload)]
    verified = decode_verified_messages(payloads)
    assert verified == strict
    assert repr(verified) == repr(strict)  # same classes all the way down
    assert encode_messages(verified) == encode_messages(strict)


def test_the_verified_decode_still_refuses_a_malformed_array() -> None:
    """msgspec's shape checks stay on: unknown keys, wrong types and tags are refused."""
    for bad in (b'[{"role":"user","parts":[],"x":1}]', b'[{"role":"user","parts":3}]', b"{}"):
        with pytest.raises(TranscriptError):
            decode_verified_messages([bad])


def _refusal(decode: Callable[[Any], object], payload: Any) -> tuple[object, ...]:
    with pytest.raises(TranscriptError) as caught:
        decode(payload)
    error = caught.value
    return (error.field, str(error), error.message_index, error.part_index, type(error.__cause__))


def test_the_verified_decode_refuses_what_the_strict_one_refuses_the_same_way() -> None:
    """Bytes go straight to msgspec, yet every refusal is the strict decode's own: the same
    field, message and cause, for a malformed array, input nested too deeply and input that
    is not bytes; and strict decoding still refuses what only the invariants catch."""
    deep = b"[" * 50_000 + b"]" * 50_000
    bad: list[Any] = [
        b'[{"role":"user","parts":[],"x":1}]',
        b'[{"role":"user","parts":[{"kind":"text"}]}]',
        b'[{"role":"user","parts":[]},{"role":"user","parts":[{"kind":"nope"}]}]',
        b"[" + deep + b"]",
        b'[{"role":"user","parts":[],"meta":{"a":' + deep + b"}}]",
        b"\xff",
        '[{"role":"user","parts":[]}]',
        bytearray(b'[{"role":"user","parts":3}]'),
    ]
    for payload in bad:
        strict = _refusal(decode_messages, payload)
        assert _refusal(lambda p: decode_verified_messages([GOOD, p]), payload) == strict
    assert _refusal(decode_messages, INVARIANT_BROKEN)[0] == "$[0].parts[0].id"


def test_the_verified_decode_takes_every_buffer_the_strict_one_takes() -> None:
    """bytearray and memoryview payloads decode as bytes do, in order, across payloads."""
    verified = decode_verified_messages([GOOD, bytearray(GOOD), memoryview(GOOD), b"[]"])
    assert verified == decode_messages(GOOD) * 3


def test_the_invariant_checks_are_back_on_after_a_verified_decode() -> None:
    """The skip is scoped to the decode call, also when the decode fails."""
    (skipped,) = decode_verified_messages([INVARIANT_BROKEN])  # the skip, inside the call
    assert skipped.parts[0].id == ""  # type: ignore[union-attr]
    with pytest.raises(TranscriptError):
        decode_verified_messages([b"[1]"])
    with pytest.raises(TranscriptError):
        ToolUsePart(id="", name="t", input={})
    with pytest.raises(TranscriptError):
        decode_messages(INVARIANT_BROKEN)


async def _sqlite_run(path: Path, messages: list[Message]) -> SQLiteStore:
    store = await SQLiteStore.open(path)
    await store.create_session("s", created_at=T0)
    run = RecordBuilder(RunStart(run_id="r", agent_id="a", session_id="s", started_at=T0))
    await store.start_root_run(run.root_start())
    for n, message in enumerate(messages):
        payload = encode_messages([message])
        await store.append_run_record(
            run.record(TRANSCRIPT_APPENDED, payload, event_key=f"m{n}", at=T0)
        )
    return store


def _scribble_valid_checksum(path: Path, seq: int, payload: bytes) -> None:
    """Rewrite one record's payload *and* its checksum, as a pre-check writer could have."""
    with sqlite3.connect(path) as conn:
        row = conn.execute(
            "SELECT run_id, agent_id, session_id, turn_id, event_key, type, timestamp "
            "FROM records WHERE seq = ?",
            (seq,),
        ).fetchone()
        run_id, agent_id, session_id, turn_id, event_key, type_, ms = row
        seed = run_seed(run_id, agent_id, session_id)
        checksum = record_checksum(seed, seq, turn_id, event_key, type_, ms, payload)
        conn.execute(
            "UPDATE records SET payload = ?, checksum = ? WHERE seq = ?", (payload, checksum, seq)
        )
    conn.close()


def _forget_transcript_check(path: Path) -> None:
    """Make the file look as it did before the transcripts_checked migration."""
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE unchecked_transcripts")
        conn.execute("DELETE FROM _agentledger_migrations WHERE name = 'transcripts_checked'")
    conn.close()


async def test_only_a_verifying_store_is_trusted(tmp_path: Path) -> None:
    """SQLiteStore verifies checksums and checked every transcript; others decode strictly."""
    messages = [Message(role="user", parts=(TextPart(text=f"m{n}"),)) for n in range(3)]
    store = await _sqlite_run(tmp_path / "a.db", messages)
    try:
        assert store.transcripts_verified
        assert await build_messages_from_run_log(store, "r") == messages
        page = await store.list_run_records("r")
        assert replay_run_log_events(page.records) == messages
    finally:
        await store.close()
    assert not isinstance(MemoryStore(), VerifiedTranscripts)
    read_only = await SQLiteStore.open_read_only(tmp_path / "a.db")
    try:
        assert not read_only.transcripts_verified
        assert await build_messages_from_run_log(read_only, "r") == messages
    finally:
        await read_only.close()


async def test_the_store_refuses_a_transcript_that_breaks_an_invariant(tmp_path: Path) -> None:
    """The check replay skips is made on write: the record is refused, nothing changes."""
    store = await _sqlite_run(tmp_path / "a.db", [])
    try:
        run = RecordBuilder(RunStart(run_id="r", agent_id="a", session_id="s", started_at=T0))
        good = run.record(TRANSCRIPT_APPENDED, encode_messages([]), event_key="ok", at=T0)
        bad = run.record(TRANSCRIPT_APPENDED, INVARIANT_BROKEN, event_key="bad", at=T0)
        with pytest.raises(ValidationError) as caught:
            await store.append_run_records([good, bad])
        assert caught.value.field == "records[1].payload[0].parts[0].id"
        assert len((await store.list_run_records("r")).records) == 1  # run_started only
    finally:
        await store.close()


async def test_a_damaged_record_is_caught_by_its_checksum_first(tmp_path: Path) -> None:
    """Bytes changed without their checksum never reach the verified decode."""
    path = tmp_path / "a.db"
    await (await _sqlite_run(path, [Message(role="user", parts=(TextPart(text="hi"),))])).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE records SET payload = ? WHERE seq = 2", (INVARIANT_BROKEN,))
    conn.close()
    store = await SQLiteStore.open(path)
    try:
        assert store.transcripts_verified
        with pytest.raises(CorruptRecordError, match="checksum"):
            await build_messages_from_run_log(store, "r")
    finally:
        await store.close()


async def test_a_database_with_unchecked_old_transcripts_replays_strictly(tmp_path: Path) -> None:
    """A record stored before the write check, which fails it, keeps replay strict.

    The migration finds it and lists it, so the store is not trusted and replay
    fails loudly naming the record. Were the listing lost (the second half),
    the verified path would be taken and would not re-check the invariant: the
    trust rests on the write check, which is why the migration exists.
    """
    path = tmp_path / "a.db"
    await (await _sqlite_run(path, [Message(role="user", parts=(TextPart(text="hi"),))])).close()
    _scribble_valid_checksum(path, 2, INVARIANT_BROKEN)
    _forget_transcript_check(path)
    store = await SQLiteStore.open(path)  # runs transcripts_checked again
    try:
        assert not store.transcripts_verified
        with pytest.raises(CorruptRecordError) as caught:
            await build_messages_from_run_log(store, "r")
        assert caught.value.record_id == "2"
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT run_id, seq FROM unchecked_transcripts").fetchall() == [
            ("r", 2)
        ]
        conn.execute("DELETE FROM unchecked_transcripts")
    conn.close()
    store = await SQLiteStore.open(path)
    try:
        assert store.transcripts_verified
        (message,) = await build_messages_from_run_log(store, "r")
        assert message.parts[0].id == ""  # type: ignore[union-attr]  # the skipped check
    finally:
        await store.close()


async def test_the_whole_log_read_gives_what_paging_gives(tmp_path: Path) -> None:
    """[R2] the verified read of a run's transcript equals paging ``list_run_records``:
    same payloads in the same order among other records, and the same refusals."""
    store = await _sqlite_run(tmp_path / "a.db", [])
    try:
        run = RecordBuilder(RunStart(run_id="r", agent_id="a", session_id="s", started_at=T0))
        records = [
            run.record(
                TRANSCRIPT_APPENDED if n % 3 else "planner_note",
                encode_messages([Message(role="user", parts=(TextPart(text=f"m{n}"),))])
                if n % 3
                else b'{"n": %d}' % n,
                event_key=f"k{n}",
                at=T0,
            )
            for n in range(1, 2500)  # more than two pages of MAX_PAGE_LIMIT
        ]
        await store.append_run_records(records)
        paged: list[bytes] = []
        cursor = ""
        while True:
            page = await store.list_run_records("r", cursor=cursor, limit=1000)
            paged.extend(r.payload for r in page.records if r.type == TRANSCRIPT_APPENDED)
            if not page.next_cursor:
                break
            cursor = page.next_cursor
        assert await store.verified_transcript_payloads("r") == paged
        assert len(paged) == sum(1 for n in range(1, 2500) if n % 3)
        messages = await build_messages_from_run_log(store, "r")
        assert messages == [m for p in paged for m in decode_messages(p)]
        for read in (store.list_run_records, store.verified_transcript_payloads):
            with pytest.raises(RunNotFoundError):
                await read("nobody")
            with pytest.raises(ValidationError):
                await read("")
    finally:
        await store.close()
