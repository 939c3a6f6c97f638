"""A run paused by a crash loop (a planner turn or tool call kept killing its worker) says so
on its page, in the session's views and in ``agentledger runs``, from the same checkpoint;
without a host runtime the page shows the host call that runs it again or ends it.

Answering one with a host runtime (the two buttons) is in test_actions.py.
"""

from __future__ import annotations

import asyncio
import html
import json
import subprocess
import sys
from datetime import UTC, datetime

import httpx
import pytest

from agentledger.runtime.planner import ToolCall
from agentledger.service import StoreClient
from tests.service.inspector.conftest import Demo
from tests.service.inspector.looping import seed_crash_loop
from tests.service.process import ServiceProcess, Tokens

pytestmark = pytest.mark.asyncio(loop_scope="session")

FETCH = ToolCall(id="crawl-1", name="crawl", input={"url": "https://example.com"})


async def test_a_paused_run_names_what_kept_dying_and_how_to_answer_it(
    service: ServiceProcess, tokens: Tokens, demo: Demo
) -> None:
    """The run page says which activity kept dying and how often it started, names the call,
    and (no host runtime) shows ``resume`` with ``Answer()`` or ``Answer(approved=False)``;
    the session's views say it too, as the CLI does, from the same checkpoint."""
    url = service.url
    now = datetime.now(UTC).replace(microsecond=0)
    async with StoreClient(url, token=tokens.host) as host:
        await host.create_session("loop-plain", created_at=now)
        await seed_crash_loop(host, session_id="loop-plain", run_id="loop-plain-run",
                              agent_id="crawler", said="Crawl it.", at=now, call=FETCH)  # fmt: skip
    bearer = {"Authorization": f"Bearer {tokens.host}"}
    async with httpx.AsyncClient(headers=bearer) as client:
        shown = await client.get(f"{url}/ui/run", params={"id": "loop-plain-run"})
        assert shown.status_code == 200
        page = html.unescape(shown.text)
        waits = "it is paused: agentledger.tool_call started 3 times without finishing"
        assert waits in page
        assert 'id="run-crash-loop"' in page
        assert "A tool call (<code>agentledger.tool_call</code>) was started 3 times" in page
        assert '<span class="id">crawl-1</span>' in page
        assert "each of these calls given an error result" in page
        assert 'resume(\n    "loop-plain", "loop-plain-run", Answer())' in page
        assert "Answer(approved=False) ends the run" in page
        assert "waits for outside input" not in page
        assert 'id="no-host-runtime"' in page
        assert 'value="rerun"' not in page  # no host runtime: no buttons
        conversation = await client.get(f"{url}/ui/session/conversation",
                                         params={"id": "loop-plain"})  # fmt: skip
        assert "is paused: agentledger.tool_call started 3 times" in conversation.text
    listed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agentledger", "--db", str(demo.db), "runs", "loop-plain"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert "suspended (crash_loop: agentledger.tool_call started 3 times)" in listed.stdout
    as_json = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agentledger", "--db", str(demo.db), "--json", "runs",
         "loop-plain"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    (row,) = json.loads(as_json.stdout)["runs"]
    assert row["crash_loop"] == {"activity": "agentledger.tool_call", "attempts": 3}
