"""The traced scenarios shared by both engines, and how a trace is drawn and checked.

Each :class:`Scenario` registers its agents (``setup``), drives its runs on a
runtime under a ``test`` span (``drive``) and names the span tree it must
leave (``expected``): the same tree on the in-process and the Temporal engine.
Store spans are left out of the drawing and checked on their own
(:func:`check_store_spans`): each hangs off a run, a turn or the caller, and
their record events name exactly the records the ledger holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from agentledger.errors import ProviderError, TransientError
from agentledger.observability import RECORD_EVENT
from agentledger.providers.model import ModelRequest, ModelResponse
from agentledger.runtime import (
    Agent,
    Answer,
    ModelPlanner,
    Runtime,
    tool,
    user_message,
)
from agentledger.storage import RunStatus
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.runtime.support import records

__all__ = [
    "SCENARIOS",
    "Failing",
    "Scenario",
    "check_store_spans",
    "check_turns",
    "draw",
    "one_trace",
    "weather",
]

TEST_SPAN = "test"

SPANS_ENV = "AGENTLEDGER_TEST_SPANS"
"""Where a traced worker process (``apps.py``) writes its spans, one JSON line each."""

_MARKS = (
    ("agentledger.run.status", "status={}"),
    ("agentledger.run.cancellation_reason", "reason={!r}"),
    ("agentledger.turn.number", "#{}"),
    ("agentledger.turn.resume", "resume={}"),
    ("agentledger.tool.is_error", "is_error={}"),
    ("agentledger.interrupted", "interrupted={}"),
    ("error.type", "error={}"),
)


def _label(span: ReadableSpan) -> str:
    attributes = span.attributes or {}
    marks = [fmt.format(attributes[key]) for key, fmt in _MARKS if key in attributes]
    if span.name == "agentledger.run":
        marks.insert(0, str(attributes["agentledger.agent.id"]))
    return " ".join([span.name, *marks])


def _is_store(span: ReadableSpan) -> bool:
    return span.name.startswith("agentledger.store ")


def draw(spans: Sequence[ReadableSpan], *, store: bool = False) -> list[str]:
    """The span tree, two spaces per level, children in start order (store spans left out)."""
    shown = [s for s in spans if store or not _is_store(s)]
    ids = {s.context.span_id for s in shown}
    children: dict[int | None, list[ReadableSpan]] = {}
    for s in shown:
        parent = s.parent.span_id if s.parent is not None else None
        children.setdefault(parent if parent in ids else None, []).append(s)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for s in sorted(children.get(parent, []), key=lambda s: (s.start_time or 0, s.name)):
            lines.append("  " * depth + _label(s))
            walk(s.context.span_id, depth + 1)

    walk(None, 0)
    return lines


def one_trace(spans: Sequence[ReadableSpan]) -> int:
    """The one trace id all ``spans`` share (fails when there are several)."""
    traces = {s.context.trace_id for s in spans}
    assert len(traces) == 1, f"{len(traces)} traces"
    return traces.pop()


async def check_store_spans(spans: Sequence[ReadableSpan], store: Any, runs: Iterable[str]) -> None:
    """Store spans hang off a run, a turn or the caller; their events name exactly the records."""
    by_id = {s.context.span_id: s for s in spans}
    named: set[tuple[str, str]] = set()
    for s in spans:
        if not _is_store(s):
            continue
        assert s.parent is not None, s.name
        parent = by_id[s.parent.span_id]
        assert parent.name in {"agentledger.run", "agentledger.turn", TEST_SPAN}, parent.name
        attributes = s.attributes or {}
        reads = str(attributes["agentledger.store.method"]).startswith(("load_", "list_"))
        if parent.name != TEST_SPAN and not reads:  # a continuation reads its predecessor
            assert (parent.attributes or {})["agentledger.run.id"] == attributes[
                "agentledger.run.id"
            ]
        for event in s.events:
            if event.name == RECORD_EVENT:
                e = event.attributes or {}
                named.add((str(e["agentledger.record.run_id"]), str(e["agentledger.record.id"])))
    stored = {(r.run_id, r.id) for run in runs for r in await records(store, run)}
    assert named == stored


def check_turns(spans: Sequence[ReadableSpan]) -> None:
    """Each turn span names its run and what its plan decided (or its error), and times its
    planner turn: the model calls under it start and end within it."""
    by_parent: dict[int, list[ReadableSpan]] = {}
    for s in spans:
        if s.parent is not None:
            by_parent.setdefault(s.parent.span_id, []).append(s)
    turns = [s for s in spans if s.name == "agentledger.turn"]
    assert turns
    for turn in turns:
        attributes = turn.attributes or {}
        assert attributes["agentledger.run.id"], turn
        assert "agentledger.turn.plan" in attributes or "error.type" in attributes, attributes
        chats = [s for s in by_parent.get(turn.context.span_id, []) if s.name.startswith("chat ")]
        assert chats, attributes
        for chat in chats:
            assert turn.start_time is not None
            assert turn.end_time is not None
            assert turn.start_time <= (chat.start_time or 0), attributes
            assert (chat.end_time or 0) <= turn.end_time, attributes


# ---------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    """A traced scenario: what to register, how to drive it, the tree it leaves."""

    name: str
    setup: Callable[[Runtime], None]
    drive: Callable[[Runtime, str], Awaitable[list[str]]]
    expected: list[str]


@tool
async def weather(city: str) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "temp": 21}


@tool(confirm=True)
async def book_table(restaurant: str) -> str:
    """Book a table (needs the user's confirmation)."""
    return f"booked {restaurant}"


class Gate:
    """A tool that blocks until canceled; the driver sees it start."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    def tool(self) -> Any:
        gate = self

        @tool
        async def slow(seconds: int) -> str:
            """Take a long time."""
            gate.started.set()
            await asyncio.sleep(seconds)
            return "done"

        return slow


class FailingModel:
    """A model that fails ``transient`` times with a TransientError, then for good."""

    def __init__(self, transient: int) -> None:
        self.transient = transient

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if self.transient:
            self.transient -= 1
            raise TransientError("model overloaded", operation="complete")
        raise ProviderError(provider="scripted", status=400, body="the model refused")

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        """Fails as ``complete`` does (the runtime streams when it has a stream sink)."""
        await self.complete(request)
        yield  # pragma: no cover - never reached


class Failing:
    """``inner``'s answers, but model call ``n`` (from 0, attempts counted) raises ``fail[n]``."""

    def __init__(self, inner: ScriptedModel, fail: dict[int, BaseException]) -> None:
        self.inner = inner
        self.fail = fail
        self.calls = 0

    def _call(self) -> None:
        error = self.fail.pop(self.calls, None)
        self.calls += 1
        if error is not None:
            raise error

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self._call()
        return await self.inner.complete(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        self._call()
        async for chunk in self.inner.stream(request):
            yield chunk


def _chat(model: Any, tools: Sequence[Any] = ()) -> Callable[[Runtime], None]:
    def setup(runtime: Runtime) -> None:
        runtime.register_model("m", model)
        runtime.register_agent(Agent("chat", ModelPlanner("m", system="Be brief."), tools=tools))

    return setup


def _tracer() -> trace.Tracer:
    return trace.get_tracer("tests")


async def _run(runtime: Runtime, session: str, agent: str = "chat") -> list[str]:
    with _tracer().start_as_current_span(TEST_SPAN):
        out = await runtime.agent_client(agent).run(session, [user_message("go")])
    return [out.run_id]


def tool_loop() -> Scenario:
    model = ScriptedModel([tool_calls(("c1", "weather", {"city": "Paris"})), reply("21C.")])
    return Scenario(
        "tool_loop",
        _chat(model, [weather]),
        _run,
        [
            "test",
            "  agentledger.run chat status=completed",
            "    agentledger.turn #1 resume=False",
            "      chat m",
            "      execute_tool weather is_error=False",
            "    agentledger.turn #2 resume=True",
            "      chat m",
        ],
    )


def two_tool_turns() -> Scenario:
    """Two planner turns of one tool call each (on Temporal the second's call runs with the
    turn after it in one activity)."""
    model = ScriptedModel(
        [
            tool_calls(("c1", "weather", {"city": "Paris"})),
            tool_calls(("c2", "weather", {"city": "Rome"})),
            reply("21C both."),
        ]
    )
    return Scenario(
        "two_tool_turns",
        _chat(model, [weather]),
        _run,
        [
            "test",
            "  agentledger.run chat status=completed",
            "    agentledger.turn #1 resume=False",
            "      chat m",
            "      execute_tool weather is_error=False",
            "    agentledger.turn #2 resume=True",
            "      chat m",
            "      execute_tool weather is_error=False",
            "    agentledger.turn #3 resume=True",
            "      chat m",
        ],
    )


def failed_after_call() -> Scenario:
    """The planner turn after a lone tool call fails for good (on Temporal in the call's
    activity)."""
    model = Failing(
        ScriptedModel([tool_calls(("c1", "weather", {"city": "Paris"}))]),
        {1: ProviderError(provider="scripted", status=400, body="the model refused")},
    )

    async def drive(runtime: Runtime, session: str) -> list[str]:
        with _tracer().start_as_current_span(TEST_SPAN):
            out = await runtime.agent_client("chat").run(session, [user_message("go")])
        assert out.status is RunStatus.FAILED
        return [out.run_id]

    return Scenario(
        "failed_after_call",
        _chat(model, [weather]),
        drive,
        [
            "test",
            "  agentledger.run chat status=failed error=ProviderError",
            "    agentledger.turn #1 resume=False",
            "      chat m",
            "      execute_tool weather is_error=False",
            "    agentledger.turn #2 resume=True error=ProviderError",
            "      chat m error=ProviderError",
        ],
    )


def child_run() -> Scenario:
    boss = ScriptedModel([tool_calls(("d1", "helper", {"request": "6*7?"})), reply("42.")])
    helper = ScriptedModel([reply("42")])

    def setup(runtime: Runtime) -> None:
        runtime.register_model("boss", boss)
        runtime.register_model("helper", helper)
        runtime.register_agent(Agent("helper", ModelPlanner("helper"), description="Maths."))
        runtime.register_agent(Agent("boss", ModelPlanner("boss"), agents=["helper"]))

    async def drive(runtime: Runtime, session: str) -> list[str]:
        [run_id] = await _run(runtime, session, "boss")
        return [run_id, f"{run_id}.d1"]

    return Scenario(
        "child_run",
        setup,
        drive,
        [
            "test",
            "  agentledger.run boss status=completed",
            "    agentledger.turn #1 resume=False",
            "      chat boss",
            "      execute_tool helper is_error=False",
            "        agentledger.run helper status=completed",
            "          agentledger.turn #1 resume=False",
            "            chat helper",
            "    agentledger.turn #2 resume=True",
            "      chat boss",
        ],
    )


def suspend_resume() -> Scenario:
    model = ScriptedModel(
        [
            tool_calls(("b1", "book_table", {"restaurant": "Chez Nous"}), text="Book?"),
            reply("Done."),
        ]
    )

    async def drive(runtime: Runtime, session: str) -> list[str]:
        client = runtime.agent_client("chat")
        with _tracer().start_as_current_span(TEST_SPAN):
            first = await client.run(session, [user_message("book")])
            assert first.status is RunStatus.SUSPENDED
            second = await client.resume(session, first.run_id, Answer(approved=True))
            assert second.status is RunStatus.COMPLETED
        return [first.run_id, second.run_id]

    return Scenario(
        "suspend_resume",
        _chat(model, [book_table]),
        drive,
        [
            "test",
            "  agentledger.run chat status=suspended",
            "    agentledger.turn #1 resume=False",
            "      chat m",
            "  agentledger.run chat status=completed",
            "    execute_tool book_table is_error=False",
            "    agentledger.turn #1 resume=True",
            "      chat m",
        ],
    )


def canceled() -> Scenario:
    gate = Gate()
    model = ScriptedModel([tool_calls(("s1", "slow", {"seconds": 60})), reply("never")])

    async def drive(runtime: Runtime, session: str) -> list[str]:
        with _tracer().start_as_current_span(TEST_SPAN):
            handle = await runtime.agent_client("chat").start(session, [user_message("go")])
            await asyncio.wait_for(gate.started.wait(), 30)
            await handle.cancel("user pressed stop")
            out = await asyncio.wait_for(handle.wait(), 30)
        assert out.status is RunStatus.CANCELED
        return [handle.run_id]

    return Scenario(
        "canceled",
        _chat(model, [gate.tool()]),
        drive,
        [
            "test",
            "  agentledger.run chat status=canceled reason='user pressed stop'",
            "    agentledger.turn #1 resume=False",
            "      chat m",
            "      execute_tool slow interrupted=True",
        ],
    )


def failed_turn() -> Scenario:
    async def drive(runtime: Runtime, session: str) -> list[str]:
        with _tracer().start_as_current_span(TEST_SPAN):
            out = await runtime.agent_client("chat").run(session, [user_message("go")])
        assert out.status is RunStatus.FAILED
        return [out.run_id]

    return Scenario(
        "failed_turn",
        _chat(FailingModel(transient=1)),
        drive,
        [
            "test",
            "  agentledger.run chat status=failed error=ProviderError",
            "    agentledger.turn #1 resume=False error=ProviderError",
            "      chat m error=TransientError",
            "      chat m error=ProviderError",
        ],
    )


SCENARIOS: dict[str, Callable[[], Scenario]] = {
    "tool_loop": tool_loop,
    "two_tool_turns": two_tool_turns,
    "failed_after_call": failed_after_call,
    "child_run": child_run,
    "suspend_resume": suspend_resume,
    "canceled": canceled,
    "failed_turn": failed_turn,
}
