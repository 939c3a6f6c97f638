"""The run page's Prompts panel in headless Chromium: every prompt version that influenced a
run (its own, the earlier turns', its children's), and a damaged one reported in place."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from agentledger.runtime import records as rt
from agentledger.service import StoreClient
from agentledger.storage import RecordBuilder, RunStart
from tests.service.inspector.conftest import Demo, log_in
from tests.service.process import ServiceProcess, Tokens

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _rows(page: Page) -> list[list[str]]:
    table = page.get_by_role("table", name="Prompts")
    rows = table.locator("tbody tr")
    return [
        [c.strip() for c in await row.locator("td").all_inner_texts()] for row in await rows.all()
    ]


async def test_prompts_panel_lists_own_history_and_child(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo, artifacts: Path
) -> None:
    async with StoreClient(service.url, token=tokens.reader) as reader:
        metas = await reader.list_runs_by_session(demo.session_id)
    roots = [m.run_id for m in metas if not m.parent_run_id]
    (child,) = [m.run_id for m in metas if m.parent_run_id]
    last = roots[-1]
    await log_in(page, service.url, tokens.reader)
    await page.goto(f"{service.url}/ui/run?id={last}")
    assert await _rows(page) == [
        ["concierge.system", "3", "own", last, "#2", ""],
        *(["concierge.system", "3", "history", r, "#2", ""] for r in reversed(roots[:-1])),
        ["research.system", "2", "child", child, "#2", ""],
    ]
    await page.screenshot(path=artifacts / "prompts-panel.png", full_page=True)
    # Each other run is a link to its own page, whose panel starts from it.
    await page.get_by_role("table", name="Prompts").get_by_role("link", name=child).click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text(child)
    assert await _rows(page) == [["research.system", "2", "own", child, "#2", ""]]


async def test_a_damaged_prompt_record_is_reported_in_the_panel(
    page: Page, service: ServiceProcess, tokens: Tokens
) -> None:
    """The panel names the damaged record; the rest of the run page still shows."""
    now = datetime.now(UTC).replace(microsecond=0)
    async with StoreClient(service.url, token=tokens.host) as host:
        await host.create_session("prompts-1", created_at=now)
        run = RecordBuilder(
            RunStart(
                run_id="prompts-bad", agent_id="scribe", session_id="prompts-1", started_at=now
            )
        )
        await host.start_root_run(run.root_start())
        bad = run.record(rt.PROMPT_RENDERED, b'{"prompt_id":"p"}', event_key="prompt:p", at=now)
        await host.append_run_record(bad)
    await log_in(page, service.url, tokens.reader)
    await page.goto(f"{service.url}/ui/run?id=prompts-bad")
    alert = page.locator("section.prompts").get_by_role("alert")
    await expect(alert).to_contain_text("could not be read")
    await expect(alert).to_contain_text("prompts-bad")
    await expect(page.locator("ol.records .type")).to_contain_text(
        ["run_started", "prompt_rendered"]
    )
