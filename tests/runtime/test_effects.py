"""Tools that touch the world: effect classes, idempotency keys, attempts, calls in doubt."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentledger.engine import InProcessEngine, RetryPolicy
from agentledger.errors import CorruptRecordError, TransientError, ValidationError
from agentledger.runtime import (
    Agent,
    Answer,
    AwaitClarification,
    ModelPlanner,
    PlanResult,
    QueueSink,
    Runtime,
    Tool,
    ToolContext,
    ToolFailed,
    ToolHappened,
    ToolRetry,
    events,
    idempotency_key,
    tool,
)
from agentledger.runtime.events import event_from_record
from agentledger.runtime.records import (
    RecordSpec,
    ToolAnsweredPayload,
    ToolStartedPayload,
    decode_json,
)
from agentledger.storage import Record, RecordBuilder, RunStart, RunStatus
from agentledger.testing import ScriptedModel, reply, tool_calls
from agentledger.transcript import ToolResultPart
from tests.runtime.golden_run import golden_records
from tests.runtime.support import AnyStore, now_ms, records, valid_transcript

FAST = RetryPolicy(initial_interval=0.001, maximum_interval=0.01)
GOLDEN = Path(__file__).parent / "data" / "retry_run_golden.json"


def _runtime(store: Any, model: Any, tools: list[Tool], **agent: Any) -> Runtime:
    runtime = Runtime(store, engine=InProcessEngine(FAST), stream=QueueSink())
    runtime.register_model("m", model)
    runtime.register_agent(Agent("chat", ModelPlanner("m"), tools=tools, **agent))
    return runtime


class LoseWrite:
    """A real store whose first write holding a record with ``key`` (or the private save of
    ``key``) never reaches it: a TransientError instead, as when the connection drops."""

    def __init__(self, inner: Any, *keys: str) -> None:
        self._inner = inner
        self._keys = set(keys)
        self.lost: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append_run_records(self, batch: Any) -> Any:
        for r in batch:
            if r.event_key in self._keys and r.event_key not in self.lost:
                self.lost.append(r.event_key)
                raise TransientError("connection dropped", operation="append_run_records")
        return await self._inner.append_run_records(batch)

    async def append_turn_records(self, batch: Any) -> Any:
        for r in batch:
            if r.event_key in self._keys and r.event_key not in self.lost:
                self.lost.append(r.event_key)
                raise TransientError("connection dropped", operation="append_turn_records")
        return await self._inner.append_turn_records(batch)

    async def save_tool_result(self, run_id: str, call_key: str, data: bytes) -> bytes:
        if call_key in self._keys and call_key not in self.lost:
            self.lost.append(call_key)
            raise TransientError("connection dropped", operation="save_tool_result")
        return await self._inner.save_tool_result(run_id, call_key, data)  # type: ignore[no-any-return]


class Ledger:
    """What a world-changing tool did: each call's key and attempt, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []

    def tool(self, effect: Any, name: str = "send", fail_first: bool = False) -> Tool:
        async def send(to: str, ctx: ToolContext) -> str:
            self.calls.append((ctx.idempotency_key, ctx.attempt, to))
            if fail_first and len(self.calls) == 1:
                raise TransientError("the mail server is busy")
            return f"sent to {to}"

        return Tool(send, name=name, description="Sends a message.", effect=effect)


def _of_type(rows: list[Record], kind: str) -> list[Record]:
    return [r for r in rows if r.type == kind]


# --------------------------------------------------------------------- F1, F2


def test_the_key_is_the_documented_derivation() -> None:
    key = idempotency_key("run-1", "call-7")
    digest = hashlib.sha256(b"run-1\x00call-7").hexdigest()
    assert key == "al1-" + digest
    assert len(key) == 68
    assert key.isascii()
    assert key == key.strip()
    # the separator keeps ("ab", "c") and ("a", "bc") apart
    assert idempotency_key("ab", "c") != idempotency_key("a", "bc")
    assert len(idempotency_key("r" * 500, "é" * 300)) == 68


def test_an_invalid_effect_is_refused_when_the_tool_is_made() -> None:
    async def f() -> str:
        return ""

    with pytest.raises(ValidationError, match="effect"):
        tool(effect="twice")  # type: ignore[call-overload]
    with pytest.raises(ValidationError, match="effect"):
        Tool(f, effect="sometimes")  # type: ignore[arg-type]
    assert tool(effect="once")(f).effect == "once"
    assert tool(f).effect == "retry"


async def test_retry_only_runs_write_the_records_they_wrote_before_effects() -> None:
    """Byte for byte: types, event keys and payloads of a scripted run of retry tools equal
    those the code before tool effects wrote (tests/runtime/data/retry_run_golden.json)."""
    assert await golden_records() == json.loads(GOLDEN.read_text())


async def test_a_keyed_tool_gets_the_same_key_on_its_retry(store: AnyStore, session: str) -> None:
    ledger = Ledger()
    send = ledger.tool("keyed", fail_first=True)
    model = ScriptedModel([tool_calls(("c1", "send", {"to": "ann"})), reply("Done.")])
    runtime = _runtime(store, model, [send])
    out = await runtime.agent_client("chat").run(session, "Send it", run_id="r-keyed")
    assert out.status is RunStatus.COMPLETED, out.failure
    key = idempotency_key("r-keyed", "c1")
    assert ledger.calls == [(key, 1, "ann"), (key, 2, "ann")]
    rows = await records(store, out.run_id)
    scheduled = _of_type(rows, "tool_call_scheduled")[0]
    assert json.loads(scheduled.payload)["effect"] == "keyed"
    assert _of_type(rows, "tool_call_started") == []  # only once calls are started


async def test_a_once_tool_records_its_start_with_the_plan(store: AnyStore, session: str) -> None:
    """The started record is in the planner turn's write, with the scheduled one: a run of a
    once tool takes as many store writes as a run of a retry tool."""
    writes: dict[str, int] = {}
    for effect in ("retry", "once"):
        ledger = Ledger()
        counting = _Counting(store)
        model = ScriptedModel([tool_calls(("c1", "send", {"to": "bo"})), reply("Done.")])
        runtime = _runtime(counting, model, [ledger.tool(effect)])
        out = await runtime.agent_client("chat").run(session, "Send", run_id=f"r-{effect}")
        assert out.status is RunStatus.COMPLETED, out.failure
        writes[effect] = counting.writes
        assert ledger.calls == [(idempotency_key(f"r-{effect}", "c1"), 1, "bo")]
    assert writes["once"] == writes["retry"]
    rows = await records(store, "r-once")
    started = _of_type(rows, "tool_call_started")
    assert [r.event_key for r in started] == ["turn:1:tool:c1:started:1"]
    payload = decode_json(started[0].payload, ToolStartedPayload)
    assert payload == ToolStartedPayload(
        tool_call_id="c1", tool_name="send", key=idempotency_key("r-once", "c1"), attempt=1
    )
    scheduled = _of_type(rows, "tool_call_scheduled")[0]
    assert started[0].timestamp == scheduled.timestamp
    assert int(started[0].id) == int(scheduled.id) + 1
    retry_scheduled = _of_type(await records(store, "r-retry"), "tool_call_scheduled")[0]
    assert b"effect" not in retry_scheduled.payload


class _Counting:
    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.writes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append_run_records(self, batch: Any) -> Any:
        self.writes += 1
        return await self._inner.append_run_records(batch)

    async def append_turn_records(self, batch: Any) -> Any:
        self.writes += 1
        return await self._inner.append_turn_records(batch)


async def test_a_once_tool_transient_error_is_not_retried(store: AnyStore, session: str) -> None:
    ledger = Ledger()
    model = ScriptedModel([tool_calls(("c1", "send", {"to": "cy"})), reply("Hm.")])
    runtime = _runtime(store, model, [ledger.tool("once", fail_first=True)])
    out = await runtime.agent_client("chat").run(session, "Send")
    assert out.status is RunStatus.COMPLETED, out.failure
    assert len(ledger.calls) == 1
    result = _of_type(await records(store, out.run_id), "tool_result_received")[0]
    assert b"never called a second time" in result.payload
    assert b'"is_error":true' in result.payload


# ------------------------------------------------------------------------ F3


async def _in_doubt_run(store: Any, session: str, ledger: Ledger, *replies: Any) -> Any:
    """A run whose once call ran, then lost its result write: suspended in doubt."""
    lossy = LoseWrite(store, "turn:1:tool:c1:result")
    model = ScriptedModel([tool_calls(("c1", "send", {"to": "di"})), *replies])
    runtime = _runtime(lossy, model, [ledger.tool("once")])
    out = await runtime.agent_client("chat").run(session, "Send", run_id="r-doubt")
    assert lossy.lost == ["turn:1:tool:c1:result"]
    return runtime, out


async def test_a_once_call_in_doubt_is_never_called_again(store: AnyStore, session: str) -> None:
    ledger = Ledger()
    _, out = await _in_doubt_run(store, session, ledger)
    assert len(ledger.calls) == 1  # the retried activity did not run the tool again
    assert out.status is RunStatus.SUSPENDED
    asked = out.awaiting
    assert asked is not None
    assert asked.kind == "in_doubt"
    assert asked.run_id == "r-doubt"
    doubt = asked.in_doubt
    assert doubt is not None
    assert (doubt.tool_name, doubt.tool_call_id, doubt.attempt) == ("send", "c1", 1)
    assert doubt.key == idempotency_key("r-doubt", "c1")
    assert doubt.input == {"to": "di"}
    rows = await records(store, "r-doubt")
    assert doubt.started_at == _of_type(rows, "tool_call_started")[0].timestamp
    assert _of_type(rows, "tool_result_received") == []
    assert (await store.load_run("r-doubt")).status is RunStatus.SUSPENDED
    await valid_transcript(store, "r-doubt")


async def test_happened_gives_the_model_the_hosts_result(store: AnyStore, session: str) -> None:
    ledger = Ledger()
    runtime, _ = await _in_doubt_run(store, session, ledger, reply("It went out."))
    client = runtime.agent_client("chat")
    out = await client.resume(session, "r-doubt", ToolHappened({"id": 42}, by="ops@example"))
    assert out.status is RunStatus.COMPLETED, out.failure
    assert out.text == "It went out."
    assert len(ledger.calls) == 1
    rows = await records(store, out.run_id)
    answered = decode_json(_of_type(rows, "tool_call_answered")[0].payload, ToolAnsweredPayload)
    assert (answered.decision, answered.by, answered.result) == (
        "happened",
        "ops@example",
        {"id": 42},
    )
    assert answered.key == idempotency_key("r-doubt", "c1")
    messages = await valid_transcript(store, out.run_id)
    result = next(p for m in messages for p in m.parts if isinstance(p, ToolResultPart))
    assert (result.content, result.is_error) == ({"id": 42}, False)


async def test_failed_gives_the_model_an_error(store: AnyStore, session: str) -> None:
    ledger = Ledger()
    runtime, _ = await _in_doubt_run(store, session, ledger, reply("Sorry."))
    out = await runtime.agent_client("chat").resume(
        session, "r-doubt", ToolFailed("bounced", by="ops")
    )
    assert out.status is RunStatus.COMPLETED, out.failure
    messages = await valid_transcript(store, out.run_id)
    result = next(p for m in messages for p in m.parts if isinstance(p, ToolResultPart))
    assert result.is_error
    assert "bounced" in str(result.content)
    answered = _of_type(await records(store, out.run_id), "tool_call_answered")[0]
    assert json.loads(answered.payload)["decision"] == "failed"
    assert len(ledger.calls) == 1


async def test_retry_runs_the_call_again_with_its_key(store: AnyStore, session: str) -> None:
    ledger = Ledger()
    runtime, _ = await _in_doubt_run(store, session, ledger, reply("Sent now."))
    sink = runtime.stream
    out = await runtime.agent_client("chat").resume(session, "r-doubt", ToolRetry(by="ops"))
    assert out.status is RunStatus.COMPLETED, out.failure
    key = idempotency_key("r-doubt", "c1")  # the first run's key, carried
    assert ledger.calls == [(key, 1, "di"), (key, 2, "di")]
    rows = await records(store, out.run_id)
    kinds = [r.type for r in rows]
    assert kinds.index("tool_call_answered") < kinds.index("tool_call_started")
    assert kinds.index("tool_call_started") < kinds.index("tool_result_received")
    started = decode_json(_of_type(rows, "tool_call_started")[0].payload, ToolStartedPayload)
    assert (started.key, started.attempt) == (key, 2)
    assert _of_type(rows, "tool_call_started")[0].event_key == "resume:tool:c1:started:2"
    assert isinstance(sink, QueueSink)
    seen = [
        e for e in sink.events if isinstance(e, (events.ToolCallStarted, events.ToolCallAnswered))
    ]
    assert {type(e).__name__ for e in seen} == {"ToolCallStarted", "ToolCallAnswered"}


async def test_only_a_decision_answers_a_call_in_doubt(store: AnyStore, session: str) -> None:
    ledger = Ledger()
    runtime, _ = await _in_doubt_run(store, session, ledger)
    client = runtime.agent_client("chat")
    for wrong in ("yes", Answer(text="yes"), Answer.approve()):
        with pytest.raises(ValidationError):
            await client.start_resume(session, "r-doubt", wrong)
    with pytest.raises(ValidationError, match="result"):
        await client.start_resume(session, "r-doubt", ToolHappened(object()))
    assert (await store.load_run("r-doubt")).successor_run_id == ""


async def test_a_decision_answers_nothing_else(store: AnyStore, session: str) -> None:
    class Asks:
        async def plan_start(self, _: Any) -> PlanResult:
            return PlanResult(await_=AwaitClarification(question="Which?"))

        async def plan_resume(self, _: Any) -> PlanResult:  # pragma: no cover
            raise AssertionError

    runtime = Runtime(store, stream=QueueSink())
    runtime.register_agent(Agent("asker", Asks()))
    client = runtime.agent_client("asker")
    out = await client.run(session, "Hi")
    assert out.status is RunStatus.SUSPENDED
    for decision in (ToolRetry(), ToolHappened("x"), ToolFailed("no")):
        with pytest.raises(ValidationError, match="decision"):
            await client.start_resume(session, out.run_id, decision)


async def test_parallel_calls_in_doubt_are_decided_one_by_one(
    store: AnyStore, session: str
) -> None:
    ledger = Ledger()
    quick = Ledger()
    lossy = LoseWrite(store, "turn:1:tool:c1:result", "turn:1:tool:c2:result")
    model = ScriptedModel(
        [
            tool_calls(
                ("c1", "send", {"to": "a"}),
                ("c2", "send", {"to": "b"}),
                ("c3", "ping", {"to": "c"}),
            ),
            reply("Both settled."),
        ]
    )
    runtime = _runtime(lossy, model, [ledger.tool("once"), quick.tool("retry", name="ping")])
    client = runtime.agent_client("chat")
    first = await client.run(session, "Send", run_id="r-par")
    assert first.status is RunStatus.SUSPENDED
    assert first.awaiting is not None
    assert first.awaiting.in_doubt is not None
    assert first.awaiting.in_doubt.tool_call_id == "c1"
    assert len(ledger.calls) == 2
    assert len(quick.calls) == 1
    # the retry call's result is recorded before the run suspends
    rows = await records(store, "r-par")
    assert [r.event_key for r in _of_type(rows, "tool_result_received")] == [
        "turn:1:tool:c3:result"
    ]
    second = await client.resume(session, "r-par", ToolHappened("ok a"))
    assert second.status is RunStatus.SUSPENDED
    assert second.awaiting is not None
    assert second.awaiting.in_doubt is not None
    assert second.awaiting.in_doubt.tool_call_id == "c2"
    assert second.awaiting.in_doubt.key == idempotency_key("r-par", "c2")
    third = await client.resume(session, second.run_id, ToolFailed("lost b"))
    assert third.status is RunStatus.COMPLETED, third.failure
    assert len(ledger.calls) == 2
    assert len(quick.calls) == 1
    messages = await valid_transcript(store, third.run_id)
    results = {
        p.tool_use_id: (p.content, p.is_error)
        for m in messages
        for p in m.parts
        if isinstance(p, ToolResultPart)
    }
    assert results["c1"] == ("ok a", False)
    assert results["c2"][1] is True
    assert "lost b" in str(results["c2"][0])
    assert results["c3"] == ("sent to c", False)


async def test_a_child_in_doubt_suspends_its_parent(store: AnyStore, session: str) -> None:
    ledger = Ledger()
    boss = ScriptedModel([tool_calls(("p1", "mailer", {"request": "mail di"})), reply("Done.")])
    worker = ScriptedModel([tool_calls(("c1", "send", {"to": "di"})), reply("Mailed.")])
    lossy = LoseWrite(store, "turn:1:tool:c1:result")
    runtime = Runtime(lossy, engine=InProcessEngine(FAST), stream=QueueSink())
    runtime.register_model("boss", boss)
    runtime.register_model("worker", worker)
    runtime.register_agent(
        Agent("mailer", ModelPlanner("worker"), tools=[ledger.tool("once")], description="Mails.")
    )
    runtime.register_agent(Agent("chat", ModelPlanner("boss"), agents=["mailer"]))
    client = runtime.agent_client("chat")
    out = await client.run(session, "Mail di", run_id="r-top")
    assert out.status is RunStatus.SUSPENDED
    assert out.awaiting is not None
    assert out.awaiting.kind == "in_doubt"
    assert out.awaiting.run_id == "r-top.p1"
    assert out.awaiting.in_doubt is not None
    assert out.awaiting.in_doubt.key == idempotency_key("r-top.p1", "c1")
    with pytest.raises(ValidationError):
        await client.start_resume(session, "r-top", "it happened")
    done = await client.resume(session, "r-top", ToolHappened("mailed", by="ops"))
    assert done.status is RunStatus.COMPLETED, done.failure
    assert done.text == "Done."
    assert len(ledger.calls) == 1


async def test_damaged_payloads_of_the_new_records_are_corrupt() -> None:
    from datetime import UTC, datetime

    base = {
        "run_id": "r",
        "agent_id": "a",
        "session_id": "s",
        "turn_id": "t",
        "event_key": "k",
        "timestamp": datetime(2026, 1, 1, tzinfo=UTC),
        "id": "3",
    }
    damaged = [
        ("tool_call_started", b'{"tool_call_id":"c","tool_name":"t","key":"k"}'),
        ("tool_call_started", b'{"tool_call_id":"c","tool_name":"t","key":"k","attempt":1,"x":1}'),
        ("tool_call_answered", b'{"tool_call_id":"c","tool_name":"t","key":"k","decision":"?"}'),
        ("tool_call_scheduled", b'{"tool_call_id":"c","tool_name":"t","input":{},"effect":"x"}'),
    ]
    for kind, payload in damaged:
        record = Record(type=kind, payload=payload, **base)
        with pytest.raises(CorruptRecordError):
            event_from_record(record)
    good = Record(
        type="tool_call_answered",
        payload=msgspec.json.encode(
            {"tool_call_id": "c", "tool_name": "t", "key": "k", "decision": "retry"}
        ),
        **base,
    )
    assert isinstance(event_from_record(good), events.ToolCallAnswered)


async def test_started_records_are_ordinary_records(store: AnyStore, session: str) -> None:
    """An exact retry of a tool_call_started returns its id; the same call started again
    with another attempt is a new record."""
    run = RunStart(run_id="r-rec", agent_id="chat", session_id=session, started_at=now_ms())
    builder = RecordBuilder(run, turn_id="t")
    await store.start_root_run(builder.root_start())
    key = idempotency_key("r-rec", "c1")
    specs = [RecordSpec.started("turn:1", "c1", "send", key, n) for n in (1, 1, 2)]
    at = now_ms()
    built = [builder.record(s.type, s.payload, event_key=s.event_key, at=at) for s in specs]
    first, again, second = [await store.append_run_record(r) for r in built]
    assert (first.inserted, again.inserted, second.inserted) == (True, False, True)
    assert again.id == first.id
    assert second.id != first.id


async def test_a_call_in_doubt_is_asked_before_a_waiting_child(
    store: AnyStore, session: str
) -> None:
    """One step: a once call in doubt and a child run that asks the user. The run asks
    about the call first (a child's answer is refused then); then the child's question."""
    from tests.runtime.test_nested import _Asker

    ledger = Ledger()
    model = ScriptedModel(
        [
            tool_calls(("p1", "send", {"to": "a"}), ("p2", "helper", {"request": "ask"})),
            reply("Both done."),
        ]
    )
    runtime = Runtime(
        LoseWrite(store, "turn:1:tool:p1:result"), engine=InProcessEngine(FAST), stream=QueueSink()
    )
    runtime.register_model("m", model)
    runtime.register_agent(Agent("helper", _Asker("Which city?"), description="Asks."))
    runtime.register_agent(
        Agent("chat", ModelPlanner("m"), tools=[ledger.tool("once")], agents=["helper"])
    )
    client = runtime.agent_client("chat")
    first = await client.run(session, "Go", run_id="r-mixed")
    assert first.awaiting is not None
    assert (first.awaiting.kind, first.awaiting.run_id) == ("in_doubt", "r-mixed")
    with pytest.raises(ValidationError):
        await client.start_resume(session, "r-mixed", "Oslo")
    second = await client.resume(session, "r-mixed", ToolHappened("sent"))
    assert second.status is RunStatus.SUSPENDED
    assert second.awaiting is not None
    assert (second.awaiting.kind, second.awaiting.question) == ("clarification", "Which city?")
    with pytest.raises(ValidationError):
        await client.start_resume(session, second.run_id, ToolRetry())
    third = await client.resume(session, second.run_id, "Oslo")
    assert third.status is RunStatus.COMPLETED, third.failure
    assert third.text == "Both done."
    assert len(ledger.calls) == 1
    messages = await valid_transcript(store, third.run_id)
    got = {
        p.tool_use_id: p.content for m in messages for p in m.parts if isinstance(p, ToolResultPart)
    }
    assert got == {"p1": "sent", "p2": "You said Oslo."}
