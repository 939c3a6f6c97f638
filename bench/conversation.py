"""Benchmark: a long conversation, one run per turn, each following the last by reference.

Run as ``.venv/bin/python bench/conversation.py`` after ``make bench`` installed the
peers. It is not a test. A conversation of ``--turns`` turns (about 1 KB per user
message and per answer, a tool call every 5th turn) runs through the runtime with
an instant planner, each turn ``client.run(session, message, after=previous)``:

- ``bytes/turn``: the payload bytes each turn's run stored, turns 1-10 against the
  last ten (goal: within 1.1x, and under 3 KB);
- ``replay``: ``build_messages_from_run_log`` of the last turn, warm (median of
  repeated calls), against the floor of fetching the same payloads with one raw
  ``SELECT`` and ``json.loads`` each (goal: <= 1.5x), and the statements (SQLite),
  pipeline syncs (PostgreSQL) and HTTP calls (service) one replay costs;
- ``reload``: a 10,000-message transcript read back, warm and first call on a new
  handle, against openai-agents' ``SQLiteSession.get_items`` (goal warm: <= 1.0x);
- peers: bytes per turn and reload at the same number of turns for openai-agents'
  ``SQLiteSession`` and LangGraph's ``SqliteSaver`` (each turn a graph step that
  adds the turn's messages to ``MessagesState``);
- Temporal (``--temporal``): the workflow history bytes of the last turn ÷ the first.
- bounded input (``--history``): a ``--history-turns`` conversation (default 2,000)
  under ``LastTurns(20)`` and under ``Compaction`` at 8,000 tokens (an instant
  summariser), on SQLite: the model input's estimated tokens, the windowed replay
  (warm median) and the payload bytes it reads, and the bytes the turn stored, each
  the mean over the 20 turns up to turns 100, 500, 1,000 and the last (a compaction
  cycle's worth; goal: the last within 1.2x of turn 100).

Equal durability: SQLite files in WAL mode with ``synchronous=FULL`` everywhere,
PostgreSQL with fsync on (its default).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentledger.runtime import (
    Agent,
    PlanInput,
    PlanResult,
    PlanResumeInput,
    Runtime,
    ToolCall,
    tool,
)
from agentledger.storage.protocol import Store
from agentledger.storage.replay import build_messages_from_run_log

KB = "the ledger keeps every message of the conversation in order. " * 16  # ~1 KB


@tool
async def lookup(topic: str) -> str:
    """A tool result of about 1 KB."""
    return f"{topic}: {KB}"


class Chat:
    """Answers at once; every 5th turn (by the user's text) calls ``lookup`` first."""

    async def plan_start(self, input: PlanInput) -> PlanResult:
        messages = await input.prepare_messages()
        text = messages[-1].parts[0].text  # type: ignore[union-attr]
        if text.startswith("tool"):
            call = text.split(":", 1)[0].replace(" ", "-")  # unique in the conversation
            return PlanResult.call(ToolCall(id=call, name="lookup", input={"topic": call}))
        return PlanResult.answer(f"answer: {KB}")

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        return PlanResult.answer(f"answer: {KB}")


def _question(i: int) -> str:
    return f"{'tool' if i % 5 == 4 else 'turn'} {i}: {KB}"


async def converse(store: Store, turns: int, session: str) -> list[str]:
    """``turns`` turns in ``session``, each after the one before; the run ids."""
    from datetime import UTC, datetime

    await store.create_session(session, created_at=datetime.now(UTC).replace(microsecond=0))  # type: ignore[attr-defined]
    runtime = Runtime(store)
    runtime.register_agent(Agent("chat", Chat(), tools=[lookup]))
    client = runtime.agent_client("chat")
    runs: list[str] = []
    previous = None
    for i in range(turns):
        out = await client.run(session, _question(i), after=previous)
        assert out.status == "completed", out.failure
        previous = out.run_id
        runs.append(out.run_id)
    await runtime.close()
    return runs


async def stored_bytes(store: Store, run_id: str) -> int:
    total, cursor = 0, ""
    while True:
        page = await store.list_run_records(run_id, cursor=cursor, limit=1000)
        total += sum(len(r.payload) for r in page.records)
        if not page.next_cursor:
            return total
        cursor = page.next_cursor


async def warm(call: Callable[[], Awaitable[Any]], repeats: int) -> float:
    """Median seconds of ``repeats`` calls after one warm-up call."""
    await call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        await call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _row(name: str, *cells: object) -> None:
    print(f"  {name:<44}" + "".join(f"{c!s:>14}" for c in cells))


# --- agentledger on each backend -------------------------------------------------------


async def _bytes_per_turn(store: Store, runs: list[str]) -> tuple[float, float]:
    first = [await stored_bytes(store, r) for r in runs[:10]]
    last = [await stored_bytes(store, r) for r in runs[-10:]]
    return statistics.mean(first), statistics.mean(last)


def _sqlite_floor(path: str, runs: list[str]) -> Callable[[], Awaitable[Any]]:
    """One SELECT of the chain's transcript payloads, json.loads each: the floor."""
    conn = sqlite3.connect(path)
    marks = ",".join("?" * len(runs))
    query = (
        f"SELECT payload FROM records WHERE run_id IN ({marks}) AND type IN "
        "('transcript_messages_seeded', 'transcript_messages_appended')"
    )

    async def floor() -> Any:
        return [json.loads(p) for (p,) in conn.execute(query, runs)]

    return floor


def _sqlite_statements(path: str, run_id: str) -> int:
    from agentledger.storage.sqlite.reader import SQLiteReader

    conn = sqlite3.connect(path, isolation_level=None)
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    SQLiteReader(conn).transcript_chain(run_id)
    conn.close()
    return len(seen)


async def bench_sqlite(tmp: Path, turns: int, repeats: int) -> dict[str, float]:
    from agentledger.storage.sqlite import SQLiteStore

    path = str(tmp / "conversation.db")
    store = await SQLiteStore.open(path)
    runs = await converse(store, turns, "sqlite")
    first, last = await _bytes_per_turn(store, runs)
    replay = await warm(lambda: build_messages_from_run_log(store, runs[-1]), repeats)
    floor = await warm(_sqlite_floor(path, runs), repeats)
    statements = _sqlite_statements(path, runs[-1])
    await store.close()
    return {"first": first, "last": last, "replay": replay, "floor": floor, "calls": statements}


async def bench_postgres(turns: int, repeats: int) -> dict[str, float] | None:
    try:
        import psycopg
        from tests.storage.postgres.server import PostgresServer, create_database, drop_database

        from agentledger.storage.postgres import PostgresStore
    except ImportError:
        return None
    server = None
    base = os.environ.get("AGENTLEDGER_TEST_PG_DSN", "")
    if not base:
        server = PostgresServer()
        base = server.start()
    dsn = create_database(base, prefix="agentledger_bench")
    try:
        store = await PostgresStore.open(dsn)
        runs = await converse(store, turns, "postgres")
        first, last = await _bytes_per_turn(store, runs)
        replay = await warm(lambda: build_messages_from_run_log(store, runs[-1]), repeats)
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)

        async def floor() -> Any:
            cur = await conn.execute(
                "SELECT payload FROM agentledger_records WHERE run_id = ANY(%s) AND type IN "
                "('transcript_messages_seeded', 'transcript_messages_appended')",
                (runs,),
            )
            return [json.loads(p) for (p,) in await cur.fetchall()]

        floored = await warm(floor, repeats)
        await conn.close()
        await store.close()
    finally:
        drop_database(dsn)
        if server is not None:
            server.stop()
    return {"first": first, "last": last, "replay": replay, "floor": floored, "calls": 2}


async def bench_service(tmp: Path, turns: int, repeats: int) -> dict[str, float]:
    import httpx
    from tests.service.process import ServiceProcess

    from agentledger.service import StoreClient
    from agentledger.service.auth import add_token

    tokens = tmp / "tokens.json"
    token = add_token(tokens, "host")
    with ServiceProcess(str(tmp / "served.db"), tokens) as service:
        async with StoreClient(service.url, token=token) as client:
            runs = await converse(client, turns, "service")
            first, last = await _bytes_per_turn(client, runs)

            def calls() -> float:
                text = httpx.get(f"{service.url}/metrics").text
                return sum(
                    float(line.rsplit(" ", 1)[1])
                    for line in text.splitlines()
                    if line.startswith("agentledger_requests_total{")
                )

            before = calls()
            await build_messages_from_run_log(client, runs[-1])
            http_calls = calls() - before - 1  # less the /metrics read itself, if counted
            replay = await warm(lambda: build_messages_from_run_log(client, runs[-1]), repeats)
    return {"first": first, "last": last, "replay": replay, "floor": float("nan"),
            "calls": max(http_calls, 1)}  # fmt: skip


# --- reload of 10,000 messages ---------------------------------------------------------


async def bench_reload(tmp: Path, n: int, repeats: int) -> dict[str, float]:
    from datetime import UTC, datetime, timedelta

    from agents import SQLiteSession

    from agentledger.storage import RecordBuilder, RunStart
    from agentledger.storage.sqlite import SQLiteStore
    from agentledger.transcript import Message, TextPart, encode_messages

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    path = str(tmp / "reload.db")
    store = await SQLiteStore.open(path)
    await store.create_session("s", created_at=t0)
    run = RecordBuilder(RunStart(run_id="run", agent_id="a", session_id="s", started_at=t0))
    await store.start_root_run(run.root_start())
    text = KB[:200]
    batch = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        payload = encode_messages([Message(role=role, parts=(TextPart(text=f"{i} {text}"),))])
        at = t0 + timedelta(milliseconds=i + 1)
        batch.append(run.record("transcript_messages_appended", payload, event_key=f"m{i}", at=at))
        if len(batch) == 500:
            await store.append_run_records(batch)
            batch = []
    await store.close()
    session = SQLiteSession("s", str(tmp / "oa.db"))
    items: list[Any] = []
    for i in range(n):
        if i % 2 == 0:
            items.append({"role": "user", "content": f"{i} {text}"})
        else:
            items.append({"id": f"m{i}", "type": "message", "role": "assistant",
                          "status": "completed", "annotations": [],
                          "content": [{"type": "output_text", "text": f"{i} {text}",
                                       "annotations": []}]})  # fmt: skip
    await session.add_items(items)
    out: dict[str, float] = {}
    for rep in range(3):  # first call on a fresh handle, interleaved
        fresh = await SQLiteStore.open(path)
        start = time.perf_counter()
        assert len(await build_messages_from_run_log(fresh, "run")) == n
        out.setdefault("al_first", 0.0)
        out["al_first"] += (time.perf_counter() - start) / 3
        await fresh.close()
        other = SQLiteSession("s", str(tmp / "oa.db"))
        start = time.perf_counter()
        assert len(await other.get_items()) == n
        out.setdefault("oa_first", 0.0)
        out["oa_first"] += (time.perf_counter() - start) / 3
        other.close()
        del rep
    store = await SQLiteStore.open(path)
    al, oa = [], []
    for _ in range(repeats):  # warm, interleaved
        start = time.perf_counter()
        await build_messages_from_run_log(store, "run")
        al.append(time.perf_counter() - start)
        start = time.perf_counter()
        await session.get_items()
        oa.append(time.perf_counter() - start)
    out["al_warm"], out["oa_warm"] = statistics.median(al), statistics.median(oa)
    await store.close()
    session.close()
    return out


# --- peers ----------------------------------------------------------------------------


def _blob_bytes(path: Path) -> int:
    """Bytes of every TEXT and BLOB value in the database: what a store keeps."""
    conn = sqlite3.connect(path)
    total = 0
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        columns = [row[1] for row in conn.execute(f"PRAGMA table_info('{table}')")]
        sums = ", ".join(f'coalesce(sum(length("{c}")), 0)' for c in columns)
        total += sum(conn.execute(f'SELECT {sums} FROM "{table}"').fetchone())
    conn.close()
    return total


async def bench_peers(tmp: Path, turns: int, repeats: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    try:
        from agents import SQLiteSession
    except ImportError:
        SQLiteSession = None  # type: ignore[assignment,misc]
    if SQLiteSession is not None:
        path = tmp / "oa-conv.db"
        session = SQLiteSession("s", str(path))
        sizes = []
        for i in range(turns):
            items: list[Any] = [{"role": "user", "content": _question(i)}]
            if i % 5 == 4:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": f"c{i}",
                        "name": "lookup",
                        "arguments": json.dumps({"topic": "x"}),
                        "id": f"fc{i}",
                    }
                )
                items.append({"type": "function_call_output", "call_id": f"c{i}",
                              "output": f"x: {KB}"})  # fmt: skip
            items.append({"id": f"m{i}", "type": "message", "role": "assistant",
                          "status": "completed", "content": [{"type": "output_text",
                          "text": f"answer: {KB}", "annotations": []}]})  # fmt: skip
            await session.add_items(items)
            if i in (0, 9, turns - 11, turns - 1):
                sizes.append(_blob_bytes(path))
        reload = await warm(session.get_items, repeats)
        out["openai-agents"] = {
            "first": sizes[1] / 10, "last": (sizes[3] - sizes[2]) / 10, "reload": reload,
        }  # fmt: skip
        session.close()
    try:
        from langchain_core.messages import AIMessage, HumanMessage
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import START, MessagesState, StateGraph
    except ImportError:
        return out
    path = tmp / "lg-conv.db"
    conn = sqlite3.connect(str(path), check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {})
    builder.add_edge(START, "agent")
    graph = builder.compile(checkpointer=SqliteSaver(conn))
    config: Any = {"configurable": {"thread_id": "s"}}
    sizes = []
    for i in range(turns):
        new = [HumanMessage(content=_question(i), id=f"u{i}"),
               AIMessage(content=f"answer: {KB}", id=f"a{i}")]  # fmt: skip
        graph.update_state(config, {"messages": new}, as_node="agent")
        if i in (0, 9, turns - 11, turns - 1):
            sizes.append(_blob_bytes(path))

    async def reload() -> Any:
        return graph.get_state(config).values["messages"]

    out["langgraph"] = {
        "first": sizes[1] / 10, "last": (sizes[3] - sizes[2]) / 10,
        "reload": await warm(reload, repeats),
    }  # fmt: skip
    conn.close()
    return out


# --- Temporal -------------------------------------------------------------------------


async def bench_temporal(tmp: Path, turns: int) -> tuple[int, int] | None:
    try:
        from tests.engine.temporal.harness import temporal_runtime
        from tests.engine.temporal.server import TemporalDevServer

        from agentledger.engine.temporal import connect
        from agentledger.storage.sqlite import SQLiteStore
    except ImportError as e:
        print(f"  (Temporal skipped: {e})")
        return None
    server = TemporalDevServer()
    address = server.start()
    try:
        client = await connect(address)
        store = await SQLiteStore.open(tmp / "temporal.db")
        from datetime import UTC, datetime

        await store.create_session("t", created_at=datetime.now(UTC).replace(microsecond=0))

        def setup(runtime: Runtime) -> None:
            runtime.register_agent(Agent("chat", Chat(), tools=[lookup]))

        sizes = []
        last_plain = max(i for i in range(turns) if i % 5 != 4)  # equal work: no tool call
        async with temporal_runtime(client, store, setup) as runtime:
            chat = runtime.agent_client("chat")
            previous = None
            for i in range(turns):
                out = await chat.run("t", _question(i), after=previous)
                previous = out.run_id
                if i in (0, last_plain):
                    described = await client.get_workflow_handle(out.run_id).describe()
                    info: Any = described.raw_description.workflow_execution_info
                    sizes.append(int(info.history_size_bytes))
        await store.close()
    finally:
        server.stop()
    return sizes[0], sizes[1]


# --- bounded model input --------------------------------------------------------------

_SPAN = 20
"""Turns averaged at each mark: more than one compaction cycle at 8,000 tokens."""


class Recorded:
    """Answers at once, noting the estimated tokens of each turn's model input."""

    def __init__(self) -> None:
        self.tokens: list[int] = []

    async def plan_start(self, input: PlanInput) -> PlanResult:
        from agentledger.providers.model import ModelRequest
        from agentledger.runtime import estimate_tokens

        messages = await input.prepare_messages()
        self.tokens.append(estimate_tokens(ModelRequest(model="", messages=messages)))
        return PlanResult.answer(f"answer: {KB}")

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        return await self.plan_start(input)


class InstantSummariser:
    """A summariser that answers at once with a fixed, 1 KB summary."""

    async def complete(self, request: Any) -> Any:
        from agentledger.testing.scripted import reply

        return reply(f"summary: {KB}")

    def stream(self, request: Any) -> Any:
        raise NotImplementedError


async def bench_history(
    tmp: Path, turns: int, repeats: int, policy: str
) -> dict[int, dict[str, float]]:
    from datetime import UTC, datetime

    from agentledger.runtime import Compaction, LastTurns
    from agentledger.storage.sqlite import SQLiteStore

    store = await SQLiteStore.open(str(tmp / f"history-{policy}.db"))
    await store.create_session("h", created_at=datetime.now(UTC).replace(microsecond=0))
    planner = Recorded()
    runtime = Runtime(store)
    runtime.register_model("summariser", InstantSummariser())  # type: ignore[arg-type]
    history = (
        LastTurns(20) if policy == "last_turns" else Compaction("summariser", threshold_tokens=8000)
    )
    runtime.register_agent(Agent("chat", planner, history=history))
    client = runtime.agent_client("chat")
    marks = sorted({100, 500, 1000, turns} & set(range(_SPAN, turns + 1)))
    out: dict[int, dict[str, float]] = {}
    span: list[dict[str, float]] = []
    previous = None
    for i in range(1, turns + 1):
        run = await client.run("h", f"turn {i}: {KB}", after=previous)
        assert run.status == "completed", run.failure
        previous = run.run_id
        if any(m - _SPAN < i <= m for m in marks):  # a compaction cycle's worth of turns
            segments = await store.load_transcript_chain(previous, windowed=True)
            replay = functools.partial(build_messages_from_run_log, store, previous)
            span.append({"tokens": planner.tokens[-1], "replay": await warm(replay, repeats),
                         "read": sum(len(r.payload) for s in segments for r in s.records),
                         "stored": await stored_bytes(store, previous)})  # fmt: skip
        if i in marks:
            out[i] = {key: statistics.mean(t[key] for t in span) for key in span[0]}
            span = []
    await runtime.close()
    await store.close()
    return out


# --- report ---------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--reload", type=int, default=10_000)
    parser.add_argument("--temporal", action="store_true", help="also run turns on Temporal")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-service", action="store_true")
    parser.add_argument("--history", action="store_true", help="only the bounded-input bench")
    parser.add_argument("--history-turns", type=int, default=2000)
    args = parser.parse_args()
    if args.history:
        print(f"load average at start: {os.getloadavg()}")
        with tempfile.TemporaryDirectory() as name:
            for policy in ("last_turns", "compaction"):
                found = asyncio.run(
                    bench_history(Path(name), args.history_turns, args.repeats, policy)
                )
                label = "LastTurns(20)" if policy == "last_turns" else "Compaction(8000 tokens)"
                print(f"\n{label}: {args.history_turns} turns, SQLite (synchronous=FULL)")
                _row("turn", "input tokens", "replay ms", "bytes read", "bytes stored")
                for turn, r in found.items():
                    _row(str(turn), f"{r['tokens']:.0f}", f"{r['replay'] * 1000:.2f}",
                         f"{r['read']:.0f}", f"{r['stored']:.0f}")  # fmt: skip
                a, b = found[min(found)], found[max(found)]
                ratios = (f"{b[k] / a[k]:.2f}x" for k in ("tokens", "replay", "read", "stored"))
                _row(f"turn {max(found)} ÷ turn {min(found)}", *ratios)
        print(f"load average at end: {os.getloadavg()}")
        return
    print(f"load average at start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        results: dict[str, dict[str, float] | None] = {}
        results["sqlite"] = asyncio.run(bench_sqlite(tmp, args.turns, args.repeats))
        if not args.no_postgres:
            results["postgres"] = asyncio.run(bench_postgres(args.turns, args.repeats))
        if not args.no_service:
            results["service"] = asyncio.run(bench_service(tmp, args.turns, args.repeats))
        print(f"\n{args.turns} turns, one run each, each after the one before by reference")
        _row("", "turns 1-10", f"turns {args.turns - 9}-{args.turns}", "ratio", "replay ms",
             "÷ floor", "calls")  # fmt: skip
        for name_, r in results.items():
            if r is None:
                continue
            _row(f"agentledger {name_} (bytes/turn)", f"{r['first']:.0f}", f"{r['last']:.0f}",
                 f"{r['last'] / r['first']:.2f}x", f"{r['replay'] * 1000:.1f}",
                 f"{r['replay'] / r['floor']:.2f}x", f"{r['calls']:.0f}")  # fmt: skip
        peers = asyncio.run(bench_peers(tmp, args.turns, args.repeats))
        for name_, p in peers.items():
            _row(f"{name_} (bytes/turn)", f"{p['first']:.0f}", f"{p['last']:.0f}",
                 f"{p['last'] / p['first']:.2f}x", f"{p['reload'] * 1000:.1f}")  # fmt: skip
        reload = asyncio.run(bench_reload(tmp, args.reload, args.repeats))
        print(f"\nreload of a {args.reload}-message transcript (ms)")
        _row("", "agentledger", "openai-agents", "ratio")
        for kind in ("warm", "first"):
            al, oa = reload[f"al_{kind}"], reload[f"oa_{kind}"]
            _row(kind, f"{al * 1000:.1f}", f"{oa * 1000:.1f}", f"{al / oa:.2f}x")
        if args.temporal:
            sizes = asyncio.run(bench_temporal(tmp, args.turns))
            if sizes is not None:
                last = max(i for i in range(args.turns) if i % 5 != 4) + 1
                ratio = sizes[1] / sizes[0]
                print("\nTemporal workflow history bytes (turns without a tool call): "
                      f"turn 1 {sizes[0]}, turn {last} {sizes[1]}: {ratio:.2f}x")  # fmt: skip
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
