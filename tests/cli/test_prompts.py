"""``agentledger prompts RUN_ID`` on the demo database: the table, --json, and refusals."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.cli.conftest import Demo, run_cli


def test_prompts_of_the_last_turn_reach_every_earlier_turn_and_the_child(demo: Demo) -> None:
    """The demo's last turn follows four turns back; the second turn's research child counts."""
    runs = [run["run_id"] for run in demo.runs]
    last, child = runs[5], runs[2]
    done = run_cli("--db", str(demo.db), "--json", "prompts", last).json()
    assert done["run_id"] == last
    assert [(p["prompt_id"], p["version"]) for p in done["prompts"]] == [
        ("concierge.system", "3"),
        ("research.system", "2"),
    ]
    concierge, research = done["prompts"]
    assert [(u["run_id"], u["via"]) for u in concierge["uses"]] == [
        (last, "own"),
        (runs[4], "history"),
        (runs[3], "history"),
        (runs[1], "history"),
        (runs[0], "history"),
    ]
    assert research["uses"] == [{"run_id": child, "record_id": "2", "via": "child", "model": ""}]

    text = run_cli("--db", str(demo.db), "prompts", last).out.splitlines()
    assert text[0].split() == ["PROMPT", "VERSION", "VIA", "RUN", "RECORD", "MODEL"]
    assert [line.split() for line in text[1:]] == [
        ["concierge.system", "3", "own", last, "2"],
        *(["concierge.system", "3", "history", run, "2"] for run in (runs[4], runs[3], runs[1])),
        ["concierge.system", "3", "history", runs[0], "2"],
        ["research.system", "2", "child", child, "2"],
    ]


def test_the_first_turn_has_only_its_own(demo: Demo) -> None:
    first = demo.runs[0]["run_id"]
    (row,) = run_cli("--db", str(demo.db), "prompts", first).out.splitlines()[1:]
    assert row.split() == ["concierge.system", "3", "own", first, "2"]


def test_unknown_run_is_a_one_line_error(demo: Demo) -> None:
    done = run_cli("--db", str(demo.db), "prompts", "no-such-run")
    assert done.code == 1
    assert done.err == "agentledger: error: run 'no-such-run' not found\n"
    done = run_cli("--db", str(demo.db), "--json", "prompts", "no-such-run")
    assert done.code == 1
    refusal = json.loads(done.err)
    assert isinstance(refusal, dict)
    assert "no-such-run" in json.dumps(refusal)


def test_damage_in_an_earlier_turn_names_its_run_and_record(demo: Demo, tmp_path: Path) -> None:
    """A prompt record of the first turn rewritten on disk fails the last turn's answer."""
    db = demo.copy(tmp_path)
    runs = [run["run_id"] for run in demo.runs]
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute(
            "UPDATE records SET payload = CAST(replace(CAST(payload AS TEXT), '\"3\"', '\"4\"')"
            " AS BLOB) WHERE run_id = ? AND type = 'prompt_rendered'",
            (runs[0],),
        )
    finally:
        conn.close()
    done = run_cli("--db", str(db), "prompts", runs[5])
    assert done.code == 1
    assert runs[0] in done.err
    assert "corrupt record '2'" in done.err
    assert "Traceback" not in done.err
    assert done.out == ""


def test_a_link_to_a_run_the_store_lost_is_damage(demo: Demo, tmp_path: Path) -> None:
    """A child run deleted behind the store's back: the link naming it is reported."""
    db = demo.copy(tmp_path)
    parent, child = demo.runs[1]["run_id"], demo.runs[2]["run_id"]
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("DELETE FROM records WHERE run_id = ?", (child,))
        conn.execute("DELETE FROM runs WHERE run_id = ?", (child,))
        (link,) = conn.execute(
            "SELECT seq FROM records WHERE run_id = ? AND type = 'child_run_linked'", (parent,)
        ).fetchone()
    finally:
        conn.close()
    done = run_cli("--db", str(db), "prompts", parent)
    assert done.code == 1
    assert done.err == (
        f"agentledger: error: corrupt record '{link}' of run '{parent}': child_run_linked: "
        f"names run {child}, which the store does not have\n"
    )


def test_a_run_without_prompts_says_so(tmp_path: Path) -> None:
    """A run no planner rendered a prompt for (records written by hand): one line; --json []."""
    import asyncio

    from agentledger.storage.conformance import World
    from agentledger.storage.sqlite import SQLiteStore

    async def seed() -> str:
        async with await SQLiteStore.open(tmp_path / "bare.db") as store:
            world = World(store)
            run = await world.root("bare", session=await world.session("s"))
            return run.run.run_id

    run_id = asyncio.run(seed())
    done = run_cli("--db", str(tmp_path / "bare.db"), "prompts", run_id)
    assert (done.code, done.out) == (
        0,
        f"run {run_id} rendered no prompt, nor did any run it reaches\n",
    )
    assert run_cli("--db", str(tmp_path / "bare.db"), "--json", "prompts", run_id).json() == {
        "run_id": run_id,
        "prompts": [],
    }
