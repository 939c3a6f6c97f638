"""[G1] [G3] Searching messages across sessions, and usage from the counters, in headless
Chromium through `agentledger serve`.

The header's box searches every message the token may see (``Store.search``): each hit
names its session, run, role and time, shows the match marked, and opens the message in
its run's transcript; pages follow the cursor; a token scoped to labels finds only its
sessions. The session page and the list of sessions show the usage counters.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from agentledger.service.auth import Principal
from agentledger.service.inspector.finder import marked
from agentledger.service.inspector.render import render
from agentledger.service.wire import Role
from agentledger.storage.search import SearchHit, SearchPage
from tests.service.inspector.conftest import LONG_TURNS, Demo, log_in
from tests.service.process import ServiceProcess, Tokens

# One event loop for the whole run, shared with the one browser.
pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_snippet_marks_only_matches_and_escapes_the_rest() -> None:
    got = marked("<b>the **refund** of **1182**</b> and **bold** a*b", "refund 1182")
    assert str(got) == (
        "&lt;b&gt;the <mark>refund</mark> of <mark>1182</mark>&lt;/b&gt; and **bold** a*b"
    )


async def test_sealed_sessions_left_out_are_said() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    hit = SearchHit(session_id="s<1>", run_id="r", record_id="2", message_index=0,
                    role="user", timestamp=at, snippet="a **refund**")  # fmt: skip
    page = SearchPage(hits=[hit], next_cursor="", left_out=2)
    reader = Principal(sha256="0" * 64, role=Role.READER)
    body = render("find.html", principal=reader, q="refund", labels="", cursor="", found=page,
                  clash=[], named={}, as_labels="", words=True, mark=marked)  # fmt: skip
    assert "2 sealed sessions were left out" in body
    assert "a <mark>refund</mark>" in body
    assert "s&lt;1&gt;" in body
    assert 'method="post"' not in body.replace('action="/ui/logout" method="post"', "")


async def test_search_finds_marks_opens_and_pages(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo, artifacts: Path
) -> None:
    """A reader searches from the header, opens a hit at its message, and pages back."""
    await log_in(page, service.url, tokens.reader)
    await page.get_by_label("Search messages").fill("needle 977")
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("heading", level=1)).to_have_text("Search")
    hits = page.locator("ol.search-hits > li")
    await expect(hits).to_have_count(1)
    hit = hits.first
    await expect(hit.locator(".snippet mark")).to_have_text(["needle", "977"])
    await expect(hit).to_contain_text(demo.long_run)
    await expect(hit).to_contain_text(demo.long_session)
    await expect(hit.locator(".role-name")).to_have_text("user")
    # A reader sees no action: the only form that posts is logging out.
    await expect(page.locator("form[method=post]")).to_have_count(1)
    await page.screenshot(path=artifacts / "30-search.png", full_page=True)

    await hit.get_by_role("link", name="open the message").click()
    await expect(page).to_have_url(re.compile(r"/ui/run/transcript\?.*record=.*#found$"))
    found = page.locator("li.bubble#found")
    await expect(found).to_contain_text("the-needle-in-turn-977")
    await expect(found).to_be_in_viewport()
    await page.screenshot(path=artifacts / "31-search-opened.png")

    # A common word: pages of 20, newest first, the next one by its cursor.
    await page.goto(f"{service.url}/ui/search?q=looked+up")
    await expect(hits).to_have_count(20)
    first = await hits.locator(".snippet").all_inner_texts()
    assert first[0] == f"page {LONG_TURNS} looked up"
    await page.get_by_role("link", name="Older messages →").click()
    await expect(hits).to_have_count(20)
    second = await hits.locator(".snippet").all_inner_texts()
    assert second[0] == f"page {LONG_TURNS - 20} looked up"
    assert not set(first) & set(second)
    await expect(page.get_by_role("link", name="Newest")).to_be_visible()


async def test_search_keeps_ids_and_labels(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo
) -> None:
    """An id opens its session or run, k=v lists the sessions labelled so, as before."""
    await log_in(page, service.url, tokens.reader)
    await page.goto(f"{service.url}/ui/search?q={demo.rich_run}")
    await (
        page.get_by_role("list", name="Ids and labels")
        .get_by_role("link", name=demo.rich_run)
        .click()
    )
    await expect(page.get_by_role("heading", level=1)).to_contain_text(demo.rich_run)
    await page.goto(f"{service.url}/ui/search?q=tenant%3Dglobex")
    await page.get_by_role("link", name="Sessions labelled tenant=globex").click()
    ids = await page.get_by_role("table").locator("tbody th a").all_inner_texts()
    assert ids == ["globex-1"]
    # A cursor that is not this search's is refused in words.
    answer = await page.goto(f"{service.url}/ui/search?q=needle&cursor=not-a-cursor")
    assert answer is not None
    assert answer.status == 422
    await expect(page.get_by_role("heading", level=1)).to_have_text("That request is not valid")


async def test_scoped_token_finds_only_its_sessions(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo
) -> None:
    """The acme reader finds acme's words, never another session's; ids outside are unknown."""
    await log_in(page, service.url, tokens.acme)  # type: ignore[attr-defined]
    hits = page.locator("ol.search-hits > li")
    await page.goto(f"{service.url}/ui/search?q=revenue")
    await expect(hits.first).to_contain_text(demo.rich_run)
    held = await hits.evaluate_all("(hits) => hits.map((h) => h.dataset.session)")
    assert set(held) == {demo.acme_session}
    await page.goto(f"{service.url}/ui/search?q=needle+977")
    await expect(page.locator("p.empty")).to_contain_text("No message")
    await expect(hits).to_have_count(0)
    await page.goto(f"{service.url}/ui/search?q={demo.long_session}")
    await expect(page.get_by_role("list", name="Ids and labels")).to_have_count(0)
    await page.goto(f"{service.url}/ui/search?q=needle&labels=tenant%3Dglobex")
    await expect(page.locator("p.note[role=status]")).to_contain_text("matches none of them")
    await expect(hits).to_have_count(0)


async def test_usage_from_the_counters(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo, artifacts: Path
) -> None:
    """The session page and the list show what the counters hold."""
    await log_in(page, service.url, tokens.reader)
    await page.goto(f"{service.url}/ui/session?id={demo.long_session}")
    facts = page.locator("#session-usage")
    await expect(facts.locator(".runs")).to_have_text("1")
    await expect(facts.locator(".records")).to_have_text("10,000")
    await expect(facts.locator(".tokens")).to_have_text(
        f"{100 * LONG_TURNS:,} in (0 cached) · {10 * LONG_TURNS:,} out"
    )
    await expect(facts.locator(".bytes")).to_have_text(re.compile(r"KiB|MiB"))
    await page.screenshot(path=artifacts / "32-session-usage.png", full_page=True)
    await page.goto(f"{service.url}/ui?limit=200")
    row = page.locator(f'tr[data-session="{demo.long_session}"]')
    await expect(row.locator("td.tokens")).to_have_text(f"{110 * LONG_TURNS:,}")
    await expect(row.locator("td.bytes")).to_have_text(re.compile(r"KiB|MiB"))
    await expect(row.locator("td.runs")).to_have_text("1")
    empty = page.locator('tr[data-session="globex-1"]')
    await expect(empty.locator("td.runs")).to_have_text("0")
    await expect(empty.locator("td.bytes")).to_have_text("0 bytes")
    await page.screenshot(path=artifacts / "33-sessions-usage.png", full_page=True)
