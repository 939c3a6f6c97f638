"""Benchmark: a warm reload and a chain replay against one raw ``SELECT`` (issue 39).

Run as ``.venv/bin/python bench/replay_limits.py``. It is not a test. On one SQLite
file (WAL):

- ``reload``: one run of ``--messages`` transcript records (one ~200-byte message
  each) read back by ``build_messages_from_run_log`` on an open store (warm: after
  a first call), against one raw ``SELECT payload`` of the same rows in order and
  ``json.loads`` of each (goal: <= 1.1x), and against openai-agents'
  ``SQLiteSession.get_items`` of the same messages in their own format (one
  ``{"role", "content"}`` item each, in a file of their own; goal: <= 1.0x; they
  return dicts, we return typed, checked messages). Skipped if openai-agents is
  not installed (``--no-peer`` skips it too);
- ``replay``: the newest of a ``--turns`` conversation, each turn a run whose
  history is a reference to the turn before (a reference, the user's message, the
  answer), replayed by ``build_messages_from_run_log``, against one raw ``SELECT``
  of the session's message payloads in commit order and ``json.loads`` of each
  (goal: <= 1.5x).

Both sides are timed interleaved, warm, in one process, ``--reps`` times; the
figure is the median of each and their ratio, with the load average, and the median
CPU time of each (all threads; under load the wall times mostly measure waiting for a
core). Each of ours is then split into its steps, timed the same way: the statements the
store's chain read runs, their rows fetched and nothing else (the floor of the read), the
store's chain read (``load_transcript_chain``: statements, checksums, a ``Record`` per returned
row, the lifecycle checks, the reader thread), resolving it (:func:`resolve_chain`) and
decoding the messages (``replay_transcript_chain``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec

from agentledger.storage import RecordBuilder, RunStart, RunStatus, payloads
from agentledger.storage.replay import replay_transcript_chain
from agentledger.storage.sqlite import SQLiteStore, reader
from agentledger.storage.transcript_chain import TranscriptChain, resolve_chain
from agentledger.storage.types import Record
from agentledger.transcript import Message, TextPart, build_messages_from_run_log, encode_messages

if TYPE_CHECKING:
    from agents.memory import SQLiteSession

T0 = datetime(2026, 1, 1, tzinfo=UTC)
_MESSAGES = ("transcript_messages_appended", "transcript_messages_seeded")


def _text(i: int) -> str:
    """About 200 bytes of conversation text, distinct per message."""
    return f"message {i}: " + ("the ledger keeps every message in order. " * 5)


def _said(run: RecordBuilder, key: str, role: str, text: str, at: datetime) -> Record:
    payload = encode_messages([Message(role=role, parts=(TextPart(text=text),))])  # type: ignore[arg-type]
    return run.record(payloads.TRANSCRIPT_APPENDED, payload, event_key=key, at=at)


async def _fill(path: Path, messages: int, turns: int) -> str:
    """The reload run ("run") and a ``turns``-turn conversation; the newest turn's id."""
    store = await SQLiteStore.open(path, durability="normal")
    await store.create_session("s", created_at=T0)
    await store.create_session("c", created_at=T0)
    run = RecordBuilder(RunStart(run_id="run", agent_id="a", session_id="s", started_at=T0))
    await store.start_root_run(run.root_start())
    batch = [
        _said(run, f"m{i}", "user" if i % 2 == 0 else "assistant", _text(i), T0)
        for i in range(messages)
    ]
    for at in range(0, len(batch), 500):
        await store.append_run_records(batch[at : at + 500])
    previous = ""
    for i in range(turns):
        at = T0 + timedelta(milliseconds=i)
        turn = RecordBuilder(RunStart(run_id=f"t{i}", agent_id="a", session_id="c", started_at=at))
        records = []
        if previous:
            last = (await store.load_run(previous)).last_record_id
            body = payloads.TranscriptReference(kind="next_turn", run_id=previous, through=last)
            records.append(
                turn.record(payloads.TRANSCRIPT_REFERENCED, body.encode(), event_key="ref", at=at)
            )
        records.append(_said(turn, "in", "user", _text(2 * i), at))
        records.append(_said(turn, "out", "assistant", _text(2 * i + 1), at))
        start = msgspec.structs.replace(turn.root_start(), records=tuple(records))
        await store.start_root_run(start)
        await store.record_run_terminal(turn.terminal(RunStatus.COMPLETED, at=at))
        previous = f"t{i}"
    await store.close()
    return previous


async def _peer(path: Path, messages: int) -> SQLiteSession | None:
    """openai-agents' SQLite session holding the reload's messages as their items."""
    try:
        from agents.memory import SQLiteSession
    except ImportError:
        return None
    session = SQLiteSession("s", path)
    items: list[Any] = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": _text(i)}
        for i in range(messages)
    ]
    for at in range(0, len(items), 500):
        await session.add_items(items[at : at + 500])
    return session


def _raw(conn: sqlite3.Connection, sql: str, arg: str) -> Callable[[], int]:
    def read() -> int:
        rows = conn.execute(sql, (arg,)).fetchall()
        return sum(len(json.loads(payload)) for (payload,) in rows)

    return read


_CPU: dict[str, list[float]] = {}
"""CPU seconds (every thread of the process) of each timed call, by what was called:
under load the wall times mostly measure waiting for a core, the CPU what each side costs."""


async def _timed(
    call: Callable[[], Awaitable[object]] | Callable[[], object], name: str = ""
) -> float:
    start, cpu = time.perf_counter(), time.process_time()
    result = call()
    if asyncio.iscoroutine(result):
        await result
    wall = time.perf_counter() - start
    _CPU.setdefault(name, []).append(time.process_time() - cpu)
    return wall


def _cpu(name: str) -> float:
    return statistics.median(_CPU[name]) * 1000


def _statements(conn: sqlite3.Connection, chain: TranscriptChain) -> Callable[[], int]:
    """The statements the store's chain read runs, their rows fetched and nothing else done
    (no checksum, no record, no check): the floor of the store read on this machine."""
    head = {"run": chain.run_id}
    session_id = conn.execute("SELECT session_id FROM runs WHERE run_id = ?", (chain.run_id,))
    (session,) = session_id.fetchone()
    links = [[link.run_id, link.first, link.through] for link in chain.links]
    named = json.dumps(sorted(link.run_id for link in chain.links))

    def read() -> int:
        rows = conn.execute(reader._CHAIN_HEAD, head).fetchall()
        if session:
            rows += conn.execute(reader._CHAIN_WINDOWS, (session, chain.run_id)).fetchall()
            rows += conn.execute(reader._CHAIN_NAMED_HEADS, (session, named)).fetchall()
        if len(links) == 1:
            rows += conn.execute(reader._CHAIN_ROWS_ONE, links[0]).fetchall()
        else:
            rows += conn.execute(reader._LEAN_ROWS, (json.dumps(links),)).fetchall()
        return len(rows)

    return read


async def _main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "limits.db"
        newest = await _fill(path, args.messages, args.turns)
        store = await SQLiteStore.open(path)
        conn = sqlite3.connect(path, isolation_level=None)
        kinds = ", ".join(f"'{k}'" for k in _MESSAGES)
        raw_reload = _raw(
            conn,
            f"SELECT payload FROM records WHERE run_id = ? AND type IN ({kinds}) ORDER BY seq",
            "run",
        )
        raw_chain = _raw(
            conn,
            f"SELECT payload FROM records WHERE session_id = ? AND type IN ({kinds}) ORDER BY pos",
            "c",
        )
        peer = None if args.no_peer else await _peer(Path(tmp) / "peer.db", args.messages)
        cases = {
            "reload": (
                lambda: build_messages_from_run_log(store, "run"),
                raw_reload,
                args.messages,
            ),
            "replay": (
                lambda: build_messages_from_run_log(store, newest),
                raw_chain,
                2 * args.turns,
            ),
        }
        for ours, raw, count in cases.values():  # warm both, and check equal work
            assert len(await ours()) == count == raw()
        if peer is not None:
            assert len(await peer.get_items()) == args.messages
        print(f"load average {os.getloadavg()[0]:.2f} (2 cores shared)")
        for name, (ours, raw, count) in cases.items():
            mine: list[float] = []
            floor: list[float] = []
            theirs: list[float] = []
            for _ in range(args.reps):
                mine.append(await _timed(ours, f"{name} ours"))
                floor.append(await _timed(raw, f"{name} raw"))
                if peer is not None and name == "reload":
                    theirs.append(await _timed(peer.get_items, f"{name} peer"))
            a, b = statistics.median(mine), statistics.median(floor)
            ca, cb = _cpu(f"{name} ours"), _cpu(f"{name} raw")
            print(
                f"{name:7} {count:6} messages: agentledger {a * 1000:7.2f} ms, "
                f"raw SELECT + json.loads {b * 1000:7.2f} ms, ratio {a / b:.2f}x "
                f"(CPU {ca:.2f} / {cb:.2f} ms, {ca / cb:.2f}x)"
            )
            if theirs:
                c, cc = statistics.median(theirs), _cpu(f"{name} peer")
                print(
                    f"{name:7} {count:6} messages: openai-agents get_items {c * 1000:7.2f} ms, "
                    f"agentledger / get_items {a / c:.2f}x (CPU {cc:.2f} ms, {ca / cc:.2f}x)"
                )
        for name, run_id in (("reload", "run"), ("replay", newest)):
            segments = await store.load_transcript_chain(run_id, windowed=True)
            chain = resolve_chain(segments, windowed=True)
            steps: dict[str, Callable[[], object]] = {
                "statements": _statements(conn, chain),
                "store read": lambda r=run_id: store.load_transcript_chain(r, windowed=True),
                "resolve": lambda s=segments: resolve_chain(s, windowed=True),
                "decode": lambda c=chain: replay_transcript_chain(c, verified=True),
            }
            times: dict[str, list[float]] = {step: [] for step in steps}
            for _ in range(args.reps):
                for step, call in steps.items():
                    times[step].append(await _timed(call, f"{name} {step}"))
            split = ", ".join(
                f"{step} {statistics.median(t) * 1000:.2f} ms (CPU {_cpu(f'{name} {step}'):.2f})"
                for step, t in times.items()
            )
            print(f"{name:7} steps: {split}")
        print(f"load average {os.getloadavg()[0]:.2f}")
        conn.close()
        await store.close()
        if peer is not None:
            peer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument(
        "--no-peer", action="store_true", help="skip the openai-agents get_items reference"
    )
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
