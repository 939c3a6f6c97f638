"""The ``agentledger demo`` job: a real multi-turn session, persisted in SQLite.

A travel concierge agent, with a research agent it can delegate to, runs
four turns in one session: parallel tool calls, a child run, a booking that
waits for the user's confirmation and is resumed, and a search the user
cancels. Every step lands in ``./agentledger.db`` (or ``--db``); the demo
prints the conversation as it happens and ends with the commands that show
what was recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import shutil
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path, PurePath
from typing import Any

from rich.console import Console
from rich.table import Table

from agentledger.demo_model import DemoModel
from agentledger.demo_transcript import build_demo_transcript, transcript_tour
from agentledger.memory import SQLiteMemory
from agentledger.providers import client_from_environment
from agentledger.providers.model import ModelClient
from agentledger.runtime import (
    Agent,
    Answer,
    ModelPlanner,
    RunOutput,
    Runtime,
    events,
    tool,
)
from agentledger.service.host_runtime import RuntimeClientHost
from agentledger.storage import RunStatus, Store
from agentledger.storage.sqlite import SQLiteStore, default_path
from agentledger.transcript import Message, TextPart

__all__ = [
    "AGENTS",
    "build_demo_transcript",
    "host_runtime",
    "register_demo",
    "run_demo",
    "transcript_tour",
]

CONCIERGE = "You are a travel concierge. Use tools for facts; ask before booking anything."
RESEARCH = "You are a research assistant. Answer with one well-sourced paragraph."
WEATHER = {
    "Paris": (18, "light rain"),
    "Tokyo": (24, "sunny"),
    "Lisbon": (22, "clear"),
    "New York": (15, "windy"),
}


def _pick_model() -> tuple[ModelClient, str, str]:
    """The model the demo talks to, and the model names of the concierge and the researcher.

    A real provider when its key is configured (``ANTHROPIC_API_KEY``,
    ``OPENAI_API_KEY`` or AWS credentials, see ``client_from_environment``);
    otherwise the offline, deterministic :class:`DemoModel`.
    """
    found = client_from_environment()
    if found is None:
        return DemoModel(), "demo-concierge", "demo-research"
    model, client = found
    return client, model, model


class ConsoleSink:
    """Prints run events as they arrive: the conversation, tool calls and run endings.

    Assistant text is printed token by token from ``model_delta`` events while
    the model answers; the recorded message then only ends the line.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self.depth: dict[str, int] = {}
        self.agents: dict[str, str] = {}
        self.seen: set[str] = set()
        self.streamed: dict[str, tuple[str, int]] = {}  # run -> (model call, part) printed live
        self.open_line = ""  # the run whose streamed line is on screen, unfinished

    def _end_line(self) -> None:
        if self.open_line:
            self.console.print()
            self.open_line = ""

    def _say(self, run_id: str, text: str) -> None:
        self._end_line()
        self.console.print("    " * self.depth.get(run_id, 0) + text, highlight=False)

    def _delta(self, event: events.ModelDelta) -> None:
        """Print one fragment of assistant text where the run's line is."""
        run = event.run_id
        before = self.streamed.get(run)
        if self.open_line != run or before is None or before[0] != event.attempt:
            self._end_line()
            agent = self.agents.get(run, "assistant")
            self.console.print(
                "    " * self.depth.get(run, 0) + f"[bold green]{agent}:[/] ", end=""
            )
            self.open_line = run
        elif before[1] != event.index:
            self.console.print(" ", end="")
        self.console.print(event.text, end="", markup=False, highlight=False)
        self.streamed[run] = (event.attempt, event.index)

    async def send(self, event: events.RunEvent, /) -> None:
        if event.key in self.seen:
            return
        self.seen.add(event.key)
        run = event.run_id
        match event:
            case events.ModelDelta(kind="text") if event.text:
                self._delta(event)
            case events.ModelDelta() | events.ModelUsageReported():
                pass  # thinking and tool-call input are not shown; usage is not news
            case events.MessagesAppended() if run in self.streamed:
                del self.streamed[run]  # its text is on screen already
                if self.open_line == run:
                    self._end_line()
                for message in event.messages:
                    if message.role != "assistant":
                        self._message(run, message)
            case events.RunStarted():
                self.depth[run] = self.depth.get(event.parent_run_id, -1) + 1
                self.agents[run] = event.agent_id
                if event.parent_run_id:
                    self._say(run, f"[magenta]↳ child run of agent {event.agent_id}[/] ({run})")
                elif event.predecessor_run_id:
                    self._say(run, f"[dim]continuation run {run} of {event.predecessor_run_id}[/]")
            case events.MessagesAppended():
                for message in event.messages:
                    self._message(run, message)
            case events.ToolCallScheduled():
                args = ", ".join(f"{k}={v!r}" for k, v in event.input.items())
                self._say(run, f"  [cyan]→ {event.tool_name}({args})[/]")
            case events.ToolResultReceived():
                mark = "[red]✗[/]" if event.is_error else "[green]←[/]"
                self._say(run, f"  {mark} [cyan]{event.tool_name}[/]: {event.content}")
            case events.CancellationRequested():
                self._say(run, f"[red]■ cancel requested:[/] {event.reason}")
            case events.RunSuspended():
                self._say(run, "[yellow]⏸ run suspended, waiting for the user's confirmation[/]")
            case events.RunCompleted():
                if event.status == "success":
                    self._say(run, f"[dim]✓ run {run} completed[/]")
                elif event.status == "canceled":
                    self._say(run, f"[red]✗ run {run} canceled ({event.reason})[/]")
                else:
                    why = event.failure.message if event.failure else ""
                    self._say(run, f"[red]✗ run {run} failed: {why}[/]")
            case _:
                pass

    def _message(self, run_id: str, message: Message) -> None:
        text = " ".join(p.text for p in message.parts if isinstance(p, TextPart) and p.text)
        agent = self.agents.get(run_id, "assistant")
        if message.role == "assistant" and text:
            self._say(run_id, f"[bold green]{agent}:[/] {text}")
        elif message.role == "user" and text and self.depth.get(run_id, 0) == 0:
            self._say(run_id, f"[bold blue]you:[/] {text}")
        elif message.role == "user" and text:
            self._say(run_id, f"[magenta]request:[/] {text}")

    async def close(self) -> None:
        return None


AGENTS = ("concierge", "research")
"""The demo's agents: the concierge users talk to, and the researcher it delegates to."""


def register_demo(
    runtime: Runtime, model: ModelClient, concierge_model: str, research_model: str
) -> asyncio.Event:
    """Register the demo's model, tools and agents on ``runtime``; the event is set when
    a flight search starts (the demo cancels it)."""
    searching = asyncio.Event()

    @tool
    async def get_weather(city: str) -> dict[str, Any]:
        """Current weather in a city."""
        await asyncio.sleep(0.05)
        temp, conditions = WEATHER.get(city, (20, "mild"))
        return {"city": city, "temp_c": temp, "conditions": conditions}

    @tool(confirm=True)
    async def book_table(restaurant: str, people: int, time: str) -> str:
        """Book a restaurant table (asks the user first)."""
        return f"table for {people} at {restaurant}, {time}, confirmation AL-{people}{time[:2]}"

    @tool
    async def search_flights(origin: str, destination: str) -> str:
        """Search flights (slow: asks every airline)."""
        searching.set()
        await asyncio.sleep(60)
        return "no flights"

    runtime.register_model("demo", model)
    runtime.register_agent(
        Agent(
            "research",
            ModelPlanner("demo", system=RESEARCH, model=research_model, prompt_version="2"),
            description="Researches a question and answers in one paragraph.",
        )
    )
    runtime.register_agent(
        Agent(
            "concierge",
            ModelPlanner("demo", system=CONCIERGE, model=concierge_model, prompt_version="3"),
            tools=[get_weather, book_table, search_flights],
            agents=["research"],
        )
    )
    return searching


def host_runtime(store: Store) -> RuntimeClientHost:
    """The host runtime ``agentledger demo --serve`` gives the service: the demo's agents
    (with the offline demo model unless a provider key is set) over the served store, so
    the inspector can answer, fork, send messages and start sessions on the demo database.
    """
    model, concierge_model, research_model = _pick_model()
    runtime = Runtime(store)
    register_demo(runtime, model, concierge_model, research_model)
    return RuntimeClientHost(runtime, agents=AGENTS)


def _now() -> datetime:
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


async def _demo(path: str, console: Console) -> int:
    model, concierge_model, research_model = _pick_model()
    if isinstance(model, DemoModel):
        console.print(
            "[bold yellow]Using the offline demo model[/] (deterministic; no provider key is "
            "configured), so this demo needs no network."
        )
    else:
        console.print(f"[bold yellow]Using {type(model).__name__}[/] with model {concierge_model}")
    store = await SQLiteStore.open(path)
    memory = await SQLiteMemory.open(path)
    sink = ConsoleSink(console)
    runtime = Runtime(store, stream=sink, memory=memory)
    searching = register_demo(runtime, model, concierge_model, research_model)
    session_id = f"demo-{uuid.uuid4().hex[:8]}"
    await store.create_session(session_id, created_at=_now())
    console.print(f"Session [bold]{session_id}[/] in {path}\n")
    client = runtime.agent_client("concierge")
    previous: str | None = None  # the turn the next one follows, by reference
    runs: list[tuple[str, RunOutput]] = []

    async def turn(title: str, text: str) -> RunOutput:
        console.rule(title)
        out = await client.run(session_id, text, after=previous)
        runs.append((title, out))
        return out

    try:
        out = await turn("Turn 1: two tool calls at once", "What's the weather in Paris and Tokyo?")
        previous = out.run_id
        out = await turn(
            "Turn 2: delegating to another agent (a child run)",
            "Please research: when was the Eiffel Tower built?",
        )
        previous = out.run_id
        out = await turn(
            "Turn 3: a booking that needs confirmation",
            "Book a table for 2 at Le Jules Verne at 20:00.",
        )
        if out.status is RunStatus.SUSPENDED:
            console.print("[dim](the user approves; the demo resumes the suspended run)[/]")
            out = await client.resume(session_id, out.run_id, Answer.approve("Yes, book it."))
            runs.append(("Turn 3 (resumed)", out))
        else:  # a real model may answer without booking
            console.print(f"[dim](the model did not ask to book; the run is {out.status})[/]")
        previous = out.run_id
        console.rule("Turn 4: a search the user cancels")
        handle = await client.start(
            session_id, "Find me flights from Paris to Tokyo.", after=previous
        )
        with contextlib.suppress(TimeoutError):  # a real model may not search at all
            await asyncio.wait_for(searching.wait(), 30)
        await handle.cancel("user pressed stop")
        runs.append(("Turn 4 (canceled)", await handle.wait()))
        remembered = await memory.load_run("concierge", runs[0][1].run_id)
    finally:
        await runtime.close()
        await memory.close()
        await store.close()
    console.rule("Recorded")
    table = Table("turn", "run", "status", box=None)
    for title, output in runs:
        table.add_row(title.split(":")[0], output.run_id, str(output.status))
    console.print(table)
    console.print(f"Product memory kept {len(remembered.events)} events of turn 1.\n")
    db = "" if path == default_path() else f" --db {shlex.quote(path)}"
    command = agentledger_command()
    console.print("Inspect it:")
    console.print(f"  {command}{db} sessions")
    console.print(f"  {command}{db} runs {session_id}")
    console.print(f"  {command}{db} records {runs[0][1].run_id}")
    console.print(f"  {command}{db} transcript {runs[-1][1].run_id}")
    console.print(f"  {command}{db} --json runs {session_id}")
    console.print("\nSee it in the browser (the web inspector, read-only):")
    console.print(f"  {command} token new --role reader --tokens tokens.json   # prints a token")
    console.print(f"  {command} serve --db {shlex.quote(str(PurePath(path)))} --tokens tokens.json")
    console.print(f"  then open http://127.0.0.1:8470/ui, log in with the token, open {session_id}")
    console.print("\nOr act in the browser too (approve, fork, send messages, costs), offline:")
    console.print(f"  {command}{db} demo --serve   # records another demo session, then serves")
    return 0


def agentledger_command() -> str:
    """How to run ``agentledger`` from this shell, as this process was run: the bare name
    when it is on ``PATH`` (an active venv), else the console script's path (``.venv/bin/
    agentledger`` from the checkout), else this interpreter with ``-m agentledger``."""
    here = Path(sys.executable).parent
    script = here / "agentledger"
    found = shutil.which("agentledger")
    if script.exists() and found and Path(found).resolve() == script.resolve():
        return "agentledger"
    if found and not script.exists():
        return "agentledger"
    chosen = script if script.exists() else Path(sys.executable)
    with contextlib.suppress(ValueError):
        chosen = chosen.relative_to(Path.cwd())
    shown = shlex.quote(str(chosen))
    return shown if script.exists() else f"{shown} -m agentledger"


def run_demo(path: str | None = None) -> int:
    """Run the demo session against the SQLite file ``path`` (default: ``default_path()``)."""
    console = Console(highlight=False, soft_wrap=True)  # commands must stay copyable
    return asyncio.run(_demo(path or default_path(), console))
