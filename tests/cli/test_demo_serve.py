"""``agentledger demo --serve``: the demo, then the inspector over it with the demo's host
runtime, a price table and a new host token, so every action works offline."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import httpx

from tests.cli.conftest import ROOT
from tests.conditions import until


def _documented() -> list[str]:
    """The command docs/inspector.md shows (its --db and --listen values replaced)."""
    text = (ROOT / "docs" / "inspector.md").read_text(encoding="utf-8")
    (line,) = [x for x in text.splitlines() if x.startswith("agentledger demo ")]
    words = line.split()[1:]
    assert words == ["demo", "--db", "demo.db", "--serve", "--listen", "127.0.0.1:8470"]
    return words


async def test_demo_serve_serves_the_demo_with_a_host_runtime_and_prices(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    words = _documented()
    words[2], words[5] = str(db), "127.0.0.1:0"
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTLEDGER_DB", "AGENTLEDGER_PRICES")}
    env = {k: v for k, v in env.items() if not k.endswith(("_API_KEY", "AWS_ACCESS_KEY_ID"))}
    with out.open("w") as stdout, err.open("w") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agentledger", *words, stdout=stdout, stderr=stderr, cwd=ROOT,
            env=env,
        )  # fmt: skip
    try:
        await until(lambda: "listening on" in out.read_text(), "the service listens", 180)
        url = re.search(r"listening on (\S+)", out.read_text()).group(1)  # type: ignore[union-attr]
        said = err.read_text()
        token = re.search(r"shown once; its hash is in [^)]+\):\n  (\S+)", said)
        assert token is not None, said
        assert (tmp_path / "demo.db.prices.toml").exists()
        bearer = {"Authorization": f"Bearer {token.group(1)}"}
        async with httpx.AsyncClient(headers=bearer) as client:
            sessions = await client.get(f"{url}/ui")
            assert sessions.status_code == 200
            assert 'action="/ui/session/new"' in sessions.text  # a host runtime that chats
            assert '<option value="concierge">' in sessions.text
            session = re.search(r'data-session="(demo-[0-9a-f]+)"', sessions.text)
            assert session is not None
            runs = await client.get(f"{url}/ui/session", params={"id": session.group(1)})
            assert "USD" in runs.text  # the price table prices the demo's models
    finally:
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 60) == 0
