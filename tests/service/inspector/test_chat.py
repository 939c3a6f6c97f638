"""The inspector as a workbench on the demo database: the host runtime ``agentledger demo
--serve`` uses (the demo's agents, the offline demo model) with a price table. From the
browser alone: send a session its next message and watch the reply arrive, start a new
session with an agent picked, approve a booking and land on the reply, switch between a
forked conversation's branches, and read why a run failed. A reader sees no action.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Page, expect

from agentledger.service import StoreClient
from agentledger.storage.sqlite import SQLiteStore
from tests.conditions import HANG_GUARD
from tests.service.inspector.conftest import PRICES, _run_demo, log_in
from tests.service.process import ServiceProcess, Tokens

# One event loop for the whole run, shared with the one browser.
pytestmark = pytest.mark.asyncio(loop_scope="session")

DOCS = Path(__file__).parents[3] / "docs"


def _docs(shot: Path, name: str) -> None:
    """With ``AGENTLEDGER_DOCS_SCREENSHOT=1``, the picture docs/inspector.md shows too."""
    if os.environ.get("AGENTLEDGER_DOCS_SCREENSHOT") == "1":
        (DOCS / name).write_bytes(shot.read_bytes())


async def _session_of(db: Path) -> str:
    store = await SQLiteStore.open(str(db))
    try:
        return (await store.list_sessions()).sessions[0].id
    finally:
        await store.close()


@pytest.fixture(scope="module")
def bench(
    tokens: Tokens, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServiceProcess, str]]:
    """A fresh demo database served with the demo's host runtime and a price table."""
    folder = tmp_path_factory.mktemp("bench")
    db = folder / "agentledger.db"
    _run_demo(db)
    prices = folder / "prices.toml"
    prices.write_text(PRICES, encoding="utf-8")
    options = ("--host-runtime", "agentledger.demo:host_runtime")
    env = {"AGENTLEDGER_PRICES": str(prices)}
    with ServiceProcess(str(db), tokens.path, env=env, options=options) as process:
        yield process, asyncio.run(_session_of(db))


async def test_a_host_sends_a_message_and_the_reply_arrives(
    page: Page, bench: tuple[ServiceProcess, str], tokens: Tokens, artifacts: Path
) -> None:
    service, session = bench
    await log_in(page, service.url, tokens.host)
    await page.goto(f"{service.url}/ui/session/conversation?id={session}")
    box = page.get_by_role("form", name="Send a message")
    await box.get_by_label("Message").fill("What's the weather in Lisbon?")
    await box.get_by_role("button", name="Send").click()
    await page.wait_for_url(re.compile(r"/ui/session/conversation\?.*#latest"))
    # the reply is recorded by the host runtime and the page, following the log, shows it
    await expect(page.locator("li.bubble").last).to_contain_text("Lisbon: 22°C, clear.")
    labels = page.locator(".turn-divider .turn-no")
    await expect(labels.last).to_have_text("Turn 5")
    # its history is the conversation so far, by reference: the demo model numbers its tool
    # calls after the five it was sent
    await expect(page.locator("li.bubble").last.locator("..")).to_contain_text("call_6")
    await page.screenshot(path=artifacts / "40-chat-reply.png", full_page=True)
    await page.evaluate("window.scrollTo(0, document.scrollingElement.scrollHeight)")
    shot = artifacts / "40-chat-reply-end.png"
    await page.screenshot(path=shot)  # the reply above the message box, as a person sees it
    _docs(shot, "inspector-chat.png")


async def test_fork_then_talk_on_the_branch(
    page: Page, bench: tuple[ServiceProcess, str], tokens: Tokens, artifacts: Path
) -> None:
    """Fork the demo's first turn after its answer, then send a message on the branch: it
    follows the branch, not the main conversation."""
    service, session = bench
    await log_in(page, service.url, tokens.host)
    async with StoreClient(service.url, token=tokens.host) as client:
        runs = await client.list_runs_by_session(session)
    first = min((r for r in runs if not r.parent_run_id), key=lambda r: r.started_at)
    await page.goto(f"{service.url}/ui/run/transcript?id={first.run_id}")
    answer = page.locator("li.bubble").last
    await answer.locator("details.fork summary").click()
    await answer.get_by_label("New message").fill("What's the weather in Rome?")
    await answer.get_by_role("button", name="Start fork").click()
    await page.wait_for_url(lambda u: "/ui/run/transcript?id=run-" in u and first.run_id not in u)
    await expect(page.locator("li.bubble").last).to_contain_text("Rome: 20°C, mild.")
    await page.goto(f"{service.url}/ui/session/conversation?id={session}")
    switcher = page.get_by_role("navigation", name="Branches of this conversation")
    await switcher.get_by_role("link", name=re.compile("^Branch of turn 1")).click()
    await expect(page.locator("li.bubble").last).to_contain_text("Rome: 20°C, mild.")
    box = page.get_by_role("form", name="Send a message")
    await box.get_by_label("Message").fill("And the weather in Sydney?")
    await box.get_by_role("button", name="Send").click()
    await page.wait_for_url(re.compile(r"/ui/session/conversation\?.*#latest"))
    # the page it lands on is the main conversation; the branch holds the new turn
    await switcher.get_by_role("link", name=re.compile("^Branch of turn 1")).click()
    await expect(page.locator("li.bubble").last).to_contain_text("Sydney: 20°C, mild.")
    await expect(page.locator(".turn-divider .turn-no").last).to_have_text("Turn 3")
    await page.screenshot(path=artifacts / "49-chat-on-a-branch.png", full_page=True)


async def test_a_host_starts_a_new_session_with_an_agent(
    page: Page, bench: tuple[ServiceProcess, str], tokens: Tokens, artifacts: Path
) -> None:
    service, _ = bench
    await log_in(page, service.url, tokens.host)
    await page.get_by_text("New session").click()
    start = page.get_by_role("form", name="Start a new session")
    await expect(start.get_by_label("Agent").locator("option")).to_have_text(
        ["concierge", "research"]
    )
    await start.get_by_label("Agent").select_option("concierge")
    await start.get_by_label("First message").fill("Hello there")
    await page.screenshot(path=artifacts / "41-new-session.png", full_page=True)
    await start.get_by_role("button", name="Start").click()
    await page.wait_for_url(re.compile(r"/ui/session/conversation\?id=chat-"))
    await expect(page.locator("li.bubble").last).to_contain_text("You said: “Hello there”")


async def test_approving_a_booking_lands_on_the_reply(
    page: Page, bench: tuple[ServiceProcess, str], tokens: Tokens, artifacts: Path
) -> None:
    service, session = bench
    await log_in(page, service.url, tokens.host)
    await page.goto(f"{service.url}/ui/session/conversation?id={session}")
    box = page.get_by_role("form", name="Send a message")
    await box.get_by_label("Message").fill("Book a table for 3 at Chez Nous at 19:30.")
    await box.get_by_role("button", name="Send").click()
    await expect(page.locator(".turn-divider .waits").last).to_contain_text("approval")
    # the page may show what the turn waits for as its records commit, a moment before the
    # turn's suspension itself commits: wait for the suspended run, never for a time
    async with StoreClient(service.url, token=tokens.host) as client:
        deadline = asyncio.get_running_loop().time() + HANG_GUARD
        while True:
            runs = await client.list_runs_by_session(session)
            found = [r for r in runs if r.status == "suspended" and not r.successor_run_id]
            if found or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.01)
    (waiting,) = found
    await page.goto(f"{service.url}/ui/run?id={waiting.run_id}")
    await page.get_by_role("button", name="Approve").click()
    await page.wait_for_url(re.compile(r"/ui/run/transcript\?id=run-.*#latest"))
    await expect(page.locator("li.bubble").last).to_contain_text("Done: table for 3 at Chez Nous")
    await page.screenshot(path=artifacts / "42-approved-reply.png", full_page=True)


async def test_a_reader_sees_no_message_box_nor_new_session(
    page: Page, bench: tuple[ServiceProcess, str], tokens: Tokens
) -> None:
    service, session = bench
    await log_in(page, service.url, tokens.reader)
    await expect(page.get_by_text("New session")).to_have_count(0)
    await page.goto(f"{service.url}/ui/session/conversation?id={session}")
    await expect(page.locator("li.bubble").first).to_be_visible()
    await expect(page.get_by_role("form", name="Send a message")).to_have_count(0)
    # a form posted anyway is refused and starts nothing
    async with StoreClient(service.url, token=tokens.host) as client:
        before = len(await client.list_runs_by_session(session))
    bearer = {"Authorization": f"Bearer {tokens.reader}", "Origin": service.url}
    async with httpx.AsyncClient(headers=bearer) as client:
        sent = await client.post(f"{service.url}/ui/session/send",
                                 data={"id": session, "text": "hello"})  # fmt: skip
        started = await client.post(f"{service.url}/ui/session/new",
                                    data={"agent": "concierge", "text": "hello"})  # fmt: skip
    assert (sent.status_code, started.status_code) == (403, 403)
    async with StoreClient(service.url, token=tokens.host) as client:
        assert len(await client.list_runs_by_session(session)) == before
