"""The smaller points of the workbench, each in real headless Chromium over the demo
database: the session list's preview, agent and last activity; a child run unfolded in
place in its parent's waterfall; an interrupted tool call; readable search results; a
message's provenance as stored; a record's turn shown once; what "start" decided; a
two-line header on a phone; a forked conversation, one path at a time."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from msgspec.structs import replace
from playwright.async_api import Browser, Page, expect

from agentledger.service import StoreClient
from agentledger.storage import RecordBuilder, RunStart, RunStatus
from agentledger.storage.payloads import TRANSCRIPT_APPENDED, Failure
from agentledger.transcript import Message, TextPart, encode_messages
from tests.service.inspector.conftest import Demo, log_in
from tests.service.process import ServiceProcess, Tokens
from tests.views.test_conversation import forked_session

# One event loop for the whole run, shared with the one browser.
pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _runs(page: Page, service: ServiceProcess, demo: Demo) -> dict[str, str]:
    """The demo session's runs by the user's message that started them."""
    await page.goto(f"{service.url}/ui/session?id={demo.session_id}")
    found: dict[str, str] = {}
    for line in await page.locator(".run-line").all():
        asked = await line.locator(".asked").inner_text()
        found[asked] = await line.locator("a.id").first.inner_text()
    return found


async def test_the_session_list_says_what_each_session_is_about(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo, artifacts: Path
) -> None:
    await log_in(page, service.url, tokens.reader)
    row = page.locator(f'tr[data-session="{demo.session_id}"]')
    await expect(row.locator("td.first-message")).to_have_text(
        "What's the weather in Paris and Tokyo?"
    )
    await expect(row.locator("td.agent")).to_have_text("concierge")
    await expect(row.locator("td.last-activity time")).to_have_count(1)
    await expect(page.get_by_role("columnheader", name="Last activity")).to_have_count(1)
    await page.screenshot(path=artifacts / "43-session-list.png", full_page=True)


async def test_a_child_run_unfolds_in_its_parents_waterfall(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo, artifacts: Path
) -> None:
    await log_in(page, service.url, tokens.reader)
    runs = await _runs(page, service, demo)
    run_id = runs["Please research: when was the Eiffel Tower built?"]
    await page.goto(f"{service.url}/ui/run/timeline?id={run_id}")
    inner = page.locator(f'tr[data-child-of="{run_id}.call_3"]')
    await expect(inner.first).to_be_hidden()
    await page.get_by_role("button", name="show its steps").click()
    await expect(inner.first).to_be_visible()
    await expect(inner.locator(".label")).to_contain_text(["model call · demo-research"])
    await page.screenshot(path=artifacts / "44-child-unfolded.png", full_page=True)
    await page.get_by_role("button", name="hide its steps").click()
    await expect(inner.first).to_be_hidden()


async def test_an_interrupted_tool_says_so_with_its_bar(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo
) -> None:
    await log_in(page, service.url, tokens.reader)
    runs = await _runs(page, service, demo)
    await page.goto(
        f"{service.url}/ui/run/timeline?id={runs['Find me flights from Paris to Tokyo.']}"
    )
    row = page.locator("tr.step-tool", has_text="interrupted")
    await expect(row.locator(".label")).to_have_text("tool · search_flights · interrupted")
    await expect(row.locator("td.num")).not_to_have_text("0 ms")


async def test_search_results_read_as_words_with_the_match_marked(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo
) -> None:
    await log_in(page, service.url, tokens.reader)
    await page.goto(f"{service.url}/ui/session/search?id={demo.session_id}&q=Jules")
    hit = page.locator("li.hit").first
    await expect(hit.locator(".snippet mark").first).to_have_text("Jules")
    snippet = await hit.locator(".snippet").inner_text()
    assert '{"' not in snippet, snippet
    assert '":' not in snippet, snippet


async def test_provenance_turns_and_start_read_as_stored(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo
) -> None:
    await log_in(page, service.url, tokens.reader)
    runs = await _runs(page, service, demo)
    later = runs["Please research: when was the Eiffel Tower built?"]
    await page.goto(f"{service.url}/ui/run/transcript?id={later}")
    origin = page.locator("a.origin").first
    await expect(origin).to_have_text(re.compile(r"^from run-"))  # not "From Run-…"
    await page.goto(f"{service.url}/ui/run?id={later}")
    turns = await page.locator(".record .turn").all_inner_texts()
    assert len(turns) == 1, turns  # the run's turn id, once: its records all share it
    await expect(page.locator("#run-start-outcome")).to_have_text(
        "went on to the planner (its session was open)"
    )


async def test_the_header_takes_two_short_lines_on_a_phone(
    browser: Browser, service: ServiceProcess, tokens: Tokens, demo: Demo, artifacts: Path
) -> None:
    context = await browser.new_context(viewport={"width": 390, "height": 844})
    try:
        page = await context.new_page()
        await log_in(page, service.url, tokens.host)
        await page.goto(f"{service.url}/ui/session/conversation?id={demo.session_id}")
        box = await page.locator("header.top").bounding_box()
        assert box is not None
        assert box["height"] <= 80, box
        await expect(page.get_by_role("button", name="Open")).to_be_visible()
        await page.screenshot(path=artifacts / "45-phone-header.png")
    finally:
        await context.close()


async def test_a_forked_conversation_one_branch_at_a_time(
    page: Page, service: ServiceProcess, tokens: Tokens, artifacts: Path
) -> None:
    async with StoreClient(service.url, token=tokens.host) as host:
        await forked_session(host, "switch", prefix="s-")
    await log_in(page, service.url, tokens.reader)
    await page.goto(f"{service.url}/ui/session/conversation?id=switch")
    switcher = page.get_by_role("navigation", name="Branches of this conversation")
    await expect(switcher.locator("[aria-current=page]")).to_have_text("Main conversation")
    texts = page.locator("li.bubble .text")
    await expect(texts).to_have_text(["hello", "re: hello", "again", "re: again", "last",
                                      "re: last"])  # fmt: skip
    await expect(page.locator("li.branch-leaves")).to_contain_text("Branch of turn 2")
    await page.screenshot(path=artifacts / "46-branch-main.png", full_page=True)
    await switcher.get_by_role("link", name="Branch of turn 2, from message 3").click()
    await expect(switcher.locator("[aria-current=page]")).to_have_text(
        "Branch of turn 2, from message 3"
    )
    await expect(texts).to_have_text(["hello", "re: hello", "again", "instead", "re: instead"])
    shot = artifacts / "47-branch-fork.png"
    await page.screenshot(path=shot, full_page=True)
    if os.environ.get("AGENTLEDGER_DOCS_SCREENSHOT") == "1":
        (Path(__file__).parents[3] / "docs" / "inspector-branches.png").write_bytes(
            shot.read_bytes()
        )
    await page.goto(f"{service.url}/ui/session?id=switch")
    await expect(page.locator('[data-run="s-fork"] .rel.fork')).to_contain_text(
        "branch of s-two at message 3"
    )


async def test_why_a_run_failed_is_said_in_every_view(
    page: Page, service: ServiceProcess, tokens: Tokens, artifacts: Path
) -> None:
    at = datetime.now(UTC).replace(microsecond=0)
    why = Failure(kind="ModelError", message="the provider refused the request: quota exceeded")
    async with StoreClient(service.url, token=tokens.host) as host:
        await host.create_session("failing", created_at=at)
        run = RecordBuilder(
            RunStart(run_id="failed-run", agent_id="a", session_id="failing", started_at=at)
        )
        said = encode_messages([Message(role="user", parts=(TextPart(text="Plan my trip"),))])
        records = (run.record(TRANSCRIPT_APPENDED, said, event_key="input:messages", at=at),)
        await host.start_root_run(replace(run.root_start(), records=records))
        await host.record_run_terminal(run.terminal(RunStatus.FAILED, at=at, failure=why))
    said = "ModelError: the provider refused the request: quota exceeded"
    await log_in(page, service.url, tokens.reader)
    await page.goto(f"{service.url}/ui/run?id=failed-run")
    await expect(page.locator("#run-failure")).to_have_text(said)
    await page.goto(f"{service.url}/ui/session?id=failing")
    await expect(page.locator('[data-run="failed-run"] .reason.failure')).to_have_text(said)
    await page.goto(f"{service.url}/ui/session/conversation?id=failing")
    await expect(page.locator(".turn-divider .reason.failure")).to_have_text(said)
    await page.goto(f"{service.url}/ui/run/timeline?id=failed-run")
    await expect(page.locator("#waterfall-failure")).to_have_text(f"failed: {said}")
    await page.screenshot(path=artifacts / "48-failure-waterfall.png", full_page=True)
