"""End to end: planner failures, store faults, retries, and refused input."""

from __future__ import annotations

import sqlite3
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentledger.engine import InProcessEngine, RetryPolicy
from agentledger.errors import (
    ContractError,
    RegistrationClosedError,
    SessionNotFoundError,
    TransientError,
    ValidationError,
)
from agentledger.runtime import (
    Agent,
    ModelPlanner,
    PlanInput,
    PlanResult,
    PlanResumeInput,
    QueueSink,
    Runtime,
    ToolCall,
    Toolset,
    tool,
    user_message,
)
from agentledger.runtime.wire import RunInput, RunOutput
from agentledger.storage import RunStatus, payloads
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply, tool_calls
from agentledger.transcript import Message, TextPart
from tests.runtime.support import (
    ONE_CALL,
    AnyStore,
    chat_runtime,
    now_ms,
    records,
    types,
    valid_transcript,
)

FAST = RetryPolicy(initial_interval=0.001, maximum_interval=0.01)


class Faulty:
    """A real store whose ``method`` raises ``error`` on its first ``failures`` calls.

    With ``after=True`` the call reaches the store first and the error is
    raised afterwards, as when a write commits but its answer is lost.
    """

    def __init__(
        self, inner: Any, method: str, failures: int, error: Exception, *, after: bool = False
    ) -> None:
        self._inner = inner
        self._method = method
        self._left = failures
        self._error = error
        self._after = after
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name != self._method:
            return attr

        async def faulty(arg: Any, /, *rest: Any, **kw: Any) -> Any:
            first = arg[0] if isinstance(arg, list) and arg else arg
            self.calls[getattr(first, "event_key", name)] += 1
            if self._left <= 0:
                return await attr(arg, *rest, **kw)
            self._left -= 1
            if self._after:
                await attr(arg, *rest, **kw)
            raise self._error

        return faulty


def _runtime(store: Any, model: Any, **agent: Any) -> Runtime:
    runtime = Runtime(store, engine=InProcessEngine(FAST), stream=QueueSink())
    runtime.register_model("m", model)
    runtime.register_agent(Agent("chat", ModelPlanner("m"), **agent))
    return runtime


@tool
async def ping() -> str:
    return "pong"


@pytest.mark.parametrize("after", [False, True], ids=["lost-request", "lost-answer"])
async def test_transient_store_failures_are_retried_exactly(
    store: AnyStore, session: str, after: bool
) -> None:
    """[X1] TransientError from the store is retried; a write that landed is an exact retry,
    so the log is the same as without faults. The faulted write is the start, which
    carries the prompt and the input."""
    faulty = Faulty(store, "start_root_run", 3, TransientError("db busy"), after=after)
    model = ScriptedModel([tool_calls(("p1", "ping", {})), reply("pong received")])
    runtime = _runtime(faulty, model, tools=[ping])
    out = await runtime.agent_client("chat").run(session, [user_message("ping")])
    assert out.status is RunStatus.COMPLETED
    assert await types(store, out.run_id) == ONE_CALL
    assert faulty.calls["start_root_run"] == 4  # three failures, then success
    await valid_transcript(store, out.run_id)


async def test_transient_failures_past_the_attempts_fail_the_run(
    store: AnyStore, session: str
) -> None:
    """Attempts run out -> the run fails with a retryable failure; its terminal is stored
    after what the start wrote (turn 1's phase with it). The faulted write is the planner
    turn's tool plan (a final plan in process is written with the run's completion)."""
    faulty = Faulty(store, "append_run_records", 10**6, TransientError("db down"))
    script = [tool_calls(("p1", "ping", {}))] * FAST.maximum_attempts
    runtime = _runtime(faulty, ScriptedModel(script), tools=[ping])
    out = await runtime.agent_client("chat").run(session, [user_message("hi")])
    assert out.status is RunStatus.FAILED
    assert out.failure is not None
    assert out.failure.retryable
    assert out.failure.code == "TransientError"
    assert sum(faulty.calls.values()) == FAST.maximum_attempts, faulty.calls
    assert await types(store, out.run_id) == [
        "run_started",
        "prompt_rendered",
        "transcript_messages_appended",
        "phase:prompted",
        "phase:planning",
        "run_completed",
    ]


async def test_a_contract_error_is_not_retried(store: AnyStore, session: str) -> None:
    """A ContractError is permanent: tried once, then the run fails.

    Here the start carrying the run's first records is refused; the run is
    started bare (the second call) so that it can end failed [O2].
    """
    faulty = Faulty(store, "start_root_run", 1, ValidationError(field="x", expected="y"))
    runtime = _runtime(faulty, ScriptedModel([reply("never")]))
    out = await runtime.agent_client("chat").run(session, [user_message("hi")])
    assert faulty.calls["start_root_run"] == 2
    assert out.status is RunStatus.FAILED
    assert out.failure is not None
    assert out.failure.kind == "activity_failed"
    assert not out.failure.retryable
    assert await types(store, out.run_id) == ["run_started", "run_completed"]
    await valid_transcript(store, out.run_id)


async def test_a_transient_model_error_is_retried(store: AnyStore, session: str) -> None:
    """A TransientError from the model retries the planner turn."""

    class Flaky(ScriptedModel):
        failed = 0

        async def complete(self, request):  # type: ignore[no-untyped-def]
            if self.failed < 2:
                self.failed += 1
                raise TransientError("429 slow down")
            return await super().complete(request)

    runtime = _runtime(store, Flaky([reply("finally")]))
    out = await runtime.agent_client("chat").run(session, [user_message("hi")])
    assert out.status is RunStatus.COMPLETED
    assert out.text == "finally"


class Broken:
    """A planner that raises."""

    async def plan_start(self, input: PlanInput) -> PlanResult:
        raise RuntimeError("planner exploded")

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        raise AssertionError("unreachable")


async def test_a_planner_that_raises_fails_the_run(store: AnyStore, session: str) -> None:
    """A planner error fails the run with a failure in run_completed."""
    runtime = Runtime(store, stream=QueueSink())
    runtime.register_agent(Agent("chat", Broken()))
    out = await runtime.agent_client("chat").run(session, [user_message("hi")])
    assert out.status is RunStatus.FAILED
    assert out.failure is not None
    assert out.failure.kind == "planner_error"
    assert "planner exploded" in out.failure.message
    stored = await records(store, out.run_id)
    done = payloads.RunCompleted.decode(stored[-1].payload)
    assert done.status == "failed"
    assert done.failure == out.failure
    assert await types(store, out.run_id) == [
        "run_started",
        "transcript_messages_appended",
        "phase:prompted",
        "phase:planning",
        "run_completed",
    ]
    await valid_transcript(store, out.run_id)


async def test_prepare_messages_failing_fails_the_turn(tmp_path: Path) -> None:
    """[R3] an error from prepare_messages fails the turn (here: a corrupt log).

    Stores refuse an unreadable transcript on write [R1], so the planner damages
    a stored one in the file (SQLite), which the read then finds: the second
    turn's (the first reads nothing: the runtime holds what the start wrote). In
    process the runtime follows the run's writes and a turn reads nothing at all, so
    its activities are handed out first, as to a worker elsewhere: then it reads.
    """
    store = await SQLiteStore.open(tmp_path / "runtime.db", durability="normal")

    class Corrupting:
        async def plan_start(self, input: PlanInput) -> PlanResult:
            await input.prepare_messages()
            return PlanResult.call(ToolCall(id="p1", name="ping"))

        async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
            with sqlite3.connect(store.path) as conn:
                query = "UPDATE records SET payload = ? WHERE run_id = ? AND type LIKE ?"
                damage = (b'{"not": "messages"}', input.run.run_id, "transcript_messages_%")
                assert conn.execute(query, damage).rowcount >= 1
            conn.close()
            await input.prepare_messages()
            raise AssertionError("unreachable")

    try:
        await store.create_session("s1", created_at=now_ms())
        runtime = Runtime(store, stream=QueueSink())
        runtime.register_agent(Agent("chat", Corrupting(), tools=[ping]))
        runtime.activity_table()
        out = await runtime.agent_client("chat").run("s1", [user_message("hi")])
    finally:
        await store.close()
    assert out.status is RunStatus.FAILED
    assert out.failure is not None
    assert out.failure.code == "CorruptRecordError"


_X = (TextPart(text="x"),)
_CALL = ToolCall(id="c", name="ping")


@pytest.mark.parametrize(
    "plan",
    [
        PlanResult(),
        PlanResult.call(_CALL, final=Message(role="assistant", parts=_X)),
        PlanResult(final=Message(role="user", parts=_X)),
        PlanResult.call(_CALL, message=Message(role="assistant", parts=_X)),
    ],
    ids=["empty", "two-choices", "user-final", "message-without-calls"],
)
async def test_an_invalid_plan_fails_the_run(
    store: AnyStore, session: str, plan: PlanResult
) -> None:
    """A plan that is not exactly one coherent step fails the run (invalid_plan)."""

    class Fixed:
        async def plan_start(self, input: PlanInput) -> PlanResult:
            return plan

        async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
            return plan

    runtime = Runtime(store, stream=QueueSink())
    runtime.register_agent(Agent("chat", Fixed(), tools=[ping]))
    out = await runtime.agent_client("chat").run(session, [user_message("hi")])
    assert out.status is RunStatus.FAILED
    assert out.failure is not None
    assert out.failure.kind == "invalid_plan"
    await valid_transcript(store, out.run_id)


async def test_reused_tool_call_ids_are_an_invalid_plan(store: AnyStore, session: str) -> None:
    """[T5] a call id already in the transcript would break it: the run fails instead."""
    model = ScriptedModel([tool_calls(("p1", "ping", {})), tool_calls(("p1", "ping", {}))])
    runtime = _runtime(store, model, tools=[ping])
    out = await runtime.agent_client("chat").run(session, [user_message("hi")])
    assert out.status is RunStatus.FAILED
    assert out.failure is not None
    assert out.failure.kind == "invalid_plan"
    assert "p1" in out.failure.message
    await valid_transcript(store, out.run_id)


async def test_max_turns(store: AnyStore, session: str) -> None:
    """A run that keeps calling tools fails after max_turns planner turns."""
    model = ScriptedModel([tool_calls((f"p{i}", "ping", {})) for i in range(3)])
    runtime = _runtime(store, model, tools=[ping], max_turns=2)
    out = await runtime.agent_client("chat").run(session, [user_message("hi")])
    assert out.failure is not None
    assert out.failure.kind == "max_turns_exceeded"
    assert len(model.requests) == 2
    await valid_transcript(store, out.run_id)


async def test_registration_closes_at_the_first_run(store: AnyStore, session: str) -> None:
    """Agents, toolsets and models cannot be registered once a run started."""
    runtime = chat_runtime(store, ScriptedModel([reply("hi")]))
    runtime.register_toolset(Toolset("extra", [ping]))
    await runtime.agent_client("chat").run(session, [user_message("hi")])
    with pytest.raises(RegistrationClosedError):
        runtime.register_agent(Agent("other", ModelPlanner("m")))
    with pytest.raises(RegistrationClosedError):
        runtime.register_toolset(Toolset("more", []))
    with pytest.raises(RegistrationClosedError):
        runtime.register_model("m2", ScriptedModel([]))


async def test_bad_calls_raise_before_anything_is_written(store: AnyStore, session: str) -> None:
    """Unknown sessions, agents and malformed input raise; no run is left behind."""
    runtime = chat_runtime(store, ScriptedModel([]))
    client = runtime.agent_client("chat")
    with pytest.raises(SessionNotFoundError):
        await client.run("no-such-session", [user_message("hi")])
    with pytest.raises(ValidationError):
        await runtime.agent_client("nobody").run(session, [user_message("hi")])
    with pytest.raises(ValidationError):
        await client.run(session, [])
    with pytest.raises(ValidationError):
        await client.run(session, [reply("assistant last").message])
    with pytest.raises(ContractError):
        await client.run(session, [user_message("hi")], labels={"a": 1})  # type: ignore[dict-item]
    assert await store.list_runs_by_session(session) == []


async def test_unknown_toolset_is_refused_at_the_first_run(store: AnyStore, session: str) -> None:
    """A typo in an agent's tools fails before any run, naming what is registered."""
    runtime = Runtime(store, stream=QueueSink())
    runtime.register_model("m", ScriptedModel([]))
    runtime.register_agent(Agent("chat", ModelPlanner("m"), tools=["nope"]))
    with pytest.raises(ValidationError, match="registered toolset"):
        await runtime.agent_client("chat").run(session, [user_message("hi")])


async def test_a_bare_function_as_a_tool_is_refused_at_registration(
    store: AnyStore, session: str
) -> None:
    """Registration checks what it can at once: a plain async function is not a Tool,
    and refusing it leaves the runtime usable for the agents that are fine."""

    async def lookup(city: str) -> str:
        return city

    runtime = chat_runtime(store, ScriptedModel([reply("hi")]))
    with pytest.raises(ValidationError, match="@tool"):
        runtime.register_agent(Agent("bad", ModelPlanner("m"), tools=[lookup]))  # type: ignore[list-item]
    out = await runtime.agent_client("chat").run(session, [user_message("hi")])
    assert out.status is RunStatus.COMPLETED


async def test_an_unknown_agent_is_refused_by_agent_client(store: AnyStore) -> None:
    """agent_client names the registered agents instead of failing at run time."""
    runtime = chat_runtime(store, ScriptedModel([]))
    with pytest.raises(ValidationError, match="registered agent") as e:
        runtime.agent_client("nobody")
    assert e.value.field == "agent_id"


async def test_a_missing_toolset_is_reported_by_agent_client(store: AnyStore) -> None:
    """agent_client checks the whole registration, so a typo surfaces before any run."""
    runtime = Runtime(store, stream=QueueSink())
    runtime.register_model("m", ScriptedModel([]))
    runtime.register_agent(Agent("chat", ModelPlanner("m"), tools=["nope"]))
    with pytest.raises(ValidationError, match="registered toolset"):
        runtime.agent_client("chat")
    runtime.register_toolset(Toolset("nope", [ping]))  # registration is still open: fix it
    assert runtime.agent_client("chat").agent_id == "chat"


async def test_a_string_is_one_user_message(store: AnyStore, session: str) -> None:
    """client.run(session_id, "text") sends the text as one user message."""
    model = ScriptedModel([reply("hello"), reply("again")])
    runtime = chat_runtime(store, model)
    client = runtime.agent_client("chat")
    out = await client.run(session, "hi there")
    assert out.text == "hello"
    assert model.requests[0].messages[-1] == user_message("hi there")
    one = await client.run_one_shot("again please")
    assert one.text == "again"
    with pytest.raises(ValidationError):
        await client.run(session, "")


async def test_a_bug_in_the_run_loop_fails_the_run(store: AnyStore, session: str) -> None:
    """An unexpected error in the loop itself (here: a new run started straight on the
    engine with no message, which the loop indexes) ends the run failed with a recorded
    run_completed, as on Temporal, instead of leaving it running."""
    runtime = chat_runtime(store, ScriptedModel([reply("never")]))
    out = await run_with_a_loop_bug(runtime, session)
    assert out.status is RunStatus.FAILED
    assert out.failure is not None
    assert (out.failure.kind, out.failure.code) == ("workflow_error", "IndexError")
    done = payloads.RunCompleted.decode((await records(store, out.run_id))[-1].payload)
    assert done.failure == out.failure
    assert (await store.load_run(out.run_id)).status is RunStatus.FAILED


async def run_with_a_loop_bug(runtime: Runtime, session: str) -> RunOutput:
    """Start a run whose input the client would refuse, straight on the engine."""
    runtime.activity_table()  # closes registration, as a first run would
    run_id = f"run-with-a-loop-bug-{uuid.uuid4().hex[:8]}"
    inp = RunInput(run_id=run_id, agent_id="chat", session_id=session, turn_id="t1")
    await runtime.engine.start(run_id, inp)
    out: RunOutput = await runtime.engine.result(run_id)
    return out


class LoseAnswerOnce:
    """A real store whose ``append_run_records`` (``append_turn_records``,
    ``record_run_terminal``) commits the write holding record ``key`` and then, once,
    raises a TransientError: the write is in, its activity does not know."""

    def __init__(self, inner: Any, key: str) -> None:
        self._inner = inner
        self._key = key
        self.lost = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append_run_records(self, records: Any) -> Any:
        results = await self._inner.append_run_records(records)
        if not self.lost and any(r.event_key == self._key for r in records):
            self.lost += 1
            raise TransientError("the answer was lost", operation="append_run_records")
        return results

    async def append_turn_records(self, records: Any) -> Any:
        done = await self._inner.append_turn_records(records)
        if not self.lost and any(r.event_key == self._key for r in records):
            self.lost += 1
            raise TransientError("the answer was lost", operation="append_turn_records")
        return done

    async def record_run_terminal(self, cmd: Any) -> Any:
        done = await self._inner.record_run_terminal(cmd)
        if not self.lost and any(r.event_key == self._key for r in cmd.records):
            self.lost += 1
            raise TransientError("the answer was lost", operation="record_run_terminal")
        return done


@pytest.mark.parametrize(
    "key", ["turn:1:assistant:messages", "turn:1:tool:c1:result", "turn:2:final:messages"]
)
async def test_a_retry_after_a_lost_write_answer_reads_instead_of_working_again(
    store: AnyStore, session: str, key: str
) -> None:
    """The planner turn (or tool call) stored its records, then failed: its retry reads them,
    so the model and the tool are each called once per turn; the log is a clean run's."""
    ran: list[str] = []

    @tool
    async def weather(city: str) -> str:
        """The weather."""
        ran.append(city)
        return f"{city}: 21C"

    model = ScriptedModel([tool_calls(("c1", "weather", {"city": "Oslo"})), reply("Warm.")])
    lossy = LoseAnswerOnce(store, key)
    runtime = _runtime(lossy, model, tools=[weather])
    out = await runtime.agent_client("chat").run(session, [user_message("Oslo?")])
    assert lossy.lost == 1
    assert out.status is RunStatus.COMPLETED, out.failure
    assert out.text == "Warm."
    assert len(model.requests) == 2  # one per turn: a re-asked model would exhaust the script
    assert ran == ["Oslo"]
    assert await types(store, out.run_id) == ONE_CALL
    await valid_transcript(store, out.run_id)


class LoseSavedResultAnswers:
    """A real store whose ``save_tool_result`` commits, then raises a TransientError once
    per call: every parallel call's result is in the store, its activity does not know."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.lost: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def save_tool_result(self, run_id: str, call_key: str, data: bytes) -> bytes:
        kept = await self._inner.save_tool_result(run_id, call_key, data)
        if call_key not in self.lost:
            self.lost.append(call_key)
            raise TransientError("the answer was lost", operation="save_tool_result")
        return kept  # type: ignore[no-any-return]


async def test_retried_parallel_calls_read_their_saved_results(
    store: AnyStore, session: str
) -> None:
    """Two parallel calls each save their result, then lose the answer: each retry reads the
    saved result, so each tool runs once, and the results are recorded in call order."""
    ran: list[str] = []

    @tool
    async def weather(city: str) -> str:
        """The weather."""
        ran.append(city)
        return f"{city}: 21C"

    model = ScriptedModel(
        [
            tool_calls(("c1", "weather", {"city": "Oslo"}), ("c2", "weather", {"city": "Rome"})),
            reply("Both warm."),
        ]
    )
    lossy = LoseSavedResultAnswers(store)
    runtime = _runtime(lossy, model, tools=[weather])
    out = await runtime.agent_client("chat").run(session, [user_message("Oslo? Rome?")])
    assert out.status is RunStatus.COMPLETED, out.failure
    assert sorted(lossy.lost) == ["turn:1:tool:c1:result", "turn:1:tool:c2:result"]
    assert sorted(ran) == ["Oslo", "Rome"]
    results = [r for r in await records(store, out.run_id) if r.type == "tool_result_received"]
    assert [r.event_key for r in results] == ["turn:1:tool:c1:result", "turn:1:tool:c2:result"]
    assert [b"Oslo: 21C" in r.payload for r in results] == [True, False]
    await valid_transcript(store, out.run_id)


class LoseSuspensionAnswerOnce:
    """A real store whose ``record_run_suspension`` commits, then once raises a TransientError."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.lost = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def record_run_suspension(self, cmd: Any) -> Any:
        result = await self._inner.record_run_suspension(cmd)
        if not self.lost:
            self.lost += 1
            raise TransientError("the answer was lost", operation="record_run_suspension")
        return result


async def test_a_retried_turn_that_waits_for_the_user_reads_its_suspension(
    store: AnyStore, session: str
) -> None:
    """A plan that waits for confirmation is recorded and the run suspended by its planner
    turn; when that answer is lost, the retry reads the checkpoint: one model call."""
    ran: list[str] = []

    @tool(confirm=True)
    async def book(place: str) -> str:
        """Book a table (needs the user's confirmation)."""
        ran.append(place)
        return "booked"

    model = ScriptedModel([tool_calls(("b1", "book", {"place": "Chez Nous"}), text="Book it?")])
    lossy = LoseSuspensionAnswerOnce(store)
    runtime = _runtime(lossy, model, tools=[book])
    out = await runtime.agent_client("chat").run(session, [user_message("Book Chez Nous")])
    assert lossy.lost == 1
    assert out.status is RunStatus.SUSPENDED, out.failure
    assert out.awaiting is not None
    assert out.awaiting.kind == "confirmation"
    assert out.awaiting.question == "Book it?"
    assert [c.id for c in out.awaiting.calls] == ["b1"]
    assert len(model.requests) == 1  # the retry read the plan: the model was asked once
    assert ran == []
    assert await types(store, out.run_id) == [
        "run_started",
        "prompt_rendered",
        "transcript_messages_appended",
        "phase:prompted",
        "phase:planning",
        "model_usage",
        "transcript_messages_appended",
        "run_suspended",
    ]
    await valid_transcript(store, out.run_id)
