"""Conformance: random sequences of store calls agree with an independent model.

A hypothesis state machine drives the backend and :class:`~._model.Model`
with the same commands, drawn from small pools of names (3 sessions, 5 runs,
a few event keys and reasons) so that collisions, exact retries, changed
retries and conflicts happen often. After every step the two must agree on
the value returned or the error class raised, and every listing of the ids in
play must be equal.

Mechanics: the test is a plain sync method; every machine instance makes its
own event loop, opens its own handle through ``store_factory`` inside it and
uses a fresh id namespace, so examples sharing one database never see each
other. In ``teardown`` the machine closes its handle if it has an async
``close()``. The fixture that made the handle may close it again later, so a
backend's ``close()`` must be idempotent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Literal, TypeAlias

import msgspec
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

from agentledger.errors import AgentledgerError
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase, StoreFactory
from agentledger.storage.conformance._model import Model, Refused
from agentledger.storage.conformance._world import AdminStore, all_sessions
from agentledger.storage.types import (
    Checkpoint,
    Page,
    PurgeReceipt,
    Record,
    RunStart,
    RunStatus,
    SessionStatus,
)

__all__ = ["LedgerMachine", "StatefulConformance"]

EPOCH = datetime(2026, 3, 1, tzinfo=UTC)
AGENT = "agent"
SESSIONS = 3
RUNS = 5
APPEND_KEYS = ("k0", "k1", "k2")
TOOL_KEYS = ("t0", "t1")
CANCEL_KEYS = ("cancellation_intent", "cancel-b", "k0")
SUSPEND_KEYS = ("run_suspended", "suspend-b", "k0")
TERMINAL_KEYS = ("run_completed", "end-b", "k0")
REASONS = ("stop-a", "stop-b")
TEAMS = ("red", "blue")
FINAL = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED)
PAGE = 3  # small pages, so listings cross cursors
RUN = st.integers(0, 4 * RUNS - 1)  # < RUNS: that pool run; above: a live (or fresh) one

StartKind: TypeAlias = Literal["root", "child", "one_shot", "one_shot_child"]


def _ms(n: int) -> datetime:
    return EPOCH + timedelta(milliseconds=n)


def _with_unknown_field(record: Record) -> Record:
    """The record with one field its payload type does not know [J1]."""
    body = json.loads(record.payload)
    body["unexpected"] = True
    return msgspec.structs.replace(record, payload=json.dumps(body).encode())


# ------------------------------------------------------------------------ commands
# Each command is a small frozen value that builds the same store call every
# time, so replaying one from the bundle is an exact retry and ``changed(k)``
# is a retry that differs in one value.


@dataclass(frozen=True)
class CreateSession:
    session: str
    tick: int
    machine: str  # every session carries {"machine": ns}, so listings can filter on it
    variant: int = 0

    def call(self) -> tuple[str, tuple[Any, ...]]:
        labels = {"machine": self.machine, "team": TEAMS[self.variant]}
        return "create_session", (self.session, _ms(self.tick), labels)

    def changed(self, k: int) -> CreateSession:
        if k == 0:  # another time is no conflict: the first create's time stays [D4]
            return dataclasses.replace(self, tick=self.tick + 1000)
        return dataclasses.replace(self, variant=1 - self.variant)  # other labels [D6]


@dataclass(frozen=True)
class EndSession:
    session: str
    tick: int

    def call(self) -> tuple[str, tuple[Any, ...]]:
        return "end_session", (self.session, _ms(self.tick))

    def changed(self, k: int) -> EndSession:
        return dataclasses.replace(self, tick=self.tick + 1000)


@dataclass(frozen=True)
class PurgeSession:
    session: str

    def call(self) -> tuple[str, tuple[Any, ...]]:
        return "purge_session", (self.session,)

    def changed(self, k: int) -> PurgeSession:
        return self


@dataclass(frozen=True)
class Start:
    kind: StartKind
    run: str
    session: str
    parent: str
    predecessor: str
    variant: int
    junk: bool = False

    def call(self) -> tuple[str, tuple[Any, ...]]:
        builder = RecordBuilder(
            RunStart(
                run_id=self.run,
                agent_id=AGENT,
                session_id=self.session,
                parent_run_id=self.parent,
                predecessor_run_id=self.predecessor,
                started_at=_ms(1 + self.variant),
                labels={"v": str(self.variant)},
            ),
            turn_id="turn",
        )
        cmd: Any
        if self.kind == "root":
            cmd, name = builder.root_start(), "start_root_run"
        elif self.kind == "child":
            cmd, name = (
                builder.child_start(
                    parent_agent_id=AGENT, tool_name="agent_tool", tool_call_id="call"
                ),
                "start_child_run",
            )
        elif self.kind == "one_shot":
            cmd, name = builder.one_shot_start(), "start_one_shot_run"
        else:
            cmd, name = (
                builder.one_shot_child_start(
                    parent_agent_id=AGENT, tool_name="agent_tool", tool_call_id="call"
                ),
                "start_one_shot_child_run",
            )
        if self.junk:
            cmd = msgspec.structs.replace(cmd, started=_with_unknown_field(cmd.started))
        return name, (cmd,)

    def changed(self, k: int) -> Start:
        return dataclasses.replace(self, variant=1 - self.variant)


@dataclass(frozen=True)
class Append:
    run: str
    session: str
    key: str
    variant: int

    def call(self) -> tuple[str, tuple[Any, ...]]:
        builder = RecordBuilder(
            RunStart(run_id=self.run, agent_id=AGENT, session_id=self.session, started_at=EPOCH),
            turn_id="turn",
        )
        body = b'{"v":%d}' % self.variant
        return "append_run_record", (
            builder.record("planner_note", body, event_key=self.key, at=_ms(100 + self.variant)),
        )

    def changed(self, k: int) -> Append:
        return dataclasses.replace(self, variant=1 - self.variant)


@dataclass(frozen=True)
class AppendBatch:
    """[B1] a batch of ``keys`` (in order), each with the payload variant of its key."""

    run: str
    session: str
    keys: tuple[str, ...]
    variant: int

    def call(self) -> tuple[str, tuple[Any, ...]]:
        appends = [Append(self.run, self.session, key, self.variant) for key in self.keys]
        return "append_run_records", ([a.call()[1][0] for a in appends],)

    def changed(self, k: int) -> AppendBatch:
        return dataclasses.replace(self, variant=1 - self.variant)


@dataclass(frozen=True)
class SaveToolResult:
    """A tool call's result saved: the first save of a call wins."""

    run: str
    key: str
    variant: int

    def call(self) -> tuple[str, tuple[Any, ...]]:
        return "save_tool_result", (self.run, self.key, b'{"v":%d}' % self.variant)

    def changed(self, k: int) -> SaveToolResult:
        return dataclasses.replace(self, variant=1 - self.variant)


@dataclass(frozen=True)
class LoadToolResult:
    run: str
    key: str

    def call(self) -> tuple[str, tuple[Any, ...]]:
        return "load_tool_result", (self.run, self.key)

    def changed(self, k: int) -> LoadToolResult:
        return dataclasses.replace(self, key=_next(TOOL_KEYS, self.key))


def _builder(run: str, session: str, labels: tuple[tuple[str, str], ...] = ()) -> RecordBuilder:
    return RecordBuilder(
        RunStart(
            run_id=run, agent_id=AGENT, session_id=session, started_at=EPOCH, labels=dict(labels)
        ),
        turn_id="turn",
    )


def _next(pool: tuple[str, ...], value: str) -> str:
    return pool[(pool.index(value) + 1) % len(pool)] if value in pool else pool[0]


@dataclass(frozen=True)
class Cancel:
    run: str
    session: str
    reason: str
    key: str
    tick: int
    junk: bool = False

    def call(self) -> tuple[str, tuple[Any, ...]]:
        cmd = _builder(self.run, self.session).cancellation(
            self.reason, at=_ms(200 + self.tick), event_key=self.key
        )
        if self.junk:
            cmd = msgspec.structs.replace(cmd, record=_with_unknown_field(cmd.record))
        return "record_run_cancellation", (cmd,)

    def changed(self, k: int) -> Cancel:
        if k == 0:
            return dataclasses.replace(self, reason=_next(REASONS, self.reason))
        if k == 1:
            return dataclasses.replace(self, key=_next(CANCEL_KEYS, self.key))
        return dataclasses.replace(self, tick=1 - self.tick)


@dataclass(frozen=True)
class Suspend:
    run: str
    session: str
    checkpoint: int
    key: str
    tick: int
    junk: bool = False

    def call(self) -> tuple[str, tuple[Any, ...]]:
        checkpoint = Checkpoint(id=f"cp{self.checkpoint}", data=b"\x00cp%d\xff" % self.checkpoint)
        cmd = _builder(self.run, self.session).suspension(
            checkpoint, at=_ms(300 + self.tick), event_key=self.key
        )
        if self.junk:
            cmd = msgspec.structs.replace(cmd, record=_with_unknown_field(cmd.record))
        return "record_run_suspension", (cmd,)

    def changed(self, k: int) -> Suspend:
        if k == 0:
            return dataclasses.replace(self, checkpoint=1 - self.checkpoint)
        if k == 1:
            return dataclasses.replace(self, key=_next(SUSPEND_KEYS, self.key))
        return dataclasses.replace(self, tick=1 - self.tick)


@dataclass(frozen=True)
class Terminal:
    run: str
    session: str
    labels: tuple[tuple[str, str], ...]
    status: RunStatus
    reason: str  # the run's cancellation reason when the command was made
    key: str
    tick: int
    junk: bool = False

    def call(self) -> tuple[str, tuple[Any, ...]]:
        cmd = _builder(self.run, self.session, self.labels).terminal(
            self.status, at=_ms(400 + self.tick), reason=self.reason, event_key=self.key
        )
        if self.junk:
            cmd = msgspec.structs.replace(cmd, record=_with_unknown_field(cmd.record))
        return "record_run_terminal", (cmd,)

    def changed(self, k: int) -> Terminal:
        if k == 0:
            return dataclasses.replace(self, status=FINAL[(FINAL.index(self.status) + 1) % 3])
        if k == 1:
            return dataclasses.replace(self, key=_next(TERMINAL_KEYS, self.key))
        return dataclasses.replace(self, tick=1 - self.tick)


Command: TypeAlias = (
    CreateSession
    | EndSession
    | PurgeSession
    | Start
    | Append
    | AppendBatch
    | Cancel
    | Suspend
    | Terminal
    | SaveToolResult
    | LoadToolResult
)


# ------------------------------------------------------------------------ machine


async def _outcome(call: Callable[..., Awaitable[Any]], *args: Any) -> tuple[str, Any]:
    try:
        return ("ok", await call(*args))
    except AgentledgerError as e:
        return ("error", type(e).__name__)


def _expect(call: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    try:
        return ("ok", call(*args))
    except Refused as e:
        return ("error", e.error.__name__)


async def _pages(list_page: Callable[..., Awaitable[Page]], scope_id: str) -> list[Record]:
    records: list[Record] = []
    cursor = ""
    for _ in range(10_000):
        page = await list_page(scope_id, cursor=cursor, limit=PAGE)
        records.extend(page.records)
        if not page.next_cursor:
            return records
        cursor = page.next_cursor
    raise AssertionError(f"paging {scope_id!r} never ended")


class LedgerMachine(RuleBasedStateMachine):
    """Drives one store handle and the model with the same random commands.

    Subclasses set ``open_store`` to a callable that opens a handle.
    """

    open_store: ClassVar[StoreFactory]
    commands = Bundle("commands")

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        try:
            self.store: AdminStore = self.loop.run_until_complete(type(self).open_store())
        except BaseException:
            self.loop.close()
            raise
        self.model = Model()
        self.ns = uuid.uuid4().hex[:12]
        self.clock = 0

    def teardown(self) -> None:
        """Close the handle (if it has an async ``close``) and this machine's loop."""
        try:
            close = getattr(self.store, "close", None)
            if close is not None and inspect.iscoroutinefunction(close):
                self.loop.run_until_complete(close())
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    # ids and time -----------------------------------------------------------

    def sid(self, i: int) -> str:
        return f"{self.ns}-s{i}"

    def rid(self, i: int) -> str:
        return f"{self.ns}-r{i}"

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def pick_run(self, r: int, status: RunStatus | None) -> str:
        """Pool run ``r``; for ``r >= RUNS`` one the model holds with ``status``, if any.

        Three draws in four aim at runs that exist, so calls get past the
        lookups and reach the rules behind them. With ``status=None`` half of
        those are runs that stopped running and half any run.
        """
        pool = [self.rid(i) for i in range(RUNS)]
        if r < RUNS:
            return pool[r]
        runs = self.model.runs
        if status is None and r < 2 * RUNS:
            live = [x for x in pool if x in runs and runs[x].status is not RunStatus.RUNNING]
        else:
            live = [x for x in pool if x in runs and status in (None, runs[x].status)]
        return live[r % len(live)] if live else pool[r % RUNS]

    def pick_new_run(self, r: int) -> str:
        """Pool run ``r``; for ``r >= RUNS`` one no run has taken yet, if any."""
        pool = [self.rid(i) for i in range(RUNS)]
        if r < RUNS:
            return pool[r]
        fresh = [x for x in pool if x not in self.model.runs and x not in self.model.purged_runs]
        return fresh[r % len(fresh)] if fresh else pool[r % RUNS]

    def run_session(self, run: str, fallback: str) -> str:
        return self.model.session_of(run) if run in self.model.runs else fallback

    # the one step ------------------------------------------------------------

    def perform(self, command: Command) -> Command:
        """Send ``command`` to the store and the model; both must give the same answer."""
        name, args = command.call()
        expected = _expect(getattr(self.model, name), *args)
        actual = self.loop.run_until_complete(_outcome(getattr(self.store, name), *args))
        if name == "purge_session" and "ok" == expected[0] == actual[0]:
            expected = ("ok", self._stamped(expected[1], actual[1]))
        assert actual == expected, f"{name} of {command}:\n  store: {actual}\n  model: {expected}"
        return command

    def _stamped(self, expected: PurgeReceipt, actual: object) -> PurgeReceipt:
        """[D7] the first receipt of a purge takes the store's clock; a repeat must not."""
        if expected.purged_at is not None or not isinstance(actual, PurgeReceipt):
            return expected
        assert actual.purged_at is not None, f"a purge receipt without purged_at: {actual}"
        stamped = msgspec.structs.replace(expected, purged_at=actual.purged_at)
        self.model.receipts[expected.session_id] = stamped
        return stamped

    # sessions ----------------------------------------------------------------

    @initialize(target=commands)
    def a_running_root(self) -> MultipleResults[Command]:
        """Most calls need a session and a run: two sessions (of three) and one root run."""
        return multiple(
            self.perform(CreateSession(self.sid(0), self.tick(), self.ns)),
            self.perform(CreateSession(self.sid(1), self.tick(), self.ns, 1)),
            self.perform(Start("root", self.rid(0), self.sid(0), "", "", 0)),
        )

    @rule(target=commands, s=st.integers(0, SESSIONS - 1), v=st.integers(0, 1))
    def create_session(self, s: int, v: int) -> Command:
        return self.perform(CreateSession(self.sid(s), self.tick(), self.ns, v))

    @rule(target=commands, s=st.integers(0, SESSIONS - 1))
    def end_session(self, s: int) -> Command:
        return self.perform(EndSession(self.sid(s), self.tick()))

    @rule(target=commands, s=st.integers(0, SESSIONS - 1))
    def purge_session(self, s: int) -> Command:
        return self.perform(PurgeSession(self.sid(s)))

    @rule(target=commands, s=st.integers(0, SESSIONS - 1))
    def end_and_purge(self, s: int) -> Command:
        """[D1] the host's way out: end the session, then purge it."""
        self.perform(EndSession(self.sid(s), self.tick()))
        return self.perform(PurgeSession(self.sid(s)))

    # starts ------------------------------------------------------------------

    @rule(target=commands, r=RUN, s=st.integers(0, SESSIONS - 1), v=st.integers(0, 1))
    def start_root(self, r: int, s: int, v: int) -> Command:
        return self.perform(Start("root", self.pick_new_run(r), self.sid(s), "", "", v))

    @rule(
        target=commands,
        r=RUN,
        p=RUN,
        where=st.sampled_from((0, 0, 0, 1, 2, 3, 4)),
        v=st.integers(0, 1),
    )
    def start_child(self, r: int, p: int, where: int, v: int) -> Command:
        """``where``: 0 = the parent's session, 1..3 = a pool session, 4 = none (one-shot)."""
        parent = self.pick_run(p, None)
        run = self.pick_new_run(r)
        if where == 0:
            session = self.run_session(parent, self.sid(0))
        elif where <= SESSIONS:
            session = self.sid(where - 1)
        else:
            session = ""
        kind: StartKind = "child" if session else "one_shot_child"
        return self.perform(Start(kind, run, session, parent, "", v))

    @rule(target=commands, r=RUN, p=st.integers(0, RUNS - 1), v=st.integers(0, 1))
    def late_child(self, r: int, p: int, v: int) -> Command:
        """[L2] [L4] a child start arriving after its parent stopped running."""
        runs = self.model.runs
        stopped = [x for x in sorted(runs) if runs[x].status is not RunStatus.RUNNING]
        parent = stopped[p % len(stopped)] if stopped else self.rid(p)
        session = self.run_session(parent, self.sid(0))
        kind: StartKind = "child" if session else "one_shot_child"
        return self.perform(Start(kind, self.pick_new_run(r), session, parent, "", v))

    @rule(target=commands, r=RUN, v=st.integers(0, 1))
    def start_one_shot(self, r: int, v: int) -> Command:
        return self.perform(Start("one_shot", self.pick_new_run(r), "", "", "", v))

    @rule(target=commands, r=RUN, p=RUN, v=st.integers(0, 1))
    def continue_run(self, r: int, p: int, v: int) -> Command:
        """A continuation shaped like its predecessor (same session and parent) [K1]."""
        pid = self.pick_run(p, RunStatus.SUSPENDED)
        run = self.pick_new_run(r)
        known = self.model.runs.get(pid)
        session = known.start.session_id if known else self.sid(0)
        parent = known.start.parent_run_id if known else ""
        kind: StartKind
        if parent:
            kind = "child" if session else "one_shot_child"
        else:
            kind = "root" if session else "one_shot"
        return self.perform(Start(kind, run, session, parent, pid, v))

    # records and lifecycle ---------------------------------------------------

    @rule(target=commands, r=RUN, k=st.sampled_from(APPEND_KEYS), v=st.integers(0, 1))
    def append(self, r: int, k: str, v: int) -> Command:
        run = self.pick_run(r, RunStatus.RUNNING)
        return self.perform(Append(run, self.model.session_of(run), k, v))

    @rule(
        target=commands,
        r=RUN,
        keys=st.lists(st.sampled_from(APPEND_KEYS), min_size=1, max_size=3),
        v=st.integers(0, 1),
    )
    def append_batch(self, r: int, keys: list[str], v: int) -> Command:
        run = self.pick_run(r, RunStatus.RUNNING)
        return self.perform(AppendBatch(run, self.model.session_of(run), tuple(keys), v))

    @rule(
        target=commands,
        r=RUN,
        reason=st.sampled_from(REASONS),
        k=st.sampled_from(CANCEL_KEYS),
        t=st.integers(0, 1),
    )
    def cancel(self, r: int, reason: str, k: str, t: int) -> Command:
        run = self.pick_run(r, RunStatus.RUNNING)
        return self.perform(Cancel(run, self.model.session_of(run), reason, k, t))

    @rule(
        target=commands,
        r=RUN,
        cp=st.integers(0, 1),
        k=st.sampled_from(SUSPEND_KEYS),
        t=st.integers(0, 1),
    )
    def suspend(self, r: int, cp: int, k: str, t: int) -> Command:
        run = self.pick_run(r, RunStatus.RUNNING)
        return self.perform(Suspend(run, self.model.session_of(run), cp, k, t))

    @rule(
        target=commands,
        r=RUN,
        status=st.sampled_from(FINAL),
        k=st.sampled_from(TERMINAL_KEYS),
        t=st.integers(0, 1),
    )
    def finish(self, r: int, status: RunStatus, k: str, t: int) -> Command:
        """A terminal whose payload fits the run as the model knows it now."""
        run = self.pick_run(r, RunStatus.RUNNING)
        known = self.model.runs.get(run)
        labels = tuple(sorted(known.start.labels.items())) if known else ()
        reason = known.cancellation_reason if known else ""
        return self.perform(Terminal(run, self.model.session_of(run), labels, status, reason, k, t))

    @rule(target=commands, r=RUN, k=st.sampled_from(TOOL_KEYS), v=st.integers(0, 2))
    def tool_result(self, r: int, k: str, v: int) -> Command:
        """Save a tool result (variants 0 and 1) or load one (2)."""
        if v == 2:
            return self.perform(LoadToolResult(self.pick_run(r, None), k))
        return self.perform(SaveToolResult(self.pick_run(r, RunStatus.RUNNING), k, v))

    # retries -----------------------------------------------------------------

    @rule(command=commands)
    def exact_retry(self, command: Command) -> None:
        """[X1] the same call again."""
        self.perform(command)

    @rule(target=commands, command=commands, k=st.integers(0, 2))
    def changed_retry(self, command: Command, k: int) -> Command:
        """[X2] [X3] the same call with one value changed."""
        return self.perform(command.changed(k))

    @rule(command=commands)
    def unknown_payload_field(self, command: Command) -> None:
        """[J1] a lifecycle payload with a field its type does not know."""
        if isinstance(command, Start | Cancel | Suspend | Terminal):
            self.perform(dataclasses.replace(command, junk=True))

    # listings ----------------------------------------------------------------

    async def _store_view(self) -> dict[str, Any]:
        store = self.store
        sids = [self.sid(i) for i in range(SESSIONS)]
        mine = {"machine": self.ns}
        view: dict[str, Any] = {
            "sessions": ("ok", await all_sessions(store, (), mine, limit=PAGE - 1)),
            "sessions ended": (
                "ok",
                await all_sessions(store, (SessionStatus.ENDED,), mine, limit=PAGE - 1),
            ),
        }
        for team in TEAMS:
            view[f"sessions {team}"] = (
                "ok",
                [s.id for s in await all_sessions(store, (), {**mine, "team": team}, limit=1)],
            )
        for sid in sids:
            view[f"load_session {sid}"] = await _outcome(store.load_session, sid)
            view[f"load_session_status {sid}"] = await _outcome(store.load_session_status, sid)
            view[f"list_runs_by_session {sid}"] = await _outcome(store.list_runs_by_session, sid)
            view[f"list_runs_by_session {sid} running"] = await _outcome(
                store.list_runs_by_session, sid, (RunStatus.RUNNING,)
            )
            view[f"list_session_run_records {sid}"] = await _outcome(
                _pages, store.list_session_run_records, sid
            )
        for rid in (self.rid(i) for i in range(RUNS)):
            view[f"load_run {rid}"] = await _outcome(store.load_run, rid)
            view[f"list_run_records {rid}"] = await _outcome(_pages, store.list_run_records, rid)
            view[f"load_run_suspension {rid}"] = await _outcome(store.load_run_suspension, rid)
        return view

    def _model_view(self) -> dict[str, Any]:
        model = self.model
        sids = [self.sid(i) for i in range(SESSIONS)]
        listed = model.list_sessions()  # newest first
        view: dict[str, Any] = {
            "sessions": ("ok", listed),
            "sessions ended": ("ok", [s for s in listed if s.status is SessionStatus.ENDED]),
        }
        for team in TEAMS:
            view[f"sessions {team}"] = ("ok", [s.id for s in listed if s.labels["team"] == team])
        for sid in sids:
            view[f"load_session {sid}"] = _expect(model.load_session, sid)
            view[f"load_session_status {sid}"] = _expect(model.load_session_status, sid)
            view[f"list_runs_by_session {sid}"] = _expect(model.list_runs_by_session, sid)
            view[f"list_runs_by_session {sid} running"] = _expect(
                model.list_runs_by_session, sid, (RunStatus.RUNNING,)
            )
            view[f"list_session_run_records {sid}"] = _expect(model.session_log, sid)
        for rid in (self.rid(i) for i in range(RUNS)):
            view[f"load_run {rid}"] = _expect(model.load_run, rid)
            view[f"list_run_records {rid}"] = _expect(model.run_log, rid)
            view[f"load_run_suspension {rid}"] = _expect(model.load_run_suspension, rid)
        return view

    @invariant()
    def listings_agree(self) -> None:
        """[L9] [D3] [K2] everything the store lists equals what the model holds."""
        actual = self.loop.run_until_complete(self._store_view())
        expected = self._model_view()
        wrong = {k: (actual[k], expected[k]) for k in expected if actual[k] != expected[k]}
        assert not wrong, "store and model disagree:\n" + "\n".join(
            f"  {k}:\n    store: {a}\n    model: {m}" for k, (a, m) in wrong.items()
        )


class StatefulConformance(ConformanceBase):
    """Capability: random call sequences agree with an independent model."""

    stateful_examples: ClassVar[int] = 60
    """How many random sequences to run; slow backends may lower it."""

    stateful_steps: ClassVar[int] = 40
    """The most steps one sequence takes."""

    def test_state_machine(self, store_factory: StoreFactory) -> None:
        """[X1] [X2] [X3] [L1]-[L9] [J1] [K1] [K3] [C2] [D2]-[D4] random calls match a model."""

        class Machine(LedgerMachine):
            open_store = staticmethod(store_factory)

        run_state_machine_as_test(
            Machine,
            settings=settings(
                max_examples=self.stateful_examples,
                stateful_step_count=self.stateful_steps,
                deadline=None,
            ),
        )
