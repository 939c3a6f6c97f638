"""``agentledger runs`` and the web inspector (server-rendered pages, read over HTTP) say
what happened to each message sent while the session was busy, in the same words."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from agentledger.runtime import Agent, QueueSink, Runtime
from agentledger.storage.sqlite import SQLiteStore
from tests.cli.conftest import run_cli
from tests.runtime.support import now_ms
from tests.runtime.test_busy import Echo
from tests.service.process import ServiceProcess, Tokens


async def _session(path: Path) -> dict[str, str]:
    store = await SQLiteStore.open(path)
    await store.create_session("chat", created_at=now_ms())
    planner = Echo()
    runtime = Runtime(store, stream=QueueSink())
    runtime.register_agent(Agent("echo", planner, if_busy="queue"))
    client = runtime.agent_client("echo")
    first = await client.start("chat", "please wait")
    await planner.holding.wait()
    queued = await client.start("chat", "two")
    stop = await client.start("chat", "stop", if_busy="interrupt")
    await first.wait()
    await queued.wait()
    await stop.wait()
    # A message left waiting: its turn follows one that is still running.
    planner.holding.clear()
    planner.release.clear()
    slow = await client.start("chat", "wait again")
    await planner.holding.wait()
    waiting = await client.start("chat", "later")
    ids = {
        "first": first.run_id, "queued": queued.run_id, "stop": stop.run_id,
        "slow": slow.run_id, "waiting": waiting.run_id,
    }  # fmt: skip
    await runtime.close()
    await store.close()
    return ids


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    db = tmp_path_factory.mktemp("busy") / "busy.db"
    return db, asyncio.run(_session(db))


def test_runs_show_each_message_fate(busy: tuple[Path, dict[str, str]]) -> None:
    db, ids = busy
    done = run_cli("--db", str(db), "runs", "chat")
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    line = {
        name: next(x for x in lines if f"── {run_id} " in x or x.startswith(f"waiting: {run_id}"))
        for name, run_id in ids.items()
    }
    assert "message #1 started at once" in line["first"]
    assert f"(interrupted by message {ids['stop']})" in line["first"]
    assert "message #2 queued" in line["queued"]
    assert f"message #3 interrupted {ids['first']}" in line["stop"]
    assert line["waiting"].startswith(f"waiting: {ids['waiting']}  message #5 queued")
    data = run_cli("--db", str(db), "runs", "chat", "--json").json()
    fates = {r["run_id"]: r["message"]["fate"] for r in data["runs"] if "message" in r}
    assert fates[ids["stop"]] == "interrupting"
    assert [w["run_id"] for w in data["waiting"]] == [ids["waiting"]]


def test_the_inspector_shows_each_message_fate(
    busy: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """The session page and conversation note each run's message (position and fate) and
    list the message still waiting; a run's header says which message started it."""
    db, ids = busy
    fates = {  # each shown as <span class="message-fate" title="...started for">FATE</span>
        "first": "message #1 started at once",
        "queued": "message #2 queued",
        "stop": f"message #3 interrupted {ids['first']}",
        "slow": "message #4 started at once",
    }
    waiting = (
        f'<li data-message="{ids["waiting"]}"><span class="message-fate">message #5 queued, '
        f'after {ids["slow"]}</span> <span class="id">{ids["waiting"]}</span> '
        '<span class="asked">“later”</span></li>'
    )
    tokens = Tokens(tmp_path / "tokens.json")
    with ServiceProcess(str(db), tokens.path) as service:
        headers = {"Authorization": f"Bearer {tokens.reader}"}
        with httpx.Client(base_url=service.url, headers=headers, timeout=60) as client:

            def page(path: str, **params: str) -> str:
                answer = client.get(path, params=params)
                assert answer.status_code == 200, answer.text[:500]
                return answer.text

            for path in ("/ui/session", "/ui/session/conversation"):
                shown = page(path, id="chat")
                for fate in fates.values():
                    assert f'started for">{fate}</span>' in shown, (path, fate)
                assert waiting in shown, path
                assert "Waiting for their turn" in shown
            for name, fate in fates.items():
                header = page("/ui/run", id=ids[name])
                assert f'<dd id="run-message">{fate}</dd>' in header, name


async def _steered(path: Path) -> dict[str, str]:
    from tests.runtime.test_busy_steer import _setup

    store = await SQLiteStore.open(path)
    await store.create_session("chat", created_at=now_ms())
    runtime, planner, started, release, _ = _setup(store)
    client = runtime.agent_client("chat")
    first = await client.start("chat", "look it up", if_busy="queue")
    await started.wait()
    taken = await client.start("chat", "cats", if_busy="steer")
    release.set()
    await first.wait()
    # a steer that arrives during the run's last planner turn becomes its own turn
    planner.gate = hold = asyncio.Event()
    second = await client.start("chat", "and?", if_busy="queue")
    await planner.holding.wait()
    own = await client.start("chat", "dogs", if_busy="steer")
    hold.set()
    await second.wait()
    await own.wait()
    ids = {"first": first.run_id, "taken": taken.run_id, "second": second.run_id}
    ids["own"] = own.run_id
    await runtime.close()
    await store.close()
    return ids


def test_runs_say_whether_a_steer_was_taken_or_became_a_turn(tmp_path: Path) -> None:
    db = tmp_path / "steer.db"
    ids = asyncio.run(_steered(db))
    done = run_cli("--db", str(db), "runs", "chat")
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    first = next(i for i, x in enumerate(lines) if f"── {ids['first']} " in x)
    assert lines[first + 1].strip(" │") == f"took message #2 {ids['taken']} (steered)"
    own = next(x for x in lines if f"── {ids['own']} " in x)
    assert f"steered into {ids['second']}, which ended first: its own turn" in own
    assert not any(f"── {ids['taken']} " in x for x in lines)  # no turn of its own
    data = run_cli("--db", str(db), "runs", "chat", "--json").json()
    row = next(r for r in data["runs"] if r["run_id"] == ids["first"])
    assert [(m["run_id"], m["fate"]) for m in row["steered"]] == [(ids["taken"], "steered")]
