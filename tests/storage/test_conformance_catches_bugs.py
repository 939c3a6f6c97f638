"""The conformance suite can fail: deliberately broken stores must not pass it.

Each broken store below is a MemoryStore with one contract rule broken. The
suite runs against it in a subprocess, exactly as a third party would run it
(a module subclassing ``StoreConformance`` with a ``store_factory``), and the
run must fail in the tests named for that bug. The unbroken MemoryStore must
pass the same run, so it is the bug that fails, not the harness.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest

from agentledger.errors import RecordConflictError, SessionConflictError
from agentledger.storage import MemoryStore, accounting, lifecycle, payloads
from agentledger.storage.listing import session_query
from agentledger.storage.protocol import DEFAULT_PAGE_LIMIT
from agentledger.storage.state import Plan, StateReader
from agentledger.storage.transcript_chain import CHAIN_TYPES
from agentledger.storage.types import (
    AppendResult,
    ChildRunStart,
    DerivedCopy,
    MessageSubmission,
    OneShotChildRunStart,
    OneShotRunStart,
    PurgeReceipt,
    Record,
    RootRunStart,
    RunCancellation,
    RunStatus,
    RunSuspension,
    RunTerminal,
    Session,
    SessionMessage,
    SessionPage,
    SessionStatus,
    StartResult,
    TranscriptSegment,
    TurnAppend,
)

R = TypeVar("R")
ROOT = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------- broken stores


class OverwritesChangedRetries(MemoryStore):
    """[X3] a changed retry of ``append_run_record`` replaces the stored record."""

    async def append_run_record(self, record: Record, /) -> AppendResult:
        try:
            return await super().append_run_record(record)
        except RecordConflictError:
            with self._lock:
                state = self._state
                old = state.keys[(record.run_id, record.event_key)]
                new = msgspec.structs.replace(record, id=old.id)
                state.keys[(record.run_id, record.event_key)] = new
                log = state.logs[record.run_id]
                log[log.index(old)] = new
                if record.session_id in state.session_logs:
                    session_log = state.session_logs[record.session_id]
                    session_log[session_log.index(old)] = new
            return await super().append_run_record(record)


class KeepsPartOfARefusedBatch(MemoryStore):
    """[B1] a batch is appended one record at a time: a refusal keeps the records before it."""

    async def append_run_records(self, records: Sequence[Record], /) -> list[AppendResult]:
        return [await self.append_run_record(record) for record in records]


class SplitsCarriedRecords(MemoryStore):
    """[L6] [L7] a suspension or terminal writes its carried records in a transaction of
    their own first, so a refused command keeps them."""

    async def record_run_suspension(self, cmd: RunSuspension, /) -> AppendResult:
        if cmd.records:
            await self.append_run_records(cmd.records)
        return await super().record_run_suspension(msgspec.structs.replace(cmd, records=()))

    async def record_run_terminal(self, cmd: RunTerminal, /) -> AppendResult:
        if cmd.records:
            await self.append_run_records(cmd.records)
        return await super().record_run_terminal(msgspec.structs.replace(cmd, records=()))


class ForgetsPurgeTombstones(MemoryStore):
    """[D3] a purged session id (and its runs' ids) can be used again."""

    async def purge_session(self, session_id: str, /, expected_digest: str = "") -> PurgeReceipt:
        receipt = await super().purge_session(session_id, expected_digest)
        with self._lock:
            self._state.purged_sessions.pop(session_id, None)
            for run_id, owner in list(self._state.purged_runs.items()):
                if owner == session_id:
                    del self._state.purged_runs[run_id]
        return receipt


class RestampsRepeatedPurges(MemoryStore):
    """[D7] a repeated purge returns a fresh receipt (new ``purged_at``), not the kept one."""

    async def purge_session(self, session_id: str, /, expected_digest: str = "") -> PurgeReceipt:
        receipt = await super().purge_session(session_id, expected_digest)
        with self._lock:
            kept = self._state.purged_sessions[session_id]
            later = kept.purged_at + timedelta(milliseconds=1) if kept.purged_at else None
            self._state.purged_sessions[session_id] = msgspec.structs.replace(kept, purged_at=later)
        return receipt


class AcceptsChildrenOfFinishedParents(MemoryStore):
    """[L2] [L4] a new child starts under a parent that is no longer running."""

    async def _as_if_running(self, parent_run_id: str, start: Any) -> StartResult:
        with self._lock:
            parent = self._state.runs.get(parent_run_id)
            if parent is not None:
                running = msgspec.structs.replace(parent, status=RunStatus.RUNNING)
                self._state.runs[parent_run_id] = running
        try:
            result: StartResult = await start
            return result
        finally:
            with self._lock:
                now = self._state.runs.get(parent_run_id)
                if parent is not None and now is not None:
                    restored = msgspec.structs.replace(now, status=parent.status)
                    self._state.runs[parent_run_id] = restored

    async def start_child_run(self, cmd: ChildRunStart, /) -> StartResult:
        return await self._as_if_running(cmd.run.parent_run_id, super().start_child_run(cmd))

    async def start_one_shot_child_run(self, cmd: OneShotChildRunStart, /) -> StartResult:
        return await self._as_if_running(
            cmd.run.parent_run_id, super().start_one_shot_child_run(cmd)
        )


def _all_inserted(result: StartResult) -> StartResult:
    def mark(r: AppendResult | None) -> AppendResult | None:
        return None if r is None else msgspec.structs.replace(r, inserted=True)

    return msgspec.structs.replace(
        result,
        started=msgspec.structs.replace(result.started, inserted=True),
        canceled=mark(result.canceled),
        parent_record=mark(result.parent_record),
    )


class ReportsRetriesAsInserted(MemoryStore):
    """[X1] exact retries answer ``inserted=True`` as if they had written again."""

    async def append_run_record(self, record: Record, /) -> AppendResult:
        return msgspec.structs.replace(await super().append_run_record(record), inserted=True)

    async def start_root_run(self, cmd: RootRunStart, /) -> StartResult:
        return _all_inserted(await super().start_root_run(cmd))

    async def start_one_shot_run(self, cmd: OneShotRunStart, /) -> StartResult:
        return _all_inserted(await super().start_one_shot_run(cmd))


class SkipsRecordIds(MemoryStore):
    """[L8] ordinary records get ids with gaps ("1", "3", "5" ...)."""

    async def append_run_record(self, record: Record, /) -> AppendResult:
        with self._lock:
            row = self._state.runs.get(record.run_id)
            if row is not None and (record.run_id, record.event_key) not in self._state.keys:
                self._state.runs[record.run_id] = msgspec.structs.replace(
                    row, last_seq=row.last_seq + 1
                )
        return await super().append_run_record(record)


class IgnoresChangedSessionLabels(MemoryStore):
    """[D6] a create retry with other labels returns the stored session instead of a conflict."""

    async def create_session(
        self,
        session_id: str,
        /,
        created_at: datetime | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Session:
        try:
            return await super().create_session(session_id, created_at, labels)
        except SessionConflictError:
            return await self.load_session(session_id)


class PagesSessionsByOffset(MemoryStore):
    """[D6] ``list_sessions`` cursors are positions, so sessions created between pages
    shift the rest: a session is listed twice (or skipped, after a purge)."""

    async def list_sessions(
        self,
        statuses: Iterable[SessionStatus] = (),
        labels: Mapping[str, str] | None = None,
        cursor: str = "",
        limit: int = DEFAULT_PAGE_LIMIT,
    ) -> SessionPage:
        query = session_query(statuses, labels or {}, "", limit)
        start = int(cursor) if cursor.isdigit() else 0
        with self._lock:
            found = [row.public() for row in self._state.sessions.values()]
        found = sorted(
            (s for s in found if query.matches(s)), key=lambda s: (s.created_at, s.id), reverse=True
        )
        end = start + query.limit
        return SessionPage(
            sessions=found[start:end], next_cursor=str(end) if end < len(found) else ""
        )


_KNOWN_FIELDS: dict[str, frozenset[str]] = {
    cls.record_type: frozenset(cls.__struct_fields__)
    for cls in (
        payloads.RunStarted,
        payloads.RunCompleted,
        payloads.RunSuspended,
        payloads.ChildRunLinked,
        payloads.CancellationIntent,
    )
}


def _drop_unknown(record: Record) -> Record:
    """The record with every top-level payload field its type does not know removed."""
    known = _KNOWN_FIELDS.get(record.type)
    if known is None:
        return record
    body = msgspec.json.decode(record.payload)
    if not isinstance(body, dict) or set(body) <= known:
        return record
    kept = {k: v for k, v in body.items() if k in known}
    return msgspec.structs.replace(record, payload=msgspec.json.encode(kept))


class AcceptsUnknownPayloadFields(MemoryStore):
    """[J1] lifecycle payloads with unknown fields are accepted (the fields dropped)."""

    async def start_root_run(self, cmd: RootRunStart, /) -> StartResult:
        return await super().start_root_run(
            msgspec.structs.replace(
                cmd, started=_drop_unknown(cmd.started), canceled=_drop_unknown(cmd.canceled)
            )
        )

    async def start_child_run(self, cmd: ChildRunStart, /) -> StartResult:
        return await super().start_child_run(
            msgspec.structs.replace(
                cmd,
                started=_drop_unknown(cmd.started),
                canceled=_drop_unknown(cmd.canceled),
                parent_linked=_drop_unknown(cmd.parent_linked),
            )
        )

    async def start_one_shot_run(self, cmd: OneShotRunStart, /) -> StartResult:
        return await super().start_one_shot_run(
            msgspec.structs.replace(cmd, started=_drop_unknown(cmd.started))
        )

    async def start_one_shot_child_run(self, cmd: OneShotChildRunStart, /) -> StartResult:
        return await super().start_one_shot_child_run(
            msgspec.structs.replace(
                cmd,
                started=_drop_unknown(cmd.started),
                parent_linked=_drop_unknown(cmd.parent_linked),
            )
        )

    async def record_run_cancellation(self, cmd: RunCancellation, /) -> AppendResult:
        return await super().record_run_cancellation(
            msgspec.structs.replace(cmd, record=_drop_unknown(cmd.record))
        )

    async def record_run_suspension(self, cmd: RunSuspension, /) -> AppendResult:
        return await super().record_run_suspension(
            msgspec.structs.replace(cmd, record=_drop_unknown(cmd.record))
        )

    async def record_run_terminal(self, cmd: RunTerminal, /) -> AppendResult:
        return await super().record_run_terminal(
            msgspec.structs.replace(cmd, record=_drop_unknown(cmd.record))
        )


class LastToolResultWins(MemoryStore):
    """A later save of a tool call's result replaces the kept one."""

    async def save_tool_result(self, run_id: str, call_key: str, data: bytes, /) -> bytes:
        with self._lock:
            self._state.tool_results.get(run_id, {}).pop(call_key, None)
        return await super().save_tool_result(run_id, call_key, data)


class DecidesThenYields(MemoryStore):
    """[X5] no transaction: each write decides, yields to the event loop, then applies.

    Sequentially it is a perfect store; only concurrent writers can tell.
    """

    async def _racy(self, decide: Callable[[StateReader], Plan[R]]) -> R:
        with self._lock:
            plan = decide(self._state)
        await asyncio.sleep(0)
        with self._lock:
            self._state.apply(plan)
        return plan.result

    async def start_root_run(self, cmd: RootRunStart, /) -> StartResult:
        return await self._racy(lambda r: lifecycle.plan_root_start(r, cmd))

    async def start_child_run(self, cmd: ChildRunStart, /) -> StartResult:
        return await self._racy(lambda r: lifecycle.plan_child_start(r, cmd))

    async def append_run_record(self, record: Record, /) -> AppendResult:
        return await self._racy(lambda r: lifecycle.plan_append(r, record))

    async def record_run_cancellation(self, cmd: RunCancellation, /) -> AppendResult:
        return await self._racy(lambda r: lifecycle.plan_cancellation(r, cmd))

    async def record_run_suspension(self, cmd: RunSuspension, /) -> AppendResult:
        return await self._racy(lambda r: lifecycle.plan_suspension(r, cmd))

    async def record_run_terminal(self, cmd: RunTerminal, /) -> AppendResult:
        return await self._racy(lambda r: lifecycle.plan_terminal(r, cmd))

    async def save_tool_result(self, run_id: str, call_key: str, data: bytes, /) -> bytes:
        return await self._racy(
            lambda r: lifecycle.plan_save_tool_result(r, run_id, call_key, data)
        )


class TrustsHistoryReferences(MemoryStore):
    """[V3] a start's history reference is stored without looking at its source."""

    async def start_root_run(self, cmd: RootRunStart, /) -> StartResult:
        refs = [r for r in cmd.records if r.type == payloads.TRANSCRIPT_REFERENCED]
        if not refs:
            return await super().start_root_run(cmd)
        others = tuple(r for r in cmd.records if r.type != payloads.TRANSCRIPT_REFERENCED)
        result = await super().start_root_run(msgspec.structs.replace(cmd, records=others))
        if result.started.inserted:
            with self._lock:  # the reference goes in unchecked, where the start put it
                state = self._state
                run = state.runs[cmd.run.run_id]
                log = state.logs[run.run_id]
                for ref in refs:
                    new = msgspec.structs.replace(ref, id=str(len(log) + 1))
                    log.append(new)
                    state.keys[(run.run_id, ref.event_key)] = new
                    state.session_logs.setdefault(run.session_id, []).append(new)
                state.runs[run.run_id] = msgspec.structs.replace(run, last_seq=len(log))
        return result


class ReadsChainsPastTheirCut(MemoryStore):
    """[V4] a chain's sources are read through their whole log, not the record named."""

    async def load_transcript_chain(
        self, run_id: str, /, *, windowed: bool = False
    ) -> tuple[TranscriptSegment, ...]:
        chain = await super().load_transcript_chain(run_id, windowed=windowed)
        with self._lock:
            return tuple(
                msgspec.structs.replace(
                    segment,
                    records=tuple(
                        r for r in self._state.logs[segment.run_id] if r.type in CHAIN_TYPES
                    ),
                )
                for segment in chain
            )


class IgnoresWindows(MemoryStore):
    """[V5] a windowed chain is read whole: the window does not bound what replay reads."""

    async def load_transcript_chain(
        self, run_id: str, /, *, windowed: bool = False
    ) -> tuple[TranscriptSegment, ...]:
        return await super().load_transcript_chain(run_id)


class SubmitsWithoutATransaction(MemoryStore):
    """[Q2] a message's place in its session is decided, the loop yields, then it is stored:
    sequentially perfect; messages sent at once get no single order."""

    async def submit_message(self, sub: MessageSubmission, /) -> SessionMessage:
        with self._lock:
            plan = lifecycle.plan_submit_message(self._state, sub, limits=self.limits)
        await asyncio.sleep(0)
        with self._lock:
            self._state.apply(plan)
        return plan.result


class IgnoresSteeringMessages(MemoryStore):
    """[Q1] a planner turn's write leaves the run's steering messages waiting: the run never
    takes them (each becomes a turn of its own, after the run)."""

    async def append_turn_records(self, records: Sequence[Record], /) -> TurnAppend:
        return TurnAppend(results=await self.append_run_records(records))


class CountsRetriesAgain(MemoryStore):
    """[G3] an exact retry of an append adds its record to the usage counters again."""

    async def append_run_record(self, record: Record, /) -> AppendResult:
        result = await super().append_run_record(record)
        if not result.inserted:
            with self._lock:
                self._state.count(accounting.usage_change(Plan(None, records=[record]), ()))
        return result


class KeepsPurgedSessionsInLabelTotals(MemoryStore):
    """[G3] a purge leaves the session in its label's totals (one session, its usage)."""

    async def purge_session(
        self, session_id: str, /, expected_digest: str = "", cascade: bool = False
    ) -> PurgeReceipt:
        labels = (await self.load_session(session_id)).labels
        usage = await self.load_session_usage(session_id)
        receipt = await super().purge_session(session_id, expected_digest, cascade)
        self._state.__dict__.setdefault("gone", []).append((labels, usage))  # every handle's
        return receipt

    async def usage_by_label(
        self, key: str = "", labels: Mapping[str, str] | None = None
    ) -> list[accounting.LabelUsage]:
        rows = await super().usage_by_label(key, labels)
        if not key or labels:
            return rows
        for held, usage in self._state.__dict__.get("gone", []):
            if key in held:
                same = [r for r in rows if r.value == held[key]]
                row = (
                    same[0]
                    if same
                    else accounting.LabelUsage(
                        key=key, value=held[key], sessions=0, usage=accounting.UsageTotals()
                    )
                )
                kept = msgspec.structs.replace(
                    row, sessions=row.sessions + 1, usage=accounting.add(row.usage, usage)
                )
                rows = sorted([r for r in rows if r is not row] + [kept], key=lambda r: r.value)
        return rows


class IgnoresCascade(MemoryStore):
    """[G2] a cascading purge purges the session alone, leaving the copies other sessions hold."""

    async def purge_session(
        self, session_id: str, /, expected_digest: str = "", cascade: bool = False
    ) -> PurgeReceipt:
        return await super().purge_session(session_id, expected_digest)


class CascadesOneLevel(MemoryStore):
    """[G2] a cascading purge takes the sessions holding direct copies, not their copies."""

    async def purge_session(
        self, session_id: str, /, expected_digest: str = "", cascade: bool = False
    ) -> PurgeReceipt:
        if not cascade:
            return await super().purge_session(session_id, expected_digest)
        holders = [c.session_id for c in await self.list_derived_copies(session_id)]
        holders = list(dict.fromkeys(holders))
        for holder in holders:
            await super().purge_session(holder)
        receipt = await super().purge_session(session_id, expected_digest)
        return msgspec.structs.replace(receipt, cascaded=holders, derived=[])


class ListsCopiesNotTheirSummaries(MemoryStore):
    """[G2] the compaction summaries that restate a copy are left out of its listing."""

    async def list_derived_copies(self, session_id: str, /) -> list[DerivedCopy]:
        return [c for c in await super().list_derived_copies(session_id) if not c.summary]


class CountsNoTokens(MemoryStore):
    """[G3] the counters take bytes and records but not the tokens of usage records."""

    async def load_session_usage(self, session_id: str, /) -> accounting.UsageTotals:
        usage = await super().load_session_usage(session_id)
        return msgspec.structs.replace(usage, input_tokens=0, output_tokens=0, cached_tokens=0)


# --------------------------------------------------------------------- harness

MINE = "test_race_ or test_state_machine"
"""The capabilities this file relies on: races and the stateful model."""


@dataclass(frozen=True)
class Case:
    store: str  # a class name in this module
    select: str  # a -k expression; "" runs the whole suite
    must_fail: tuple[str, ...]  # test names that must be among the failures


CASES = (
    Case("CountsRetriesAgain", "retries_and_refusals", ("test_retries_and_refusals_add_nothing",)),
    Case("CountsNoTokens", "usage_counts", ("test_usage_counts_what_the_records_hold",)),
    Case(
        "KeepsPurgedSessionsInLabelTotals",
        "label_totals",
        ("test_label_totals_follow_every_write",),
    ),
    Case("IgnoresCascade", "cascade", ("test_cascade_purges_the_holders_with_the_session",)),
    Case("CascadesOneLevel", "copies_of_copies", ("test_a_purge_reaches_copies_of_copies",)),
    Case(
        "ListsCopiesNotTheirSummaries",
        "summary_of_a_copy",
        ("test_a_summary_of_a_copy_is_listed_with_it",),
    ),
    Case("ForgetsPurgeTombstones", "", ("test_state_machine",)),
    Case(
        "RestampsRepeatedPurges",
        "test_purge_ or test_state_machine",
        ("test_state_machine", "test_purge_is_idempotent", "test_purge_race_returns_one_receipt"),
    ),
    Case("OverwritesChangedRetries", MINE, ("test_state_machine", "test_race_appends_of_one_key")),
    Case(
        "AcceptsChildrenOfFinishedParents",
        MINE,
        ("test_state_machine", "test_race_child_starts_against_parent_terminal"),
    ),
    Case(
        "ReportsRetriesAsInserted",
        MINE,
        ("test_state_machine", "test_race_identical_root_starts"),
    ),
    Case("SkipsRecordIds", MINE, ("test_state_machine", "test_race_appends_of_distinct_keys")),
    Case("AcceptsUnknownPayloadFields", MINE, ("test_state_machine",)),
    Case(
        "IgnoresChangedSessionLabels",
        "test_state_machine or test_race_creates or test_retry_with_other_labels",
        (
            "test_state_machine",
            "test_race_creates_with_different_labels",
            "test_retry_with_other_labels_is_a_conflict",
        ),
    ),
    Case("PagesSessionsByOffset", "session", ("test_paging_has_no_gap_and_no_duplicate",)),
    Case(
        "KeepsPartOfARefusedBatch",
        "test_batch_",
        (
            "test_batch_whose_third_record_conflicts_changes_nothing",
            "test_batch_repeating_a_key_inside_is_a_retry_or_a_conflict",
        ),
    ),
    Case(
        "LastToolResultWins",
        "test_first_save or test_race_saves",
        ("test_first_save_wins", "test_race_saves_of_one_tool_result"),
    ),
    Case(
        "SplitsCarriedRecords",
        "carried",
        (
            "test_suspension_writes_carried_records_first",
            "test_terminal_writes_carried_records_all_or_none",
        ),
    ),
    Case(
        "TrustsHistoryReferences",
        "reference or next_turn or through_past",
        (
            "test_reference_to_a_missing_run_is_refused",
            "test_reference_across_sessions_is_refused",
            "test_next_turn_needs_a_completed_source",
            "test_next_turn_must_end_at_the_source_end",
            "test_through_past_the_source_log_is_refused",
        ),
    ),
    Case(
        "ReadsChainsPastTheirCut",
        "fork_references",
        ("test_fork_references_a_record_in_the_middle",),
    ),
    Case(
        "IgnoresWindows",
        "window",
        (
            "test_windowed_chain_ends_at_the_window_start",
            "test_a_window_of_a_run_without_a_session",
        ),
    ),
    Case(
        "SubmitsWithoutATransaction",
        "test_concurrent_messages",
        ("test_concurrent_messages_get_one_order",),
    ),
    Case(
        "IgnoresSteeringMessages",
        "steer",
        ("test_a_turn_takes_its_steering_messages_once",),
    ),
    Case(
        "DecidesThenYields",
        "test_race_",
        (
            "test_race_identical_root_starts",
            "test_race_conflicting_root_starts",
            "test_race_successors_of_one_suspension",
            "test_race_cancellations_with_different_reasons",
            "test_race_terminals_with_different_statuses",
            "test_race_suspensions_with_different_checkpoints",
            "test_race_appends_of_distinct_keys",
            "test_race_appends_of_one_key",
            "test_race_saves_of_one_tool_result",
        ),
    ),
)

_HEADER = """
from hypothesis import Phase, settings

# A failing run stops at its first counterexample: shrinking it is not the point here.
# Derandomized, so whether the suite catches a bug does not depend on the run's luck.
settings.register_profile(
    "catches-bugs", database=None, derandomize=True, phases=[Phase.explicit, Phase.generate]
)
settings.load_profile("catches-bugs")

import pytest

import {module} as stores
from agentledger.storage.conformance import StoreConformance
"""

_CLASS = """

class Test{store}(StoreConformance):
    process_races = False

    @pytest.fixture
    async def store_factory(self):
        shared = stores.{store}()

        async def open_store():
            return shared.handle()

        return open_store
"""


@dataclass(frozen=True)
class Outcome:
    returncode: int
    passed: frozenset[str]
    failed: frozenset[str]
    output: str


Run = tuple[subprocess.Popen[str], Path, list[str]]


def _launch(directory: Path, cases: dict[str, str], stores: str = __name__) -> Run:
    """Run the suite against each store (name -> ``-k`` selection, "" = all) in one process.

    The module is what a third party writes, one ``StoreConformance`` subclass
    with a ``store_factory`` per store, run by plain pytest with the project's
    settings.
    """
    directory.mkdir()
    module = directory / "test_stores_under_suite.py"
    source = _HEADER.format(module=stores)
    source += "".join(_CLASS.format(store=store) for store in cases)
    module.write_text(source)
    report = directory / "report.xml"
    select = " or ".join(
        f"(Test{store} and ({expr}))" if expr else f"Test{store}" for store, expr in cases.items()
    )
    args = [
        sys.executable,
        "-m",
        "pytest",
        str(module),
        "-c",
        str(ROOT / "pyproject.toml"),
        "--rootdir",
        str(directory),
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        "-k",
        select,
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    process = subprocess.Popen(
        args, cwd=directory, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    return process, report, list(cases)


def _collect(process: subprocess.Popen[str], report: Path, stores: list[str]) -> dict[str, Outcome]:
    """Each store's passed and failed test names, read from the JUnit report."""
    output, _ = process.communicate(timeout=600)
    passed: dict[str, set[str]] = {store: set() for store in stores}
    failed: dict[str, set[str]] = {store: set() for store in stores}
    for case in ET.parse(report).getroot().iter("testcase"):
        store = case.get("classname", "").rpartition(".Test")[2]
        name = case.get("name", "")
        if case.find("failure") is not None or case.find("error") is not None:
            failed[store].add(name)
        elif case.find("skipped") is None:
            passed[store].add(name)
    return {
        store: Outcome(
            process.returncode, frozenset(passed[store]), frozenset(failed[store]), output
        )
        for store in stores
    }


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """The unbroken run and the broken runs, side by side in two processes."""
    tmp_path = tmp_path_factory.mktemp("catches-bugs")
    unbroken = _launch(tmp_path / "unbroken", {"MemoryStore": ""})
    broken = _launch(tmp_path / "broken", {case.store: case.select for case in CASES})
    return {**_collect(*unbroken), **_collect(*broken)}


def test_unbroken_store_passes_the_same_run(outcomes: dict[str, Outcome]) -> None:
    """The harness itself is sound: MemoryStore passes the whole suite run this way."""
    outcome = outcomes["MemoryStore"]
    assert outcome.returncode == 0, outcome.output[-5000:]
    assert outcome.failed == frozenset()
    assert {"test_state_machine", "test_race_identical_root_starts"} <= outcome.passed
    assert len(outcome.passed) > 100, "the suite ran suspiciously few tests"


@pytest.mark.parametrize("case", CASES, ids=[c.store for c in CASES])
def test_broken_store_fails_the_suite(case: Case, outcomes: dict[str, Outcome]) -> None:
    """Each deliberately broken store fails, in the tests that guard the rule it breaks."""
    outcome = outcomes[case.store]
    assert outcome.returncode == 1, outcome.output[-5000:]
    missing = set(case.must_fail) - outcome.failed
    assert not missing, (
        f"{case.store} was not caught by {sorted(missing)}; failed: {sorted(outcome.failed)}"
    )
