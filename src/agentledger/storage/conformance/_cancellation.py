"""Conformance: cancellation requests and their provenance [L5] [C1] [C2] [C3] [X2] [X3].

The first reason is permanent and written with its intent record; the later
canceled ``run_completed`` must repeat it, or say ``engine_canceled`` when no
request was recorded. A start on an ended session stops with
``session_ended``. Each of the three stories reads back exactly as stored.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from msgspec.structs import replace

from agentledger.errors import (
    RecordConflictError,
    RecordOwnerMismatchError,
    RunCancellationConflictError,
    RunNotActiveError,
    RunNotFoundError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._world import AdminStore, World
from agentledger.storage.conformance._world import run_log as _log
from agentledger.storage.types import (
    RunStatus,
    RunTerminal,
    SessionStatus,
    StartOutcome,
)

__all__ = ["CancellationConformance"]

REASON = "user_requested"


def _canceled(world: World, run: RecordBuilder, reason: str) -> RunTerminal:
    """A canceled terminal whose ``run_completed`` says ``reason``."""
    return run.terminal(RunStatus.CANCELED, at=world.now(), reason=reason)


class CancellationConformance(ConformanceBase):
    """Capability: cancellation requests, conflicts and provenance."""

    # -------------------------------------------------------------- recording

    async def test_cancel_first_request_stores_reason_and_intent(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[L5] [C1] the reason lands in RunMeta with its intent record, in one operation."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = run.cancellation(REASON, at=world.now())
        result = await world.store.record_run_cancellation(cmd)
        assert (result.id, result.inserted, result.session_status) == (
            "2",
            True,
            SessionStatus.ACTIVE,
        )
        meta = await other_store.load_run(run.run.run_id)
        assert meta.cancellation_reason == REASON
        assert meta.status is RunStatus.RUNNING
        assert meta.updated_at == cmd.record.timestamp
        log = await _log(other_store, run.run.run_id)
        assert log[-1] == replace(cmd.record, id="2")
        assert payloads.CancellationIntent.decode(log[-1].payload).reason == REASON

    async def test_cancel_request_does_not_stop_the_run(self, world: World) -> None:
        """[L5] a recorded request leaves the run running until its terminal is written."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.record_run_cancellation(run.cancellation(REASON, at=world.now()))
        note = await world.store.append_run_record(world.note(run, "after"))
        assert (note.id, note.inserted) == ("3", True)
        done = await world.store.record_run_terminal(_canceled(world, run, REASON))
        assert done.id == "4"
        meta = await world.store.load_run(run.run.run_id)
        assert (meta.status, meta.cancellation_reason) == (RunStatus.CANCELED, REASON)

    async def test_cancel_exact_retry_returns_original_id(self, world: World) -> None:
        """[X1] repeating the accepted request returns its id with inserted=False."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = run.cancellation(REASON, at=world.now())
        first = await world.store.record_run_cancellation(cmd)
        await world.store.append_run_record(world.note(run, "between"))
        async with world.unchanged():
            retry = await world.store.record_run_cancellation(cmd)
        assert (retry.id, retry.inserted) == (first.id, False)

    async def test_cancel_exact_retry_succeeds_after_the_run_ended(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[X1] a late retry of the request still returns its id once the run is canceled."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = run.cancellation(REASON, at=world.now())
        first = await world.store.record_run_cancellation(cmd)
        await world.store.record_run_terminal(_canceled(world, run, REASON))
        async with world.unchanged():
            retry = await other_store.record_run_cancellation(cmd)
        assert (retry.id, retry.inserted) == (first.id, False)

    async def test_cancel_request_on_ended_session_is_allowed(self, world: World) -> None:
        """[D2] [L5] a run still going after its session ended may still record a request."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.end_session(sid, ended_at=world.now())
        result = await world.store.record_run_cancellation(run.cancellation(REASON, at=world.now()))
        assert (result.inserted, result.session_status) == (True, SessionStatus.ENDED)

    async def test_cancel_sessionless_request_reports_no_session(self, world: World) -> None:
        """[L5] a one-shot run's request reports ``session_status`` None."""
        run = await world.one_shot("r")
        result = await world.store.record_run_cancellation(run.cancellation(REASON, at=world.now()))
        assert (result.id, result.inserted, result.session_status) == ("2", True, None)

    # -------------------------------------------------------------- conflicts

    async def test_cancel_first_reason_is_permanent(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[X3] [L5] a second request with another reason is a conflict; the first stays."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.record_run_cancellation(run.cancellation(REASON, at=world.now()))
        second = run.cancellation("timeout", at=world.now(), event_key="cancel-2")
        async with world.unchanged():
            with pytest.raises(RunCancellationConflictError) as info:
                await world.store.record_run_cancellation(second)
        err = info.value
        assert (err.run_id, err.field) == (run.run.run_id, "cancellation_reason")
        assert (err.expected, err.got) == (REASON, "timeout")
        assert (await other_store.load_run(run.run.run_id)).cancellation_reason == REASON

    async def test_cancel_other_reason_conflicts_even_with_the_same_key(self, world: World) -> None:
        """[X3] reusing the first request's key with another reason is still a conflict."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.record_run_cancellation(run.cancellation(REASON, at=world.now()))
        await world.store.record_run_terminal(_canceled(world, run, REASON))
        async with world.unchanged():
            with pytest.raises(RunCancellationConflictError) as info:
                await world.store.record_run_cancellation(run.cancellation("other", at=world.now()))
        assert (info.value.expected, info.value.got) == (REASON, "other")

    async def test_cancel_same_reason_with_another_key_conflicts(self, world: World) -> None:
        """[X2] the request's record is the one chosen first; another key is a conflict."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        first = run.cancellation(REASON, at=world.now())
        await world.store.record_run_cancellation(first)
        other = run.cancellation(REASON, at=first.record.timestamp, event_key="cancel-again")
        async with world.unchanged():
            with pytest.raises(RunCancellationConflictError) as info:
                await world.store.record_run_cancellation(other)
        err = info.value
        assert (err.field, err.expected, err.got) == (
            "record.event_key",
            "cancellation_intent",
            "cancel-again",
        )

    @pytest.mark.parametrize("field", ["timestamp", "payload", "turn_id"])
    async def test_cancel_same_key_with_changed_record_conflicts(
        self, world: World, field: str
    ) -> None:
        """[X1] [X3] same reason and key but another time, payload spelling or turn conflicts."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = run.cancellation(REASON, at=world.now())
        await world.store.record_run_cancellation(cmd)
        change: dict[str, object] = {
            "timestamp": cmd.record.timestamp + timedelta(milliseconds=1),
            "payload": b'{ "reason": "' + REASON.encode() + b'" }',
            "turn_id": "turn-9",
        }
        changed = replace(cmd, record=replace(cmd.record, **{field: change[field]}))
        async with world.unchanged():
            with pytest.raises(RunCancellationConflictError) as info:
                await world.store.record_run_cancellation(changed)
        assert info.value.field == f"record.{field}"
        assert info.value.expected == getattr(cmd.record, field)
        assert info.value.got == change[field]

    async def test_cancel_intent_key_taken_by_an_ordinary_record_conflicts(
        self, world: World
    ) -> None:
        """[X3] the intent record cannot take a key another record already holds."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.append_run_record(world.note(run, "taken"))
        async with world.unchanged():
            with pytest.raises(RecordConflictError) as info:
                await world.store.record_run_cancellation(
                    run.cancellation(REASON, at=world.now(), event_key="taken")
                )
        assert info.value.got == "taken"

    # ------------------------------------------------------------- validation

    async def test_cancel_intent_payload_must_repeat_the_reason(self, world: World) -> None:
        """[L5] the intent record's ``reason`` must equal the command's."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = run.cancellation(REASON, at=world.now())
        bad = replace(cmd, record=replace(cmd.record, payload=b'{"reason":"timeout"}'))
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_cancellation(bad)
        assert (info.value.field, info.value.got) == ("record.payload.reason", "timeout")

    @pytest.mark.parametrize("reason", [payloads.SESSION_ENDED, payloads.ENGINE_CANCELED, ""])
    async def test_cancel_reserved_or_empty_reason_is_refused(
        self, world: World, reason: str
    ) -> None:
        """[C2] [C3] ``session_ended`` and ``engine_canceled`` are the store's; "" is no reason."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_cancellation(run.cancellation(reason, at=world.now()))
        assert (info.value.field, info.value.got) == ("reason", reason)

    async def test_cancel_intent_record_must_have_the_intent_type(self, world: World) -> None:
        """[L5] the request's record is a ``runtime.cancellation_intent``."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = run.cancellation(REASON, at=world.now())
        bad = replace(cmd, record=replace(cmd.record, type="planner_note"))
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_cancellation(bad)
        assert (info.value.field, info.value.expected) == (
            "record.type",
            payloads.CANCELLATION_INTENT,
        )

    async def test_cancel_intent_record_must_belong_to_the_run(self, world: World) -> None:
        """[L8] the intent record names the run's agent and the command's run."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        other = await world.root("o", session=sid)
        cmd = run.cancellation(REASON, at=world.now())
        wrong_agent = replace(cmd, record=replace(cmd.record, agent_id="intruder"))
        wrong_run = replace(cmd, run_id=other.run.run_id)
        async with world.unchanged():
            with pytest.raises(RecordOwnerMismatchError) as info:
                await world.store.record_run_cancellation(wrong_agent)
            assert (info.value.field, info.value.got) == ("agent_id", "intruder")
            with pytest.raises(RecordOwnerMismatchError) as info:
                await world.store.record_run_cancellation(wrong_run)
            assert (info.value.run_id, info.value.field) == (other.run.run_id, "run_id")
            assert info.value.got == run.run.run_id

    async def test_cancel_run_id_is_required(self, world: World) -> None:
        """[L5] a RunCancellation without a run id is a ValidationError."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        cmd = replace(run.cancellation(REASON, at=world.now()), run_id="")
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_cancellation(cmd)
        assert (info.value.field, info.value.got) == ("run_id", "")

    async def test_cancel_unknown_run_is_not_found(self, world: World) -> None:
        """[L5] a request for a run that was never started is RunNotFoundError."""
        sid = await world.session("s")
        ghost = world.run("ghost", session=sid)
        async with world.unchanged():
            with pytest.raises(RunNotFoundError) as info:
                await world.store.record_run_cancellation(
                    ghost.cancellation(REASON, at=world.now())
                )
        assert info.value.run_id == ghost.run.run_id

    @pytest.mark.parametrize(
        "status",
        [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED, RunStatus.SUSPENDED],
    )
    async def test_cancel_request_on_a_finished_run_is_refused(
        self, world: World, status: RunStatus
    ) -> None:
        """[L5] only a running run takes a new request; a stopped one gives RunNotActiveError."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        if status is RunStatus.SUSPENDED:
            await world.suspend(run)
        else:
            await world.finish(run, status)
        async with world.unchanged():
            with pytest.raises(RunNotActiveError) as info:
                await world.store.record_run_cancellation(run.cancellation(REASON, at=world.now()))
        assert (info.value.run_id, info.value.expected, info.value.got) == (
            run.run.run_id,
            "running",
            status.value,
        )
        assert (await world.store.load_run(run.run.run_id)).cancellation_reason == ""

    async def test_cancel_request_after_an_ended_session_stop_is_refused(
        self, world: World
    ) -> None:
        """[C2] a run stopped by its ended session keeps ``session_ended``; no request joins it."""
        sid = await world.session("s")
        await world.store.end_session(sid, ended_at=world.now())
        run = world.run("r", session=sid)
        await world.store.start_root_run(run.root_start())
        async with world.unchanged():
            with pytest.raises(RunNotActiveError) as info:
                await world.store.record_run_cancellation(run.cancellation(REASON, at=world.now()))
        assert info.value.got == RunStatus.CANCELED.value
        meta = await world.store.load_run(run.run.run_id)
        assert meta.cancellation_reason == payloads.SESSION_ENDED

    # ---------------------------------------------------- the later terminal

    @pytest.mark.parametrize("wrong", ["timeout", payloads.ENGINE_CANCELED, payloads.SESSION_ENDED])
    async def test_cancel_terminal_must_repeat_the_reason(self, world: World, wrong: str) -> None:
        """[C1] the canceled ``run_completed`` after a request repeats its reason exactly."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.record_run_cancellation(run.cancellation(REASON, at=world.now()))
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_terminal(_canceled(world, run, wrong))
        err = info.value
        assert (err.field, err.expected, err.got) == (
            "record.payload.cancellation.reason",
            repr(REASON),
            wrong,
        )
        result = await world.store.record_run_terminal(_canceled(world, run, REASON))
        assert result.inserted

    async def test_cancel_terminal_needs_its_cancellation_note(self, world: World) -> None:
        """[C1] a canceled ``run_completed`` without ``cancellation`` is refused."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.record_run_cancellation(run.cancellation(REASON, at=world.now()))
        body = payloads.RunCompleted(status="canceled", phase="canceled").encode()
        record = run.record(payloads.RUN_COMPLETED, body, event_key="run_completed", at=world.now())
        cmd = RunTerminal(run_id=run.run.run_id, status=RunStatus.CANCELED, record=record)
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_terminal(cmd)
        assert (info.value.field, info.value.got) == ("record.payload.cancellation.reason", None)

    @pytest.mark.parametrize("wrong", [REASON, payloads.SESSION_ENDED])
    async def test_cancel_by_engine_without_request_says_engine_canceled(
        self, world: World, wrong: str
    ) -> None:
        """[C3] with no recorded request the canceled ``run_completed`` says ``engine_canceled``."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_terminal(_canceled(world, run, wrong))
        assert (info.value.expected, info.value.got) == (repr(payloads.ENGINE_CANCELED), wrong)
        result = await world.store.record_run_terminal(
            _canceled(world, run, payloads.ENGINE_CANCELED)
        )
        assert result.inserted
        meta = await world.store.load_run(run.run.run_id)
        assert (meta.status, meta.cancellation_reason) == (RunStatus.CANCELED, "")

    # ------------------------------------------------------------- provenance

    async def test_cancel_three_provenances_are_preserved_exactly(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[C1] [C2] [C3] each valid cancellation story reads back exactly as stored."""
        active = await world.session("active")
        ended = await world.session("ended")
        await world.store.end_session(ended, ended_at=world.now())

        explicit = await world.root("explicit", session=active)
        intent = explicit.cancellation(REASON, at=world.now())
        await world.store.record_run_cancellation(intent)
        explicit_done = _canceled(world, explicit, REASON)
        await world.store.record_run_terminal(explicit_done)

        stopped = world.run("stopped", session=ended)
        start = stopped.root_start()
        result = await world.store.start_root_run(start)
        assert (result.outcome, result.run_status) == (StartOutcome.STOP, RunStatus.CANCELED)
        assert result.canceled is not None
        assert (result.canceled.id, result.canceled.inserted) == ("2", True)

        engine = await world.root("engine", session=active)
        engine_done = _canceled(world, engine, payloads.ENGINE_CANCELED)
        await world.store.record_run_terminal(engine_done)

        expectations = [
            (explicit, REASON, StartOutcome.PROCEED, [intent.record, explicit_done.record]),
            (stopped, payloads.SESSION_ENDED, StartOutcome.STOP, [start.canceled]),
            (engine, "", StartOutcome.PROCEED, [engine_done.record]),
        ]
        for run, reason, outcome, tail in expectations:
            meta = await other_store.load_run(run.run.run_id)
            assert (meta.status, meta.cancellation_reason) == (RunStatus.CANCELED, reason)
            assert meta.start_outcome is outcome
            log = await _log(other_store, run.run.run_id)
            written = [run.root_start().started, *tail]
            assert log == [replace(r, id=str(i)) for i, r in enumerate(written, start=1)]
            intents = [r for r in log if r.type == payloads.CANCELLATION_INTENT]
            assert len(intents) == (1 if run is explicit else 0)
            completed = payloads.RunCompleted.decode(log[-1].payload)
            assert completed.cancellation is not None
            assert completed.cancellation.reason == (reason or payloads.ENGINE_CANCELED)
