"""A planner turn as the model saw it, in the browser: from the timeline's turn to the
request (system prompt, the messages after the history policy), the answer with its usage,
the changes since the previous request (a history policy's cut shown as cut), and the
request a provider's adapter encodes."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from playwright.async_api import Page, expect

from agentledger.runtime import Agent, LastTurns, ModelPlanner, QueueSink, Runtime, tool
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.runtime.support import now_ms
from tests.service.inspector.conftest import log_in
from tests.service.process import ServiceProcess, Tokens

pytestmark = pytest.mark.asyncio(loop_scope="session")


@tool
async def weather(city: str) -> str:
    """The weather."""
    return f"{city}: 21C"


async def _two_runs(db: Path) -> tuple[str, str]:
    store = await SQLiteStore.open(db)
    try:
        await store.create_session("cut", created_at=now_ms())
        model = ScriptedModel(
            [reply("first answer"), tool_calls(("c1", "weather", {"city": "Oslo"})), reply("Mild.")]
        )
        runtime = Runtime(store, stream=QueueSink())
        runtime.register_model("m", model)
        planner = ModelPlanner("m", system="Be brief.", model="model-x")
        runtime.register_agent(Agent("chat", planner, tools=[weather], history=LastTurns(1)))
        client = runtime.agent_client("chat")
        one = await client.run("cut", "question one")
        two = await client.run("cut", "Weather in Oslo?", after=one.run_id)
        return one.run_id, two.run_id
    finally:
        await store.close()


async def test_a_turn_shows_request_response_and_what_was_cut(
    page: Page, tmp_path: Path, artifacts: Path
) -> None:
    db = tmp_path / "turns.db"
    one, two = await _two_runs(db)
    tokens = Tokens(tmp_path / "tokens.json")
    elsewhere = tokens.scoped("reader", tenant="acme")  # sees only acme's sessions
    with ServiceProcess(str(db), tokens.path) as service:
        await log_in(page, service.url, tokens.reader)
        await page.goto(f"{service.url}/ui/run/timeline?id={two}")
        await page.get_by_role("link", name="turn 1", exact=True).click()
        await page.wait_for_url(f"**/ui/run/turn?id={two}&turn=1")
        await expect(page.locator("pre.system-prompt")).to_have_text("Be brief.")
        sent = page.locator("ol.request-messages > li")
        await expect(sent).to_have_count(1)
        await expect(sent.first).to_contain_text("Weather in Oslo?")
        await expect(page.locator("aside.window")).to_contain_text("last_turns:1")
        await expect(page.locator("aside.not-recorded")).to_contain_text("tool definitions")
        answer = page.locator("ol.response-message")
        await expect(answer.get_by_label("tool call weather")).to_contain_text('"Oslo"')
        await expect(page.locator("p.stop-reason")).to_contain_text("tool_use")
        await expect(page.locator("h3.diff-cut")).to_contain_text("Cut by last_turns:1")
        cut = page.locator("li.diff-cut")
        await expect(cut).to_have_count(1)
        await expect(cut).to_contain_text("question one")
        await expect(cut).to_contain_text(f"{one} record")
        await expect(page.locator("li.diff-added")).to_contain_text("Weather in Oslo?")
        await page.screenshot(path=artifacts / "40-model-turn-cut.png", full_page=True)

        await page.get_by_label("Provider", exact=True).select_option("anthropic")
        await page.get_by_role("button", name="Encode").click()
        body = page.locator("pre.provider-request")
        await expect(body).to_contain_text('"model": "model-x"')
        await expect(body).to_contain_text('"system"')
        await page.screenshot(path=artifacts / "41-model-turn-request.png", full_page=True)
        await (
            page.get_by_role("navigation", name="Planner turns")
            .get_by_role("link", name="2")
            .click()
        )
        await expect(page.locator("li.diff-added")).to_have_count(2)
        await expect(body).to_contain_text('"tool_use"')  # the provider chosen stays
        await expect(page.locator("p.stop-reason")).to_contain_text("end_turn")
        await page.screenshot(path=artifacts / "42-model-turn-answer.png", full_page=True)

        await page.goto(f"{service.url}/ui/run/turn?id={two}&turn=9")
        await expect(page.locator("main")).to_contain_text("its turns: 1, 2")

        async with httpx.AsyncClient() as client:  # a token scoped elsewhere sees nothing
            answer = await client.get(
                f"{service.url}/ui/run/turn?id={two}&turn=1",
                headers={"Authorization": f"Bearer {elsewhere}"},
            )
        assert answer.status_code == 404, answer.text  # out of scope: as if absent
        assert "Oslo" not in answer.text
