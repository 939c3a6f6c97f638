"""The inspector shows where a history policy cut the model input, and a compaction's
summary beside what it replaced, in a run's transcript and a session's conversation."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from agentledger.runtime import Agent, Compaction, ModelPlanner, QueueSink, Runtime
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing.scripted import ScriptedModel, reply
from tests.runtime.support import now_ms
from tests.service.inspector.conftest import log_in
from tests.service.process import ServiceProcess, Tokens

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _compacted(db: Path) -> str:
    """Five turns under a small compaction threshold; the last turn's run id."""
    store = await SQLiteStore.open(db)
    try:
        await store.create_session("compacted", created_at=now_ms())
        runtime = Runtime(store, stream=QueueSink())
        runtime.register_model(
            "m", ScriptedModel([reply(f"answer {i} " + "x" * 200) for i in range(5)])
        )
        summaries = [reply(f"Summary {i}: the user asked questions.") for i in range(5)]
        runtime.register_model("summariser", ScriptedModel(summaries))
        policy = Compaction("summariser", threshold_tokens=100, keep_tokens=40)
        runtime.register_agent(Agent("chat", ModelPlanner("m"), history=policy))
        client = runtime.agent_client("chat")
        previous = None
        for i in range(5):
            out = await client.run("compacted", f"question {i}", after=previous)
            previous = out.run_id
        assert previous is not None
        return previous
    finally:
        await store.close()


async def test_compaction_is_shown_beside_what_it_replaced(
    page: Page, tmp_path: Path, artifacts: Path
) -> None:
    db = tmp_path / "compacted.db"
    last = await _compacted(db)
    tokens = Tokens(tmp_path / "tokens.json")
    with ServiceProcess(str(db), tokens.path) as service:
        await log_in(page, service.url, tokens.reader)
        await page.goto(f"{service.url}/ui/run/transcript?id={last}")
        marks = page.locator("aside.window.compacted")
        await expect(marks.first).to_be_visible()
        assert await marks.count() >= 2
        text = await marks.last.inner_text()
        assert "from here the model was sent this summary instead of records" in text
        assert "with prompt agentledger.compaction version 1" in text
        await expect(marks.last.locator("blockquote.summary")).to_contain_text(
            "the user asked questions."
        )
        # the whole conversation is there, the summarised part included
        await expect(page.locator("li.bubble").first).to_contain_text("question 0")
        await page.screenshot(path=artifacts / "30-compaction-in-transcript.png", full_page=True)
        await page.goto(f"{service.url}/ui/session/conversation?id=compacted")
        await expect(page.locator("aside.window.compacted").first).to_be_visible()
        await page.screenshot(path=artifacts / "31-compaction-in-conversation.png", full_page=True)
