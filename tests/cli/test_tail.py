"""`agentledger tail RUN_ID`: a real process follows a run as its records commit."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agentledger.storage import Record, RecordBuilder, RunStart, RunStatus
from agentledger.storage.sqlite import SQLiteStore
from tests.cli.conftest import ROOT, Demo, ctrl_c_reaches_children, run_cli

AT = datetime(2026, 1, 1, tzinfo=UTC)


async def _spawn(*args: str) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if k != "AGENTLEDGER_DB"}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentledger", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT, env=env,
    )  # fmt: skip


async def _line(proc: asyncio.subprocess.Process) -> dict[str, object]:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert line, "tail ended early"
    record: dict[str, object] = json.loads(line)
    return record


async def test_tail_follows_live_records_and_ends_with_the_run(tmp_path: Path) -> None:
    """Each record is printed once, as it commits; tail exits 0 once the run has ended."""
    db = tmp_path / "live.db"
    store = await SQLiteStore.open(db)
    proc = None
    try:
        await store.create_session("s", created_at=AT)
        run = RecordBuilder(RunStart(run_id="r", agent_id="a", session_id="s", started_at=AT))
        await store.start_root_run(run.root_start())
        proc = await _spawn("--db", str(db), "tail", "r", "--json", "--interval", "0.05")
        assert (await _line(proc))["type"] == "run_started"
        for n in range(1, 4):  # each record shows up while the run is still going
            at = AT + timedelta(seconds=n)
            payload = json.dumps({"phase": "planning"}).encode()
            await store.append_run_record(
                run.record("run_phase_changed", payload, event_key=f"p{n}", at=at)
            )
            got = await _line(proc)
            assert (got["id"], got["event_key"], got["payload"]) == (
                str(n + 1), f"p{n}", {"phase": "planning"}
            )  # fmt: skip
        await store.record_run_terminal(
            run.terminal(RunStatus.COMPLETED, at=AT + timedelta(seconds=9))
        )
        assert (await _line(proc))["type"] == "run_completed"
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert out == b""
        assert proc.returncode == 0, err
    finally:
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
        await store.close()


def test_tail_resumes_after_a_record_id(demo: Demo) -> None:
    run_id = demo.runs[-1]["run_id"]
    done = run_cli("--db", str(demo.db), "--json", "tail", run_id, "--after", "10")
    assert done.code == 0
    ids = [json.loads(line)["id"] for line in done.out.splitlines()]
    every = run_cli("--db", str(demo.db), "--json", "records", run_id).json()["records"]
    assert ids == [r["id"] for r in every][10:]


def test_tail_text_of_an_ended_run(demo: Demo) -> None:
    run_id = demo.runs[-1]["run_id"]
    done = run_cli("--db", str(demo.db), "tail", run_id)
    assert done.code == 0
    lines = done.out.splitlines()
    assert lines[0].split() == ["ID", "TYPE", "EVENT", "KEY", "TIME", "PAYLOAD"]
    assert lines[1].split()[:2] == ["1", "run_started"]
    assert lines[-1].split()[:2] == ["14", "run_completed"]
    assert done.err == f"run {run_id} canceled\n"


async def test_tail_forever_keeps_going_until_ctrl_c(demo: Demo) -> None:
    """--forever does not stop at the run's end; Ctrl-C ends it with 130, no traceback."""
    with ctrl_c_reaches_children():  # not an ignored SIGINT inherited from the test run
        proc = await _spawn("--db", str(demo.db), "tail", demo.runs[0]["run_id"], "--forever")
    try:
        assert proc.stdout is not None
        await asyncio.wait_for(proc.stdout.readline(), 30)  # the header
        first = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert first.split()[:2] == [b"1", b"run_started"]
        await asyncio.sleep(1.0)
        assert proc.returncode is None
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 130
        assert b"Traceback" not in err
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_follow_crosses_pages_and_emits_each_record_once(tmp_path: Path) -> None:
    """Past a page boundary (100 records a poll) and while records keep coming."""
    from agentledger.cli.tail import follow

    async with await SQLiteStore.open(tmp_path / "long.db") as store:
        await store.create_session("s", created_at=AT)
        run = RecordBuilder(RunStart(run_id="r", agent_id="a", session_id="s", started_at=AT))
        await store.start_root_run(run.root_start())

        async def note(n: int) -> None:
            at = AT + timedelta(milliseconds=n)
            await store.append_run_record(run.record("n", b"{}", event_key=f"n{n}", at=at))

        for n in range(250):
            await note(n)
        seen: list[str] = []
        caught_up = asyncio.Event()

        def emit(record: Record) -> None:
            seen.append(record.id)
            if len(seen) == 251:
                caught_up.set()

        task = asyncio.create_task(follow(store, "r", emit, interval=0.01))
        await asyncio.wait_for(caught_up.wait(), 30)
        for n in range(250, 260):
            await note(n)
        await store.record_run_terminal(run.terminal(RunStatus.FAILED, at=AT + timedelta(1)))
        assert await asyncio.wait_for(task, 30) is RunStatus.FAILED
        assert seen == [str(i) for i in range(1, 263)]
