"""Workers that kill themselves, and the supervisor that keeps one running.

The app (``agentledger worker --app tests.engine.temporal.crashing:setup``)
has tools and a planner that, while the *mode file* (``$AGENTLEDGER_TEST_MODE``)
says ``kill``, SIGKILL their own worker process the moment they start: a
worker death mid-activity, again on every attempt. Each start first appends
one line to the *counter file* (``$AGENTLEDGER_TEST_COUNTER``), outside the
store, so a test counts starts exactly. Once the mode file says anything
else they behave.

``$AGENTLEDGER_TEST_MODE`` may also say ``after``: then the ``effect`` tool
(declared ``once``, ``retry`` or ``keyed``) does its side effect (a line in
the counter file with its idempotency key and attempt, and a POST to the stub
server of :class:`StubEffects` with that key) and only then kills its worker,
on the call's first attempt, before its result is saved: the harness of a
tool whose outcome is unknown after a crash.

:class:`Supervisor` keeps one worker process polling a task queue: when it
dies it starts another, until stopped. :class:`StubEffects` is a loopback
HTTP server that counts POSTs and deduplicates them on the
``Idempotency-Key`` header.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import signal
import threading
import urllib.request
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from agentledger.engine.temporal import TemporalEngine
from agentledger.errors import TransientError
from agentledger.runtime import (
    Agent,
    AgentClient,
    PlanInput,
    PlanResult,
    PlanResumeInput,
    Runtime,
    ToolCall,
    ToolContext,
    tool,
)
from agentledger.storage.protocol import Store
from agentledger.transcript import ToolResultPart
from tests.engine.temporal.harness import FAST_RETRY, now_ms
from tests.engine.temporal.processes import WorkerProcess

__all__ = [
    "COUNTER_ENV",
    "EFFECT_TOOLS",
    "MODE_ENV",
    "STUB_ENV",
    "TEMPORAL_ENV",
    "Setup",
    "StubEffects",
    "Supervisor",
    "count",
    "crashing_workers",
    "effects",
    "setup",
]

COUNTER_ENV = "AGENTLEDGER_TEST_COUNTER"
MODE_ENV = "AGENTLEDGER_TEST_MODE"
STUB_ENV = "AGENTLEDGER_TEST_STUB_URL"
TEMPORAL_ENV = "AGENTLEDGER_TEST_CRASH_TEMPORAL"
"""The Temporal server's address, for a tool that waits until it is its run's last activity."""


def _started(what: str, *more: object) -> str:
    """Count one start of ``what`` (a line ``WHAT PID MORE...``); return the mode."""
    with open(os.environ[COUNTER_ENV], "a", encoding="utf-8") as f:
        f.write(" ".join(str(w) for w in (what, os.getpid(), *more)) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return Path(os.environ[MODE_ENV]).read_text().strip()


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def count(counter: Path, what: str = "") -> int:
    """How many starts the counter file holds (of ``what``, when given)."""
    if not counter.exists():
        return 0
    lines = counter.read_text().splitlines()
    return sum(1 for line in lines if not what or line.split(" ")[0] == what)


@tool
async def fragile(label: str, ctx: ToolContext) -> str:
    """Kill the worker on every start while the mode says ``kill``."""
    if _started("fragile") == "kill":
        _die()
    return f"{label} done"


async def _alone(run_id: str, within: float = 60.0) -> None:
    """Wait until this is the only activity of the run Temporal still has pending: the
    step's other calls have finished, and Temporal knows it (their completion cannot die
    with this worker)."""
    from agentledger.engine.temporal import connect

    client = await connect(os.environ[TEMPORAL_ENV])
    handle = client.get_workflow_handle(run_id)
    deadline = asyncio.get_running_loop().time() + within
    while len((await handle.describe()).raw_description.pending_activities) > 1:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"other activities of {run_id} still pending after {within}s")
        await asyncio.sleep(0.05)


@tool
async def lonely(label: str, ctx: ToolContext) -> str:
    """:func:`fragile`, once the step's other calls have finished."""
    await _alone(ctx.run_id)
    if _started("fragile") == "kill":
        _die()
    return f"{label} done"


@tool
async def flaky(label: str, ctx: ToolContext) -> str:
    """A TransientError on the call's first two attempts, then :func:`fragile`."""
    mode = _started("flaky", ctx.attempt)
    if ctx.attempt <= 2:
        raise TransientError("not yet", operation="flaky")
    if mode == "kill":
        _die()
    return f"{label} done"


@tool
async def steady(label: str, ctx: ToolContext) -> str:
    """Answer at once (the other call of a parallel step)."""
    return f"{label} steady"


def _post(request: urllib.request.Request) -> None:
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()


async def _effect(label: str, ctx: ToolContext) -> str:
    """Act on the world: one line in the counter file (``effect PID KEY ATTEMPT``) and, when a
    stub server is set, a POST to it with the call's idempotency key; then, while the mode
    says ``after``, die on the call's first attempt, before its result is saved."""
    mode = _started("effect", ctx.idempotency_key, ctx.attempt)
    stub = os.environ.get(STUB_ENV, "")
    if stub:
        request = urllib.request.Request(
            stub,
            data=label.encode(),
            headers={"Idempotency-Key": ctx.idempotency_key},
            method="POST",
        )
        await asyncio.to_thread(_post, request)
    if mode == "after" and ctx.attempt == 1:
        _die()
    return f"{label} happened"


EFFECT_TOOLS = {
    effect: tool(name="effect", effect=effect)(_effect)  # type: ignore[arg-type]
    for effect in ("once", "retry", "keyed")
}
"""The same acting tool, declared with each effect class."""


def effects(counter: Path) -> list[tuple[str, int]]:
    """The effect lines of the counter file: (key, attempt) each."""
    if not counter.exists():
        return []
    rows = [line.split(" ") for line in counter.read_text().splitlines()]
    return [(row[2], int(row[3])) for row in rows if row[0] == "effect"]


class OneCall:
    """Calls ``tool`` once (call ``c1``), then answers with its result."""

    def __init__(self, tool_name: str) -> None:
        self.tool_name = tool_name

    async def plan_start(self, input: PlanInput) -> PlanResult:
        return PlanResult.call(ToolCall(id="c1", name=self.tool_name, input={"label": "x"}))

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        return PlanResult.answer(" + ".join(str(r.content) for r in input.tool_results))


class CallLater:
    """Calls ``steady`` (call ``c1``), then ``tool`` (call ``c2``), then answers with its
    result: ``tool`` is a later turn's lone call, run with the turn after it."""

    def __init__(self, tool_name: str) -> None:
        self.tool_name = tool_name

    async def plan_start(self, input: PlanInput) -> PlanResult:
        return PlanResult.call(ToolCall(id="c1", name="steady", input={"label": "a"}))

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        last = input.tool_results[0] if input.tool_results else None
        if last is not None and last.tool_call_id == "c1":
            return PlanResult.call(ToolCall(id="c2", name=self.tool_name, input={"label": "x"}))
        return PlanResult.answer(" + ".join(str(r.content) for r in input.tool_results))


class PairCall:
    """Calls ``steady`` (call ``a``) and ``lonely`` (call ``b``) in parallel, then answers."""

    async def plan_start(self, input: PlanInput) -> PlanResult:
        return PlanResult(
            tool_calls=(
                ToolCall(id="a", name="steady", input={"label": "a"}),
                ToolCall(id="b", name="lonely", input={"label": "b"}),
            )
        )

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        return PlanResult.answer(" + ".join(str(r.content) for r in input.tool_results))


class Boss:
    """Asks the ``fragile`` agent (a child run), then answers with its answer."""

    async def plan_start(self, input: PlanInput) -> PlanResult:
        return PlanResult.call(ToolCall(id="ask", name="fragile", input={"request": "go"}))

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        return PlanResult.answer(f"boss: {input.tool_results[0].content}")


class KillingPlanner:
    """Kills the worker on its first turn while the mode says ``kill``; else answers."""

    async def plan_start(self, input: PlanInput) -> PlanResult:
        if _started("planner") == "kill":
            _die()
        return PlanResult.answer("planned")

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        return await self.plan_start(input)


@tool
async def counted(label: str, ctx: ToolContext) -> str:
    """Count each start (``counted PID``) and answer at once."""
    _started("counted")
    return f"{label} counted"


class KillsAfterTheCall:
    """Calls ``counted`` on each of its first ``calls`` turns (call ``c1``, ``c2`` ...); the
    turn after the last call kills the worker while the mode says ``kill`` (or, ``once``, on
    its first start only), then answers with the last result."""

    def __init__(self, calls: int = 1) -> None:
        self.calls = calls

    async def plan_start(self, input: PlanInput) -> PlanResult:
        return PlanResult.call(ToolCall(id="c1", name="counted", input={"label": "x"}))

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        messages = await input.prepare_messages()
        done = sum(isinstance(p, ToolResultPart) for m in messages for p in m.parts)
        if done < self.calls:
            call = ToolCall(id=f"c{done + 1}", name="counted", input={"label": "x"})
            return PlanResult.call(call)
        mode = _started("resumer")
        first = count(Path(os.environ[COUNTER_ENV]), "resumer") == 1
        if mode == "kill" or (mode == "once" and first):
            _die()
        return PlanResult.answer(" + ".join(str(r.content) for r in input.tool_results))


def setup(runtime: Runtime) -> None:
    """``fragile`` (default attempts), ``fragile2`` / ``fragile1`` (``max_turn_attempts=2`` / 1),
    ``pair``,
    ``flaky2`` (two TransientErrors, then kills; ``max_turn_attempts=2``),
    ``planner`` (its planner kills), ``resumer``/``resumer2`` (the turn after
    its first / second call kills),
    ``boss`` (asks ``fragile`` as a child run) and
    ``effect_once``/``effect_retry``/``effect_keyed`` (the acting tool with each effect
    class) agents, and ``effect_*_later`` (the acting tool on turn 2)."""
    runtime.register_agent(Agent("fragile", OneCall("fragile"), tools=[fragile]))
    runtime.register_agent(
        Agent("fragile2", OneCall("fragile"), tools=[fragile], max_turn_attempts=2)
    )
    runtime.register_agent(
        Agent("fragile1", OneCall("fragile"), tools=[fragile], max_turn_attempts=1)
    )
    runtime.register_agent(Agent("pair", PairCall(), tools=[steady, lonely]))
    runtime.register_agent(Agent("flaky2", OneCall("flaky"), tools=[flaky], max_turn_attempts=2))
    runtime.register_agent(Agent("planner", KillingPlanner()))
    runtime.register_agent(Agent("resumer", KillsAfterTheCall(), tools=[counted]))
    runtime.register_agent(Agent("resumer2", KillsAfterTheCall(2), tools=[counted]))
    runtime.register_agent(Agent("boss", Boss(), agents=["fragile"]))
    for kind, acting in EFFECT_TOOLS.items():
        runtime.register_agent(Agent(f"effect_{kind}", OneCall("effect"), tools=[acting]))
        runtime.register_agent(
            Agent(f"effect_{kind}_later", CallLater("effect"), tools=[steady, acting])
        )


class Supervisor:
    """Keeps one worker process polling: starts another whenever the last one died."""

    def __init__(self, **worker: object) -> None:
        self._worker = worker
        self._stop = threading.Event()
        self.started: list[WorkerProcess] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                process = WorkerProcess(**self._worker).start()  # type: ignore[arg-type]
                self.started.append(process)
                while process._process is not None and process._process.poll() is None:
                    if self._stop.wait(0.05):
                        return
                process.kill()  # reaps it, closes its pipe
        except BaseException as e:  # shown by stop()
            self.error = e

    def stop(self) -> None:
        """Stop supervising and kill the worker left (its death is no crash of interest)."""
        self._stop.set()
        self._thread.join(timeout=120)
        for process in self.started:
            process.kill()
        if self.error is not None:
            raise AssertionError(f"supervisor: {self.error}") from self.error


class StubEffects:
    """A loopback HTTP server: each POST is an effect, once per ``Idempotency-Key``."""

    def __init__(self) -> None:
        self.posts: list[str] = []
        self.effects: dict[str, str] = {}
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length).decode()
                key = self.headers.get("Idempotency-Key", "")
                stub.posts.append(key)
                stub.effects.setdefault(key, body)
                payload = json.dumps({"key": key, "effects": len(stub.effects)}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/effects"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class Setup:
    """What a test gets from :func:`crashing_workers`."""

    client_for: dict[str, AgentClient]
    session: str
    counter: Path
    mode: Path
    store: Store


@contextlib.asynccontextmanager
async def crashing_workers(
    temporal_address: str,
    temporal_client: Client,
    store: Store,
    worker_db: str,
    folder: Path,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[Setup]:
    """Supervised worker processes of this app on a fresh task queue (mode ``kill``), a
    runtime on ``store`` that starts runs there (heartbeat timeout 1.5 s), and a session."""
    counter, mode = folder / "starts.txt", folder / "mode.txt"
    mode.write_text("kill")
    env = {
        COUNTER_ENV: str(counter),
        MODE_ENV: str(mode),
        TEMPORAL_ENV: temporal_address,
        **(env or {}),
    }
    queue = f"loop-{uuid.uuid4().hex[:12]}"
    supervisor = Supervisor(
        temporal=temporal_address,
        db=worker_db,
        task_queue=queue,
        env=env,
        extra=("--sticky-timeout", "1"),
        app="tests.engine.temporal.crashing:setup",
    ).start()
    try:
        engine = TemporalEngine(
            temporal_client, task_queue=queue, retry_policy=FAST_RETRY, heartbeat_timeout=1.5
        )
        runtime = Runtime(store, engine=engine)
        setup(runtime)
        session = f"s-{uuid.uuid4().hex}"
        await store.create_session(session, created_at=now_ms())  # type: ignore[attr-defined]
        agents = (
            "fragile",
            "fragile2",
            "fragile1",
            "pair",
            "planner",
            "resumer",
            "resumer2",
            "boss",
            "flaky2",
            *(f"effect_{k}" for k in EFFECT_TOOLS),
            *(f"effect_{k}_later" for k in EFFECT_TOOLS),
        )
        yield Setup(
            client_for={a: runtime.agent_client(a) for a in agents},
            session=session,
            counter=counter,
            mode=mode,
            store=store,
        )
    finally:
        supervisor.stop()
