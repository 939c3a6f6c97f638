"""[D5] [V6] prompt_versions: every prompt version that influenced a run, from records only.

Runs are made by the in-process runtime with ModelPlanner and scripted models,
on every backend: memory, an SQLite file, PostgreSQL, and a real store service
over HTTP (StoreClient).
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from agentledger.errors import CorruptRecordError, RunNotFoundError
from agentledger.runtime import (
    Agent,
    ModelPlanner,
    PromptUse,
    PromptVersion,
    Runtime,
    ToolContext,
    prompt_versions,
    tool,
)
from agentledger.runtime import records as rt
from agentledger.service import StoreClient
from agentledger.storage import Record, RunStatus, payloads
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.runtime.support import now_ms, records


@pytest.fixture
def store(every_store: Any) -> Any:
    """A store of every backend (see ``tests/runtime/conftest.py``)."""
    return every_store


@pytest.fixture
def session(every_session: str) -> str:
    return every_session


def _window(ctx: ToolContext, start: Record, source: str) -> Record:
    """A compaction's window record, as the runtime writes one: written here by a tool,
    since these tests are about reading it."""
    window = payloads.TranscriptWindow(
        policy="compact:8000",
        start=payloads.TranscriptPosition(run_id=start.run_id, record=start.id),
        summary="The user asked when the Eiffel Tower was built: 1889.",
        replaces=(payloads.WindowReplaces(run_id=source, first="1", last="3"),),
        model="summariser-model",
        prompt_id="summarise",
        prompt_version="2",
    )
    return Record(
        run_id=ctx.run_id,
        agent_id=ctx.agent_id,
        session_id=ctx.session_id,
        turn_id=ctx.turn_id,
        event_key=f"window:{ctx.tool_call_id}",
        type=payloads.TRANSCRIPT_WINDOW,
        timestamp=now_ms(),
        payload=window.encode(),
    )


def _first_runtime(store: Any) -> Runtime:
    """chat (prompt version 3) delegates to research (version 7) as an agent tool."""
    runtime = Runtime(store)
    boss = ScriptedModel(
        [tool_calls(("d1", "research", {"request": "Eiffel Tower?"})), reply("Built in 1889.")]
    )
    runtime.register_model("boss", boss)
    runtime.register_model("helper", ScriptedModel([reply("1889.")]))
    helper = ModelPlanner("helper", system="Research.", prompt_version="7")
    runtime.register_agent(Agent("research", helper, description="Looks things up."))
    planner = ModelPlanner("boss", system="Delegate.", prompt_id="chat.system", prompt_version="3")
    runtime.register_agent(Agent("chat", planner, agents=["research"]))
    return runtime


def _second_runtime(store: Any, source: str) -> Runtime:
    """chat at prompt version 4, whose ``compact`` tool records a compaction summary."""

    @tool
    async def compact(ctx: ToolContext) -> str:
        """Summarise the conversation so far."""
        own = await records(store, ctx.run_id)
        start = next(r for r in own if r.type == rt.TRANSCRIPT_APPENDED)
        await store.append_run_records([_window(ctx, start, source or ctx.run_id)])
        return "compacted"

    runtime = Runtime(store)
    script = [
        tool_calls(("k1", "compact", {})),
        reply("Still 1889."),
        reply("1793."),
        reply("Paris."),
    ]
    runtime.register_model("boss", ScriptedModel(script))
    planner = ModelPlanner("boss", system="Delegate.", prompt_id="chat.system", prompt_version="4")
    runtime.register_agent(Agent("chat", planner, tools=[compact]))
    return runtime


def _record(rows: list[Record], type: str) -> str:
    return next(r.id for r in rows if r.type == type)


async def test_own_child_next_turn_summary_and_fork(store: Any, session: str) -> None:
    """A turn with an agent tool, the next turn (by reference, with a compaction summary),
    and a fork of the first turn: each lists what influenced it, in walk order."""
    first = await _first_runtime(store).agent_client("chat").run(session, "When?")
    assert first.status is RunStatus.COMPLETED, first.failure
    r1 = first.run_id
    rows1 = await records(store, r1)
    link = next(r for r in rows1 if r.type == payloads.CHILD_RUN_LINKED)
    c1 = payloads.ChildRunLinked.decode(link.payload).child_run_id
    c1_prompt = _record(await records(store, c1), rt.PROMPT_RENDERED)
    r1_prompt = _record(rows1, rt.PROMPT_RENDERED)
    from_first = (
        PromptVersion(
            prompt_id="chat.system",
            version="3",
            uses=(PromptUse(run_id=r1, record_id=r1_prompt, via="history"),),
        ),
        PromptVersion(
            prompt_id="research.system",
            version="7",
            uses=(PromptUse(run_id=c1, record_id=c1_prompt, via="child"),),
        ),
    )
    assert await prompt_versions(store, r1) == (
        msgspec.structs.replace(
            from_first[0], uses=(PromptUse(run_id=r1, record_id=r1_prompt, via="own"),)
        ),
        from_first[1],
    )
    assert await prompt_versions(store, c1) == (
        msgspec.structs.replace(
            from_first[1], uses=(PromptUse(run_id=c1, record_id=c1_prompt, via="own"),)
        ),
    )

    client = _second_runtime(store, r1).agent_client("chat")
    second = await client.run(session, "Sure?", after=r1)
    assert second.status is RunStatus.COMPLETED, second.failure
    r2 = second.run_id
    rows2 = await records(store, r2)
    assert await prompt_versions(store, r2) == (
        PromptVersion(
            prompt_id="chat.system",
            version="4",
            uses=(PromptUse(run_id=r2, record_id=_record(rows2, rt.PROMPT_RENDERED), via="own"),),
        ),
        PromptVersion(
            prompt_id="summarise",
            version="2",
            uses=(
                PromptUse(
                    run_id=r2,
                    record_id=_record(rows2, payloads.TRANSCRIPT_WINDOW),
                    via="summary",
                    model="summariser-model",
                ),
            ),
        ),
        *from_first,
    )

    fork = await client.fork(r1, "And the Louvre?")
    assert fork.status is RunStatus.COMPLETED, fork.failure
    fork_prompt = _record(await records(store, fork.run_id), rt.PROMPT_RENDERED)
    own = PromptUse(run_id=fork.run_id, record_id=fork_prompt, via="own")
    assert await prompt_versions(store, fork.run_id) == (
        PromptVersion(prompt_id="chat.system", version="4", uses=(own,)),
        *from_first,
    )

    # A fork of the second turn cut at its user message: the summary written after
    # the cut did not influence it; the second turn's own prompt did.
    cut = _record(rows2, rt.TRANSCRIPT_APPENDED)
    assert int(cut) < int(_record(rows2, payloads.TRANSCRIPT_WINDOW))
    branch = await client.fork(r2, "Where?", through=cut)
    assert branch.status is RunStatus.COMPLETED, branch.failure
    branch_prompt = _record(await records(store, branch.run_id), rt.PROMPT_RENDERED)
    assert await prompt_versions(store, branch.run_id) == (
        PromptVersion(
            prompt_id="chat.system",
            version="4",
            uses=(
                PromptUse(run_id=branch.run_id, record_id=branch_prompt, via="own"),
                PromptUse(run_id=r2, record_id=_record(rows2, rt.PROMPT_RENDERED), via="history"),
            ),
        ),
        *from_first,
    )


async def test_a_window_record_is_an_ordinary_record(store: Any, session: str) -> None:
    """The store takes ``transcript_window_applied`` through the ordinary append path and
    gives it back byte for byte (the compaction above relies on it)."""
    runtime = _second_runtime(store, "")
    out = await runtime.agent_client("chat").run(session, "Compact, please")
    assert out.status is RunStatus.COMPLETED, out.failure
    rows = await records(store, out.run_id)
    (window,) = [r for r in rows if r.type == payloads.TRANSCRIPT_WINDOW]
    start = next(r for r in rows if r.type == rt.TRANSCRIPT_APPENDED)
    ctx = ToolContext(
        run_id=out.run_id,
        agent_id="chat",
        session_id=session,
        turn_id=window.turn_id,
        tool_call_id="k1",
    )
    expected = _window(ctx, start, out.run_id)
    assert (window.event_key, window.payload) == (expected.event_key, expected.payload)
    decoded = payloads.TranscriptWindow.decode(window.payload)
    assert (decoded.prompt_id, decoded.prompt_version, decoded.model) == (
        "summarise",
        "2",
        "summariser-model",
    )


async def test_a_missing_run_is_the_stores_not_found(store: Any) -> None:
    with pytest.raises(RunNotFoundError) as e:
        await prompt_versions(store, "no-such-run")
    assert e.value.run_id == "no-such-run"


async def test_a_damaged_prompt_record_is_reported_never_skipped(store: Any, session: str) -> None:
    """A ``prompt_rendered`` (or window) whose payload does not fit fails the whole answer,
    naming the run and record, also when it sits in an earlier turn."""
    from agentledger.storage.conformance import World

    world = World(store)
    broken = world.run("broken", session=session, agent="chat")
    await store.start_root_run(broken.root_start())
    bad = broken.record(
        rt.PROMPT_RENDERED, b'{"prompt_id":"chat.system"}', event_key="prompt:x", at=now_ms()
    )
    (stored,) = await store.append_run_records([bad])
    with pytest.raises(CorruptRecordError) as e:
        await prompt_versions(store, broken.run.run_id)
    assert (e.value.run_id, e.value.record_id) == (broken.run.run_id, stored.id)
    assert "prompt_rendered" in e.value.reason


async def test_damage_in_an_earlier_turn_fails_the_newest(tmp_path: Path) -> None:
    """A prompt record rewritten on disk three turns back is reported for the newest turn."""
    path = tmp_path / "damaged.db"
    async with await SQLiteStore.open(path) as store:
        session = f"s-{uuid.uuid4().hex}"
        await store.create_session(session, created_at=now_ms())
        first = await _first_runtime(store).agent_client("chat").run(session, "When?")
        client = _second_runtime(store, first.run_id).agent_client("chat")
        second = await client.run(session, "Sure?", after=first.run_id)
        assert len(await prompt_versions(store, second.run_id)) == 4
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(
            "UPDATE records SET payload = CAST(replace(CAST(payload AS TEXT), "
            "'chat.system', 'chat.systen') AS BLOB) WHERE run_id = ? AND type = ?",
            (first.run_id, rt.PROMPT_RENDERED),
        )
    finally:
        conn.close()
    async with await SQLiteStore.open(path) as store:
        with pytest.raises(CorruptRecordError) as e:
            await prompt_versions(store, second.run_id)
    assert e.value.run_id == first.run_id


async def test_a_history_cycle_is_corruption_not_a_shorter_answer(tmp_path: Path) -> None:
    """A reference rewritten on disk to name its own run (a cycle no store writes) fails
    the answer, naming that reference; the walk used to stop there silently."""
    from agentledger.storage.sqlite.schema import _backfill_checksums

    path = tmp_path / "cycle.db"
    async with await SQLiteStore.open(path) as store:
        session = f"s-{uuid.uuid4().hex}"
        await store.create_session(session, created_at=now_ms())
        first = await _first_runtime(store).agent_client("chat").run(session, "When?")
        client = _second_runtime(store, first.run_id).agent_client("chat")
        second = await client.run(session, "Sure?", after=first.run_id)
        reference = next(
            r for r in await records(store, second.run_id) if r.type == rt.TRANSCRIPT_REFERENCED
        )
    body = payloads.TranscriptReference.decode(reference.payload)
    looped = msgspec.structs.replace(body, run_id=second.run_id, through="1").encode()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        update = "UPDATE records SET payload = ? WHERE run_id = ? AND seq = ?"
        assert conn.execute(update, (looped, second.run_id, int(reference.id))).rowcount == 1
        _backfill_checksums(conn)
    finally:
        conn.close()
    async with await SQLiteStore.open(path) as store:
        with pytest.raises(CorruptRecordError, match="a cycle") as e:
            await prompt_versions(store, second.run_id)
    assert (e.value.run_id, e.value.record_id) == (second.run_id, reference.id)


def _requests(url: str, method: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("agentledger_requests_total{") and f'method="{method}"' in line
    )


async def test_reads_are_one_page_per_run_reached(served: tuple[str, str]) -> None:
    """Over HTTP: one ``list_run_records`` call per run reached (each holds under a page),
    one ``load_transcript_chain`` per run walked from (the run asked about and its
    child), and no other read, however the runs are related."""
    url, token = served
    async with StoreClient(url, token=token) as client:
        session = f"s-{uuid.uuid4().hex}"
        await client.create_session(session, created_at=now_ms())
        first = await _first_runtime(client).agent_client("chat").run(session, "When?")
        chat = _second_runtime(client, first.run_id).agent_client("chat")
        second = await chat.run(session, "Sure?", after=first.run_id)
        third = await chat.run(session, "Really?", after=second.run_id)
        before = {m: _requests(url, m) for m in ("list_run_records", "load_run")}
        chains_before = _requests(url, "load_transcript_chain")
        found = await prompt_versions(client, third.run_id)
        after = {m: _requests(url, m) for m in ("list_run_records", "load_run")}
        chains_after = _requests(url, "load_transcript_chain")
    assert [(p.prompt_id, p.version) for p in found] == [
        ("chat.system", "4"),
        ("summarise", "2"),
        ("chat.system", "3"),
        ("research.system", "7"),
    ]
    # the third turn, the second, the first and the first's child
    assert after["list_run_records"] - before["list_run_records"] == 4
    assert after["load_run"] == before["load_run"]
    assert chains_after - chains_before == 2


async def test_compaction_by_the_runtime_lists_its_summariser(store: Any, session: str) -> None:
    """A conversation under ``Compaction``: each summary's prompt version and model are
    listed where the runtime recorded them, and the turns behind a summary still count
    (the summary was written from them)."""
    from agentledger.runtime import Compaction

    runtime = Runtime(store)
    runtime.register_model("m", ScriptedModel([reply("y" * 200) for _ in range(6)]))
    runtime.register_model("summariser", ScriptedModel([reply(f"summary {i}") for i in range(6)]))
    policy = Compaction("summariser", threshold_tokens=300, keep_tokens=120, prompt_version="7")
    runtime.register_agent(Agent("chat", ModelPlanner("m", prompt_version="2"), history=policy))
    client = runtime.agent_client("chat")
    runs: list[str] = []
    for i in range(6):
        out = await client.run(session, f"question {i}", after=runs[-1] if runs else None)
        assert out.status is RunStatus.COMPLETED, out.failure
        runs.append(out.run_id)
    summaries = [
        PromptUse(run_id=r.run_id, record_id=r.id, via="summary", model="summariser")
        for run_id in reversed(runs)
        for r in await records(store, run_id)
        if r.type == payloads.TRANSCRIPT_WINDOW
        and payloads.TranscriptWindow.decode(r.payload).prompt_id
    ]
    assert summaries, "the threshold was crossed, so a summary was written"
    chat, summariser = await prompt_versions(store, runs[-1])
    assert (chat.prompt_id, chat.version) == ("chat.system", "2")
    assert [(u.run_id, u.via) for u in chat.uses] == [(runs[-1], "own")] + [
        (run_id, "history") for run_id in reversed(runs[:-1])
    ]
    assert (summariser.prompt_id, summariser.version) == ("agentledger.compaction", "7")
    assert summariser.uses == tuple(summaries)
