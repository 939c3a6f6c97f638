"""Conformance: ordinary records through ``append_run_record`` [L8] [X1].

A record is validated as given (identity, payload, timestamp), then against
the stored run (owner, status, event key). Exact retries return the original
id; any change is a conflict; bad input changes nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from msgspec.structs import replace

from agentledger.errors import (
    RecordConflictError,
    RecordOwnerMismatchError,
    RunNotActiveError,
    RunNotFoundError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._world import AdminStore, World
from agentledger.storage.conformance._world import run_log as _log
from agentledger.storage.types import Checkpoint, RunStatus, SessionStatus

__all__ = ["RecordConformance"]

_LIFECYCLE_PAYLOADS = {
    payloads.RUN_STARTED: b"{}",
    payloads.RUN_COMPLETED: b'{"status":"success","phase":"completed"}',
    payloads.RUN_SUSPENDED: (
        b'{"suspension_id":"cp","version":1,"pending_count":1,"required_tools":[]}'
    ),
    payloads.CHILD_RUN_LINKED: (
        b'{"tool_name":"t","tool_call_id":"c","child_run_id":"x","child_agent_id":"a"}'
    ),
    payloads.CANCELLATION_INTENT: b'{"reason":"user"}',
}


async def _stop(world: World, run: RecordBuilder, status: RunStatus) -> None:
    """End ``run`` through its lifecycle method so it reaches ``status``."""
    if status is RunStatus.SUSPENDED:
        await world.suspend(run)
        return
    reason = ""
    if status is RunStatus.CANCELED:
        reason = "user_requested"
        await world.store.record_run_cancellation(run.cancellation(reason, at=world.now()))
    await world.store.record_run_terminal(run.terminal(status, at=world.now(), reason=reason))


class RecordConformance(ConformanceBase):
    """Capability: ordinary records, validation, retries and conflicts."""

    # ------------------------------------------------------------------ storing

    async def test_record_ids_are_a_decimal_sequence_per_run(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[L8] ids are "1", "2", ... per run, independent of other runs' appends."""
        sid = await world.session("s")
        a = await world.root("a", session=sid)
        b = await world.root("b", session=sid)
        got = [
            (await world.store.append_run_record(world.note(a, "a1"))).id,
            (await world.store.append_run_record(world.note(b, "b1"))).id,
            (await world.store.append_run_record(world.note(a, "a2"))).id,
            (await world.store.append_run_record(world.note(a, "a3"))).id,
            (await world.store.append_run_record(world.note(b, "b2"))).id,
        ]
        assert got == ["2", "2", "3", "4", "3"]
        log_a = await _log(other_store, a.run.run_id)
        assert [(r.id, r.event_key) for r in log_a] == [
            ("1", "run_started"),
            ("2", "a1"),
            ("3", "a2"),
            ("4", "a3"),
        ]
        log_b = await _log(other_store, b.run.run_id)
        assert [(r.id, r.event_key) for r in log_b] == [
            ("1", "run_started"),
            ("2", "b1"),
            ("3", "b2"),
        ]

    @pytest.mark.parametrize(
        "payload",
        [
            b'{"b":1,  "a":2}',
            b" [1, 2.50, 1e3, 12345678901234567890] \n",
            b'"caf\xc3\xa9 e\\u0301 \xf0\x9f\x99\x82"',
            b"42",
            b'{"nested":{"z":null,"a":[true,false]}}',
            b'{"ctl":"\\u0000\\n\\t","rep":"\\ufffd","slash":"\\/"}',
        ],
    )
    async def test_record_payload_is_stored_byte_for_byte(
        self, world: World, other_store: AdminStore, payload: bytes
    ) -> None:
        """[L8] a payload comes back byte-exact: spacing, key order, numbers, escapes."""
        sid = await world.session("s")
        run = await world.root("r", session=sid, turn_id="turn-1")
        record = run.record("tool_result", payload, event_key="k", at=world.now())
        result = await world.store.append_run_record(record)
        assert (result.id, result.inserted) == ("2", True)
        log = await _log(other_store, run.run.run_id)
        assert log[1] == replace(record, id="2")
        assert log[1].payload == payload
        assert log[1].turn_id == "turn-1"

    async def test_record_same_event_key_on_two_runs_is_two_records(self, world: World) -> None:
        """[L8] ``(run_id, event_key)`` is the unique identity, not the key alone."""
        sid = await world.session("s")
        a = await world.root("a", session=sid)
        b = await world.root("b", session=sid)
        ra = await world.store.append_run_record(world.note(a, "same"))
        rb = await world.store.append_run_record(world.note(b, "same"))
        assert (ra.inserted, rb.inserted) == (True, True)
        assert [r.event_key for r in await _log(world.store, b.run.run_id)] == [
            "run_started",
            "same",
        ]

    # ------------------------------------------------------------ validation

    @pytest.mark.parametrize("field", ["run_id", "agent_id", "event_key", "type"])
    async def test_record_identity_fields_are_required(self, world: World, field: str) -> None:
        """[L8] run id, agent id, event key and type must be non-empty strings."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        bad = replace(world.note(run, "k"), **{field: ""})
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.append_run_record(bad)
        assert info.value.field == f"record.{field}"
        assert info.value.got == ""

    @pytest.mark.parametrize("field", ["event_key", "type"])
    @pytest.mark.parametrize("value", ["a\x00b", "line\nbreak", "lone\ud800", "k" * 513])
    async def test_record_ids_must_be_printable_and_bounded(
        self, world: World, field: str, value: str
    ) -> None:
        """[L8] ids, keys and types are printable text of bounded length, on every backend."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        bad = replace(world.note(run, "k"), **{field: value})
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.append_run_record(bad)
        assert info.value.field == f"record.{field}"

    @pytest.mark.parametrize("value", ["t\x00", "lone\ud800", "\udfff-tail", "t" * 513])
    async def test_record_turn_ids_must_be_storable(self, world: World, value: str) -> None:
        """[L8] a turn id may be any text every backend can store: no NUL, no lone
        surrogate, bounded length."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        bad = replace(world.note(run, "k"), turn_id=value)
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.append_run_record(bad)
        assert info.value.field == "record.turn_id"

    @pytest.mark.parametrize("value", ["s\x00", "tab\tbed", "\udfff"])
    async def test_record_session_ids_must_be_printable(self, world: World, value: str) -> None:
        """[D4] a session id that no backend could store or page is refused up front."""
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.create_session(world.id(value), created_at=world.now())
        assert info.value.field == "session_id"

    @pytest.mark.parametrize("field", ["session_id", "turn_id"])
    async def test_record_session_and_turn_must_be_strings(self, world: World, field: str) -> None:
        """[L8] session and turn ids may be "" but must be strings."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        bad = replace(world.note(run, "k"), **{field: None})
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.append_run_record(bad)
        assert info.value.field == f"record.{field}"

    @pytest.mark.parametrize("payload", [b"", "{}", None])
    async def test_record_payload_must_be_non_empty_bytes(
        self, world: World, payload: object
    ) -> None:
        """[L8] an empty, missing or non-bytes payload is refused."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        bad = replace(world.note(run, "k"), payload=payload)
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.append_run_record(bad)
        assert info.value.field == "record.payload"

    @pytest.mark.parametrize(
        "payload",
        [b'"\xff"', b'"\xe2\x82"', b'"\xc0\xaf"', b'{"a":"\xed\xa0\x80"}', b"\xfe{}"],
        ids=["invalid-byte", "truncated", "overlong", "surrogate", "leading-garbage"],
    )
    async def test_record_payload_must_be_valid_utf8(self, world: World, payload: bytes) -> None:
        """[L8] a payload with invalid UTF-8 is refused before anything is written."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        bad = run.record("note", payload, event_key="k", at=world.now())
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.append_run_record(bad)
        assert info.value.field == "record.payload"
        assert info.value.expected == "valid UTF-8"

    @pytest.mark.parametrize(
        "payload",
        [b"{} {}", b'{"a":1}{"a":1}', b"1 2", b"not json", b"   ", b'{"a":', b"[1,]"],
    )
    async def test_record_payload_must_be_exactly_one_json_value(
        self, world: World, payload: bytes
    ) -> None:
        """[L8] a payload is exactly one JSON value: no trailing value, no garbage."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        bad = run.record("note", payload, event_key="k", at=world.now())
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.append_run_record(bad)
        assert info.value.field == "record.payload"
        assert info.value.expected == "exactly one JSON value"

    @pytest.mark.parametrize(
        "timestamp",
        [None, "2026-01-01T00:00:00Z", datetime(2026, 1, 1, 0, 0, 1)],
        ids=["missing", "string", "naive"],
    )
    async def test_record_timestamp_is_required_and_timezone_aware(
        self, world: World, timestamp: Any
    ) -> None:
        """[L8] a record needs a timezone-aware datetime."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        bad = replace(world.note(run, "k"), timestamp=timestamp)
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.append_run_record(bad)
        assert info.value.field == "record.timestamp"

    @pytest.mark.parametrize("micros", [1, 999, 1500, 999_999])
    async def test_record_timestamp_finer_than_milliseconds_is_refused(
        self, world: World, micros: int
    ) -> None:
        """[L8] timestamps have millisecond precision; microseconds are an error."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        at = datetime(2026, 1, 1, 12, 0, 0, micros, tzinfo=UTC)
        bad = run.record("note", b"{}", event_key="k", at=at)
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.append_run_record(bad)
        assert info.value.field == "record.timestamp"
        assert info.value.expected == "millisecond precision"

    @pytest.mark.parametrize("hours", [2, -5])
    async def test_record_timestamp_with_non_utc_offset_is_refused(
        self, world: World, hours: int
    ) -> None:
        """[L8] a timestamp in another offset is refused, even for the same instant."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        at = world.now().astimezone(timezone(timedelta(hours=hours)))
        bad = run.record("note", b"{}", event_key="k", at=at)
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.append_run_record(bad)
        assert info.value.field == "record.timestamp"

    async def test_record_zero_offset_timezone_is_utc(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[L8] [X1] a zero-offset zone is UTC: stored as UTC, and retrying with UTC is exact."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        utc_at = world.now()
        zero = timezone(timedelta(0), "Z0")
        record = run.record("note", b"{}", event_key="k", at=utc_at.astimezone(zero))
        first = await world.store.append_run_record(record)
        assert first.inserted
        stored = (await _log(other_store, run.run.run_id))[1]
        assert stored.timestamp == utc_at
        assert stored.timestamp.utcoffset() == timedelta(0)
        retry = await world.store.append_run_record(replace(record, timestamp=utc_at))
        assert (retry.id, retry.inserted) == (first.id, False)

    @pytest.mark.parametrize("given_id", ["7", "2", "0"])
    async def test_record_id_must_be_empty_on_input(self, world: World, given_id: str) -> None:
        """[L8] ids are assigned by the store; a record arriving with one is refused."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        bad = replace(world.note(run, "k"), id=given_id)
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.append_run_record(bad)
        assert info.value.field == "record.id"
        assert info.value.got == given_id

    async def test_record_owner_must_match_stored_run(self, world: World) -> None:
        """[L8] a record naming another agent or session than its run is refused."""
        sid = await world.session("s")
        other = await world.session("other")
        run = await world.root("r", session=sid, agent="planner")
        cases = [
            (
                "agent_id",
                replace(world.note(run, "k1"), agent_id="intruder"),
                "planner",
                "intruder",
            ),
            ("session_id", replace(world.note(run, "k2"), session_id=other), sid, other),
            ("session_id", replace(world.note(run, "k3"), session_id=""), sid, ""),
        ]
        for field, bad, expected, got in cases:
            async with world.unchanged():
                with pytest.raises(RecordOwnerMismatchError) as info:
                    await world.store.append_run_record(bad)
            assert (info.value.run_id, info.value.field) == (run.run.run_id, field)
            assert (info.value.expected, info.value.got) == (expected, got)

    async def test_record_sessionless_run_refuses_a_session_id(self, world: World) -> None:
        """[L8] a one-shot run's records name no session."""
        sid = await world.session("s")
        run = await world.one_shot("r")
        bad = replace(world.note(run, "k"), session_id=sid)
        async with world.unchanged():
            with pytest.raises(RecordOwnerMismatchError) as info:
                await world.store.append_run_record(bad)
        assert (info.value.field, info.value.expected, info.value.got) == ("session_id", "", sid)

    @pytest.mark.parametrize("record_type", sorted(_LIFECYCLE_PAYLOADS))
    async def test_record_lifecycle_types_are_refused(self, world: World, record_type: str) -> None:
        """[L8] lifecycle records go through their own methods, never through append."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        bad = run.record(
            record_type, _LIFECYCLE_PAYLOADS[record_type], event_key="forged", at=world.now()
        )
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.append_run_record(bad)
        assert (info.value.field, info.value.got) == ("record.type", record_type)
        meta = await world.store.load_run(run.run.run_id)
        assert meta.status is RunStatus.RUNNING

    async def test_record_unknown_run_is_not_found(self, world: World) -> None:
        """[L8] appending to a run that was never started is RunNotFoundError."""
        sid = await world.session("s")
        ghost = world.run("ghost", session=sid)
        async with world.unchanged():
            with pytest.raises(RunNotFoundError) as info:
                await world.store.append_run_record(world.note(ghost, "k"))
        assert info.value.run_id == ghost.run.run_id

    # --------------------------------------------------------- retries/conflicts

    async def test_record_exact_retry_returns_original_id(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[X1] an exact repeat succeeds with the original id, inserted=False, writing nothing."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        record = world.note(run, "k", b'{"x": 1}')
        first = await world.store.append_run_record(record)
        await world.store.append_run_record(world.note(run, "later"))
        async with world.unchanged():
            retry = await world.store.append_run_record(record)
            again = await other_store.append_run_record(record)
        assert (first.id, first.inserted) == ("2", True)
        assert (retry.id, retry.inserted) == ("2", False)
        assert (again.id, again.inserted) == ("2", False)
        assert retry.session_status is SessionStatus.ACTIVE

    @pytest.mark.parametrize(
        ("field", "change"),
        [
            ("payload", {"payload": b'{"x":1}'}),
            ("type", {"type": "planner_thought"}),
            ("turn_id", {"turn_id": "turn-2"}),
            ("timestamp", {"timestamp": datetime(2027, 1, 1, tzinfo=UTC)}),
        ],
    )
    async def test_record_changed_retry_is_a_conflict(
        self, world: World, field: str, change: dict[str, Any]
    ) -> None:
        """[X1] [X3] the same event key with other bytes, type, turn or time is a conflict."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        record = world.note(run, "k", b'{"x": 1}')
        await world.store.append_run_record(record)
        changed = replace(record, **change)
        async with world.unchanged():
            with pytest.raises(RecordConflictError) as info:
                await world.store.append_run_record(changed)
        assert (info.value.run_id, info.value.field) == (run.run.run_id, f"record.{field}")
        assert info.value.expected == getattr(record, field)
        assert info.value.got == getattr(changed, field)

    async def test_record_cannot_take_a_lifecycle_key(self, world: World) -> None:
        """[X3] the key of the run's ``run_started`` is taken; reusing it is a conflict."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        async with world.unchanged():
            with pytest.raises(RecordConflictError) as info:
                await world.store.append_run_record(world.note(run, "run_started"))
        assert info.value.field == "record.type"
        assert info.value.expected == payloads.RUN_STARTED

    @pytest.mark.parametrize(
        "status",
        [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED, RunStatus.SUSPENDED],
    )
    async def test_record_stopped_run_takes_only_exact_retries(
        self, world: World, status: RunStatus
    ) -> None:
        """[L8] [X1] a run that stopped refuses new records but still answers exact retries."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        record = world.note(run, "before")
        first = await world.store.append_run_record(record)
        await _stop(world, run, status)
        async with world.unchanged():
            retry = await world.store.append_run_record(record)
        assert (retry.id, retry.inserted) == (first.id, False)
        async with world.unchanged():
            with pytest.raises(RunNotActiveError) as info:
                await world.store.append_run_record(world.note(run, "late"))
        assert (info.value.run_id, info.value.expected) == (run.run.run_id, "running")
        assert info.value.got == status.value

    async def test_record_changed_retry_on_stopped_run_is_a_conflict(self, world: World) -> None:
        """[X3] a stopped run still refuses a changed retry as a conflict, never an overwrite."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        record = world.note(run, "k")
        await world.store.append_run_record(record)
        await world.finish(run)
        async with world.unchanged():
            with pytest.raises(RecordConflictError) as info:
                await world.store.append_run_record(replace(record, payload=b'{"note":false}'))
        assert info.value.field == "record.payload"

    # -------------------------------------------------------- session status

    async def test_record_reports_active_session(self, world: World) -> None:
        """[L8] ``AppendResult.session_status`` is the session's current status."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        result = await world.store.append_run_record(world.note(run, "k"))
        assert result.session_status is SessionStatus.ACTIVE

    async def test_record_running_run_may_append_after_session_ended(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[D2] a run already going may still write after its session ended; status says ended."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.end_session(sid, ended_at=world.now())
        result = await world.store.append_run_record(world.note(run, "k"))
        assert (result.id, result.inserted) == ("2", True)
        assert result.session_status is SessionStatus.ENDED
        log = await _log(other_store, run.run.run_id)
        assert [r.event_key for r in log] == ["run_started", "k"]

    async def test_record_sessionless_run_reports_no_session_status(self, world: World) -> None:
        """[L8] a one-shot run has no session, so ``session_status`` is None."""
        run = await world.one_shot("r")
        result = await world.store.append_run_record(world.note(run, "k"))
        assert (result.id, result.inserted, result.session_status) == ("2", True, None)
        retry = await world.store.append_run_record(world.note(run, "k2"))
        assert retry.session_status is None

    async def test_record_suspended_checkpoint_is_untouched_by_retries(self, world: World) -> None:
        """[L8] [X1] retrying an earlier record on a suspended run keeps its checkpoint."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        record = world.note(run, "k")
        await world.store.append_run_record(record)
        checkpoint = await world.suspend(run, "cp-1")
        await world.store.append_run_record(record)
        assert await world.store.load_run_suspension(run.run.run_id) == Checkpoint(
            id="cp-1", data=checkpoint.data
        )
