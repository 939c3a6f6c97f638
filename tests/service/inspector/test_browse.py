"""[DESIGN 11] Browsing the demo database in real headless Chromium through `agentledger serve`.

Sessions -> a session's run tree -> a child run -> its records -> its
transcript, then a transcript with every kind of part. Screenshots are saved
as artifacts; ``AGENTLEDGER_DOCS_SCREENSHOT=1`` also writes the picture of
``docs/inspector.md``, ``docs/inspector.png``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from tests.service.inspector.conftest import HOSTILE, Demo, log_in
from tests.service.process import ServiceProcess, Tokens

# One event loop for the whole run, shared with the one browser.
pytestmark = pytest.mark.asyncio(loop_scope="session")

DOCS_PNG = Path(__file__).parents[3] / "docs" / "inspector.png"


async def test_sessions_run_tree_child_records_transcript(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo, artifacts: Path
) -> None:
    """The demo's session, its run tree (child nested), the child's records and transcript."""
    await log_in(page, service.url, tokens.reader)
    sessions = page.get_by_role("table")
    await expect(sessions.get_by_role("link", name=demo.session_id)).to_be_visible()
    # Newest first: the demo's (created now) before the tests' (dated 2020).
    ids = await sessions.locator("tbody th a").all_inner_texts()
    ours = [demo.session_id, "globex-1", "acme-1", demo.long_session]
    assert [i for i in ids if i in ours] == ours  # other tests' sessions may be newer
    await page.screenshot(path=artifacts / "1-sessions.png", full_page=True)

    await sessions.get_by_role("link", name=demo.session_id).click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text(demo.session_id)
    tree = page.get_by_role("list", name=f"runs of {demo.session_id}")
    roots = tree.locator(":scope > li")
    assert await roots.count() == 5  # turns 1, 2, 3 + its continuation, 4
    child_list = page.get_by_role("list", name=re.compile(r"^child runs of "))
    await expect(child_list).to_have_count(1)
    child = child_list.locator("a.id").first
    child_id = await child.inner_text()
    await expect(page.locator("li.continuation")).to_have_count(1)
    await expect(page.locator("li.continuation .rel")).to_contain_text("continues")
    await page.screenshot(path=artifacts / "2-run-tree.png", full_page=True)

    await child.click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text(child_id)
    await expect(page.locator("dl.facts")).to_contain_text("research")
    records = page.locator("ol.records > li")
    types = await records.locator(".type").all_inner_texts()
    assert (types[0], types[-1]) == ("run_started", "run_completed")
    ids = [int(t.lstrip("#")) for t in await records.locator(".seq").all_inner_texts()]
    assert ids == list(range(1, len(ids) + 1))  # commit order, none missing
    # Full payloads: the last record's JSON is shown whole.
    await expect(records.last.locator(".payload")).to_contain_text('"status": "success"')
    await page.screenshot(path=artifacts / "3-child-records.png", full_page=True)

    # Filter by type with the keyboard-reachable checkboxes.
    await page.get_by_role("checkbox", name=re.compile(r"^run_completed")).check()
    await page.get_by_role("button", name="Filter").click()
    await expect(records).to_have_count(1)
    await expect(records.locator(".type")).to_have_text("run_completed")

    await page.get_by_role("link", name="Transcript").click()
    conversation = page.locator("ol.conversation")
    await expect(conversation.locator("li.bubble.user").first).to_contain_text("Eiffel Tower")
    await expect(conversation.locator("li.bubble.assistant").last).to_contain_text("18")
    await page.screenshot(path=artifacts / "4-child-transcript.png", full_page=True)


async def test_sessions_filter_by_status_and_labels_and_page(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo
) -> None:
    """[D6] Status and label filters, and paging newest first one session at a time."""
    await log_in(page, service.url, tokens.reader)
    ids = page.locator("table tbody th a")
    await page.get_by_label("Status").select_option("ended")
    await page.get_by_role("button", name="Filter").click()
    await expect(ids.filter(has_text=demo.globex_session)).to_have_count(1)
    assert demo.session_id not in await ids.all_inner_texts()
    await page.get_by_label("Status").select_option("")
    await page.get_by_label("Labels").fill("tenant=acme")
    await page.get_by_role("button", name="Filter").click()
    await expect(ids).to_have_text([demo.acme_session])
    await page.goto(f"{service.url}/ui?limit=1")
    seen = []
    for _ in range(30):
        seen += await ids.all_inner_texts()
        older = page.get_by_role("link", name="Older sessions →")
        if not await older.count():
            break
        await older.click()
    ours = [demo.session_id, demo.globex_session, demo.acme_session, demo.long_session]
    assert [i for i in seen if i in ours] == ours  # other tests' sessions may be newer


async def test_transcript_shows_every_kind(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo, artifacts: Path
) -> None:
    """Thinking collapsed, calls beside results, errors marked, images and documents by kind."""
    await log_in(page, service.url, tokens.reader)
    await page.goto(f"{service.url}/ui/run/transcript?id={demo.rich_run}")
    thinking = page.locator("details.thinking")
    await expect(thinking).to_have_count(1)
    assert await thinking.get_attribute("open") is None  # collapsed until asked
    await thinking.locator("summary").focus()
    await page.keyboard.press("Enter")
    await expect(thinking).to_contain_text("fetch the figures first")
    exchanges = page.locator(".exchange")
    await expect(exchanges).to_have_count(2)
    await expect(exchanges.nth(0).locator(".call")).to_contain_text('"x": 1.1')
    await expect(exchanges.nth(0).locator(".result")).to_contain_text('"revenue": 112')
    error = exchanges.nth(1).locator(".result")
    await expect(error).to_have_class(re.compile(r"\bis-error\b"))
    await expect(error).to_contain_text("forecast unavailable")
    # The results are shown beside their calls, not again as a message of their own.
    await expect(page.locator("li.bubble")).to_have_count(3)
    image = page.locator("figure.image img")
    await expect(image).to_have_attribute("src", re.compile(r"^data:image/png;base64,"))
    assert await image.evaluate("img => img.complete && img.naturalWidth") == 1
    await expect(page.locator("figure.document")).to_contain_text("report.txt")
    await page.screenshot(path=artifacts / "5-rich-transcript.png", full_page=True)


async def test_stored_text_is_escaped(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo
) -> None:
    """A label holding markup is shown as text, never parsed as HTML."""
    await log_in(page, service.url, tokens.reader)
    await page.goto(f"{service.url}/ui/session?id={demo.acme_session}")
    await expect(page.locator("dl.facts")).to_contain_text(HOSTILE)
    assert await page.locator("main img").count() == 0
    assert await page.title() != "1"


async def test_readme_screenshot(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo, artifacts: Path
) -> None:
    """The picture in docs/inspector.md: the demo's first turn (two tool calls at once)."""
    await log_in(page, service.url, tokens.reader)
    await page.goto(f"{service.url}/ui/session?id={demo.session_id}")
    first = page.locator("ul.tree > li a.tx").first
    await first.click()
    await expect(page.locator(".exchange")).to_have_count(2)
    await expect(page.locator("#live")).to_have_text("Live: following new records")
    target = artifacts / "inspector.png"
    await page.screenshot(path=target)
    if os.environ.get("AGENTLEDGER_DOCS_SCREENSHOT") == "1":
        DOCS_PNG.write_bytes(target.read_bytes())
    assert target.stat().st_size > 10_000
