"""Benchmark: agentledger against its peers' SQLite stores and agent loop, side by side.

Run as ``.venv/bin/python bench/peers.py`` after installing the ``bench`` dependency
group (``make bench`` does both). It is not a test. Peers:

- the OpenAI Agents SDK's ``SQLiteSession`` (``openai-agents``);
- LangGraph's ``SqliteSaver`` checkpointer under a ``MessagesState`` graph.

Figures, each trial in a fresh Python process (so imports, caches and peak RSS
belong to that trial alone), all systems interleaved within each repetition,
and the ratio agentledger ÷ peer taken within the repetition:

- ``append``: one conversation item stored per call (agentledger: one
  ``transcript_messages_appended`` record through ``SQLiteStore.append_run_record``;
  openai-agents: ``SQLiteSession.add_items([item])``; LangGraph:
  ``graph.update_state(config, {"messages": [message]})``, which writes one checkpoint).
- ``reload``: a 10,000-item conversation read back, decoded to each system's
  message objects (agentledger: ``build_messages_from_run_log`` -> ``Message``s;
  openai-agents: ``get_items()`` -> dicts; LangGraph: ``get_state`` -> ``BaseMessage``s),
  and the trial process's peak RSS.
- ``agent``: a one-tool agent run (question -> tool call -> answer) with a scripted
  model, each run in its own session (agentledger: ``Runtime`` + ``SQLiteStore``;
  openai-agents: ``Runner.run`` + ``SQLiteSession``; LangGraph has no equivalent here).

Equal durability: every database is a file in WAL mode with ``synchronous=FULL``
(fsync at every commit). agentledger's ``SQLiteStore`` defaults to it; the
SDK's ``SQLiteSession`` enables WAL and keeps SQLite's default ``synchronous``,
which the report prints as read from a connection; the LangGraph connection is
opened here with the same pragmas.
Targets (issue 11): reload <= 1.0x openai-agents' time, i.e. ratio of rates >= 1.0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

SYSTEMS = {
    "append": ("agentledger", "openai-agents", "langgraph"),
    "reload": ("agentledger", "openai-agents", "langgraph"),
    "agent": ("agentledger", "openai-agents"),
}
UNITS = {"append": "items/s", "reload": "items/s", "agent": "runs/s"}
T0 = datetime(2026, 1, 1, tzinfo=UTC)
QUESTION = "What is the weather in Paris, and should I take an umbrella?"
_CPU: list[float] = []  # process CPU seconds (all threads) of the timed part, if measured


def _text(i: int) -> str:
    """About 200 bytes of conversation text, distinct per item."""
    return f"message {i}: " + ("the ledger keeps every message in order. " * 5)


# --- agentledger -------------------------------------------------------------------


async def _al_started_run(path: str, run_id: str, durability: str) -> tuple[Any, Any]:
    from agentledger.storage import RecordBuilder, RunStart
    from agentledger.storage.sqlite import SQLiteStore

    store = await SQLiteStore.open(path, durability=durability)  # type: ignore[arg-type]
    await store.create_session("s", created_at=T0)
    run = RecordBuilder(
        RunStart(run_id=run_id, agent_id="agent", session_id="s", started_at=T0), turn_id="t"
    )
    await store.start_root_run(run.root_start())
    return store, run


def _al_record(run: Any, i: int) -> Any:
    from agentledger.transcript import Message, TextPart, encode_messages

    role = "user" if i % 2 == 0 else "assistant"
    payload = encode_messages([Message(role=role, parts=(TextPart(text=_text(i)),))])
    at = T0 + timedelta(milliseconds=i + 1)
    return run.record("transcript_messages_appended", payload, event_key=f"m{i}", at=at)


async def _al_append(workdir: Path, n: int) -> float:
    store, run = await _al_started_run(str(workdir / "al.db"), "run", "full")
    records = [_al_record(run, i) for i in range(n)]
    start = time.perf_counter()
    for record in records:
        await store.append_run_record(record)
    elapsed = time.perf_counter() - start
    await store.close()
    return elapsed


async def _al_fill(workdir: Path, n: int) -> None:
    store, run = await _al_started_run(str(workdir / "al.db"), "run", "normal")
    for i in range(n):
        await store.append_run_record(_al_record(run, i))
    await store.close()


async def _al_reload(workdir: Path, n: int) -> float:
    from agentledger.storage.sqlite import SQLiteStore
    from agentledger.transcript import build_messages_from_run_log

    store = await SQLiteStore.open(str(workdir / "al.db"))
    start = time.perf_counter()
    messages = await build_messages_from_run_log(store, "run")
    elapsed = time.perf_counter() - start
    assert len(messages) == n, len(messages)
    await store.close()
    return elapsed


async def _al_agent(workdir: Path, n: int) -> float:
    from agentledger.runtime import Agent, ModelPlanner, Runtime, tool, user_message
    from agentledger.storage.sqlite import SQLiteStore
    from agentledger.testing import ScriptedModel, reply, tool_calls

    @tool
    async def get_weather(city: str) -> dict[str, object]:
        """Current weather in a city."""
        return {"city": city, "temp_c": 18, "conditions": "light rain"}

    store = await SQLiteStore.open(str(workdir / "al-agent.db"))
    runtime = Runtime(store)
    script = []
    for _ in range(n):
        script += [tool_calls(("call_1", "get_weather", {"city": "Paris"})), reply("Rainy: yes.")]
    runtime.register_model("model", ScriptedModel(script))
    runtime.register_agent(Agent("weather", ModelPlanner("model"), tools=[get_weather]))
    client = runtime.agent_client("weather")
    _CPU.append(-time.process_time())
    start = time.perf_counter()
    for i in range(n):
        session = f"s{i}"
        await store.create_session(session, created_at=datetime.now(UTC).replace(microsecond=0))
        out = await client.run(session, [user_message(QUESTION)])
        assert out.status == "completed", out
    elapsed = time.perf_counter() - start
    _CPU[-1] += time.process_time()
    await runtime.close()
    await store.close()
    return elapsed


# --- openai-agents -----------------------------------------------------------------


def _oa_item(i: int) -> dict[str, Any]:
    if i % 2 == 0:
        return {"role": "user", "content": _text(i)}
    return {
        "id": f"msg_{i}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": _text(i), "annotations": []}],
    }


async def _oa_append(workdir: Path, n: int) -> float:
    from agents import SQLiteSession

    session = SQLiteSession("s", str(workdir / "oa.db"))
    items = [_oa_item(i) for i in range(n)]
    start = time.perf_counter()
    for item in items:
        await session.add_items([item])  # type: ignore[list-item]
    elapsed = time.perf_counter() - start
    session.close()
    return elapsed


async def _oa_fill(workdir: Path, n: int) -> None:
    from agents import SQLiteSession

    session = SQLiteSession("s", str(workdir / "oa.db"))
    await session.add_items([_oa_item(i) for i in range(n)])  # type: ignore[misc]
    session.close()


async def _oa_reload(workdir: Path, n: int) -> float:
    from agents import SQLiteSession

    session = SQLiteSession("s", str(workdir / "oa.db"))
    start = time.perf_counter()
    items = await session.get_items()
    elapsed = time.perf_counter() - start
    assert len(items) == n, len(items)
    session.close()
    return elapsed


def _oa_scripted_model() -> Any:
    """An Agents SDK ``Model`` that asks for the weather tool, then answers."""
    from agents import ModelResponse, Usage
    from agents.models.interface import Model
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    class ScriptedModel(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            items = args[1] if len(args) > 1 else kwargs["input"]
            answered = any(
                isinstance(item, dict) and item.get("type") == "function_call_output"
                for item in items
            )
            if not answered:
                call = ResponseFunctionToolCall(
                    type="function_call",
                    call_id="call_1",
                    name="get_weather",
                    arguments='{"city": "Paris"}',
                )
                return ModelResponse(output=[call], usage=Usage(), response_id=None)
            text = ResponseOutputText(type="output_text", text="Rainy: yes.", annotations=[])
            message = ResponseOutputMessage(
                id="msg_1", type="message", role="assistant", status="completed", content=[text]
            )
            return ModelResponse(output=[message], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    return ScriptedModel()


async def _oa_agent(workdir: Path, n: int) -> float:
    from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled

    set_tracing_disabled(True)

    @function_tool
    async def get_weather(city: str) -> dict[str, object]:
        """Current weather in a city."""
        return {"city": city, "temp_c": 18, "conditions": "light rain"}

    agent = Agent(name="weather", model=_oa_scripted_model(), tools=[get_weather])
    path = str(workdir / "oa-agent.db")
    _CPU.append(-time.process_time())
    start = time.perf_counter()
    for i in range(n):
        session = SQLiteSession(f"s{i}", path)
        result = await Runner.run(agent, QUESTION, session=session)
        assert result.final_output == "Rainy: yes.", result.final_output
        session.close()
    elapsed = time.perf_counter() - start
    _CPU[-1] += time.process_time()
    return elapsed


# --- LangGraph ---------------------------------------------------------------------


def _lg_graph(path: Path) -> tuple[Any, sqlite3.Connection]:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph

    conn = sqlite3.connect(str(path), check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {})
    builder.add_edge(START, "agent")
    return builder.compile(checkpointer=SqliteSaver(conn)), conn


def _lg_message(i: int) -> Any:
    from langchain_core.messages import AIMessage, HumanMessage

    cls = HumanMessage if i % 2 == 0 else AIMessage
    return cls(content=_text(i), id=f"m{i}")


_LG_CONFIG = {"configurable": {"thread_id": "s"}}


async def _lg_append(workdir: Path, n: int) -> float:
    graph, conn = _lg_graph(workdir / "lg.db")
    messages = [_lg_message(i) for i in range(n)]
    start = time.perf_counter()
    for message in messages:
        graph.update_state(_LG_CONFIG, {"messages": [message]}, as_node="agent")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


async def _lg_fill(workdir: Path, n: int) -> None:
    graph, conn = _lg_graph(workdir / "lg.db")
    messages = [_lg_message(i) for i in range(n)]
    graph.update_state(_LG_CONFIG, {"messages": messages}, as_node="agent")
    conn.close()


async def _lg_reload(workdir: Path, n: int) -> float:
    graph, conn = _lg_graph(workdir / "lg.db")
    start = time.perf_counter()
    messages = graph.get_state(_LG_CONFIG).values["messages"]
    elapsed = time.perf_counter() - start
    assert len(messages) == n, len(messages)
    conn.close()
    return elapsed


TRIALS: dict[tuple[str, str], Callable[[Path, int], Any]] = {
    ("agentledger", "append"): _al_append,
    ("agentledger", "fill"): _al_fill,
    ("agentledger", "reload"): _al_reload,
    ("agentledger", "agent"): _al_agent,
    ("openai-agents", "append"): _oa_append,
    ("openai-agents", "fill"): _oa_fill,
    ("openai-agents", "reload"): _oa_reload,
    ("openai-agents", "agent"): _oa_agent,
    ("langgraph", "append"): _lg_append,
    ("langgraph", "fill"): _lg_fill,
    ("langgraph", "reload"): _lg_reload,
}


def _trial(system: str, workload: str, workdir: Path, n: int) -> None:
    """One measurement in this (fresh) process: prints seconds and peak RSS as JSON."""
    elapsed = asyncio.run(TRIALS[system, workload](workdir, n))
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = {"seconds": elapsed, "peak_rss_mib": peak_kib / 1024}
    if _CPU:
        result["cpu_seconds"] = _CPU[-1]
    print(json.dumps(result))


def _spawn(system: str, workload: str, workdir: Path, n: int) -> dict[str, float]:
    workdir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, __file__, "--trial", system, workload, str(workdir), str(n)]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"trial {system} {workload} failed:\n{out.stderr}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _default_synchronous(root: Path) -> int:
    """``PRAGMA synchronous`` of a plain WAL connection, as SQLiteSession opens them."""
    conn = sqlite3.connect(str(root / "probe.db"))
    conn.execute("PRAGMA journal_mode = WAL")
    value = int(conn.execute("PRAGMA synchronous").fetchone()[0])
    conn.close()
    return value


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):,.2f} ({min(values):,.2f}-{max(values):,.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--reload", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--trial", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trial:
        system, workload, workdir, n = args.trial
        _trial(system, workload, Path(workdir), int(n))
        return

    sizes = {"append": args.appends, "reload": args.reload, "agent": args.runs}
    with tempfile.TemporaryDirectory(prefix="agentledger-peers-") as tmp:
        root = Path(tmp)
        sync = _default_synchronous(root)
        print(f"load: {os.getloadavg()[0]:.2f} (1 min); cores: {os.cpu_count()}")
        print(f"SQLiteSession's synchronous (SQLite default in WAL): {sync} (2 = FULL)")
        print("agentledger full; LangGraph connection set to FULL\n")
        for system in SYSTEMS["reload"]:  # reload fixtures, built once, untimed
            _spawn(system, "fill", root / f"reload-{system}", args.reload)
        rates: dict[tuple[str, str], list[float]] = {}
        rss: dict[str, list[float]] = {}
        ratios: dict[tuple[str, str], list[float]] = {}
        for rep in range(args.repetitions):
            for workload, systems in SYSTEMS.items():
                order = systems[rep % len(systems) :] + systems[: rep % len(systems)]
                this: dict[str, float] = {}
                for system in order:
                    workdir = (
                        root / f"reload-{system}"
                        if workload == "reload"
                        else root / f"{workload}-{system}-{rep}"
                    )
                    result = _spawn(system, workload, workdir, sizes[workload])
                    this[system] = sizes[workload] / result["seconds"]
                    rates.setdefault((workload, system), []).append(this[system])
                    if workload == "reload":
                        rss.setdefault(system, []).append(result["peak_rss_mib"])
                for peer in systems[1:]:
                    ratio = this["agentledger"] / this[peer]
                    ratios.setdefault((workload, peer), []).append(ratio)
            print(f"repetition {rep + 1}/{args.repetitions} done", file=sys.stderr)

        print(f"medians (min-max) over {args.repetitions} interleaved repetitions\n")
        print(f"| figure | {' | '.join(SYSTEMS['append'])} |")
        print("|---|---|---|---|")
        for workload, systems in SYSTEMS.items():
            cells = [_fmt(rates[workload, s]) if s in systems else "-" for s in SYSTEMS["append"]]
            label = f"{workload} {sizes[workload]:,} ({UNITS[workload]})"
            print(f"| {label} | {' | '.join(cells)} |")
        cells = [_fmt(rss[s]) for s in SYSTEMS["append"]]
        print(f"| peak RSS of the reload process (MiB) | {' | '.join(cells)} |")
        print("\nagentledger ÷ peer (rates; > 1 means agentledger is faster), per repetition\n")
        print("| figure | ÷ openai-agents | ÷ langgraph |")
        print("|---|---|---|")
        for workload, systems in SYSTEMS.items():
            cells = [
                _fmt(ratios[workload, p]) if p in systems else "-"
                for p in ("openai-agents", "langgraph")
            ]
            print(f"| {workload} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
