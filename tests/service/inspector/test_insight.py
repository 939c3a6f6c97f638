"""Where the time and tokens went, which run is which, the whole conversation, long runs.

Each view in real headless Chromium against ``agentledger serve`` over the
demo database (with a price table), plus a 10,000-record run. Screenshots
are kept as artifacts; ``AGENTLEDGER_DOCS_SCREENSHOT=1`` also writes the
README's waterfall and conversation pictures to ``docs/``.
"""

from __future__ import annotations

import os
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Page, expect

from agentledger.runtime.checkpoint import CHECKPOINT_VERSION, RunCheckpoint
from agentledger.runtime.planner import AwaitClarification
from agentledger.service import StoreClient
from agentledger.storage import RecordBuilder, RunStart
from agentledger.storage.payloads import TRANSCRIPT_APPENDED
from agentledger.storage.types import Checkpoint
from agentledger.transcript import Message, TextPart, encode_messages
from tests.service.inspector.conftest import LONG_TURNS, NEEDLE, Demo, log_in
from tests.service.process import ServiceProcess, Tokens

# One event loop for the whole run, shared with the one browser.
pytestmark = pytest.mark.asyncio(loop_scope="session")

DOCS = Path(__file__).parents[3] / "docs"


def _docs(shot: Path, name: str) -> None:
    if os.environ.get("AGENTLEDGER_DOCS_SCREENSHOT") == "1":
        (DOCS / name).write_bytes(shot.read_bytes())


async def _runs(page: Page, service: ServiceProcess, demo: Demo) -> dict[str, str]:
    """The demo session's runs by the user's message that started them."""
    await page.goto(f"{service.url}/ui/session?id={demo.session_id}")
    found: dict[str, str] = {}
    for line in await page.locator(".run-line").all():
        asked = await line.locator(".asked").inner_text()
        found[asked] = await line.locator("a.id").first.inner_text()
    return found


async def test_waterfall_shows_steps_durations_tokens_and_cost(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo, artifacts: Path
) -> None:
    """The run with a child: its planner turns, model calls, the child run, writes, a total."""
    await log_in(page, service.url, tokens.reader)
    runs = await _runs(page, service, demo)
    run_id = runs["Please research: when was the Eiffel Tower built?"]
    await page.goto(f"{service.url}/ui/run?id={run_id}")
    await page.get_by_role("link", name="Timeline").click()
    waterfall = page.get_by_role("table", name=f"waterfall of {run_id}")
    steps = waterfall.locator("tbody tr th .label")
    labels = await steps.all_inner_texts()
    assert labels[0] == "run · concierge"
    assert "turn 1 · planner (planning)" in labels
    assert "turn 2 · planner (synthesizing)" in labels
    assert labels.count("model call · demo-concierge") == 2
    assert "research · child run" in labels
    assert labels[-1].startswith("store writes (")
    # Each step says how long it took; the caption gives the run's total.
    took = await waterfall.locator("tbody td.num").all_inner_texts()
    assert all(re.fullmatch(r"\d+ ms|[\d.]+ s|", t) for t in took), took
    await expect(page.locator("#run-total")).to_have_text(re.compile(r"^\d+ ms$"))
    # The child run's bar links to the child's own timeline.
    child = waterfall.get_by_role("link", name=f"{run_id}.call_3")
    await expect(child).to_have_attribute("href", re.compile(r"/ui/run/timeline\?id="))
    # Tokens per turn and for the run, and the cost from the configured price table.
    usage = page.get_by_role("table", name="tokens per turn")
    await expect(usage.locator("tbody tr")).to_have_count(2)
    await expect(usage.locator("tfoot")).to_contain_text("135")
    # 64+71 input at 3.00/M and 8+48 output at 15.00/M: 0.000405 + 0.00084 USD.
    await expect(page.locator(".cost-line .cost")).to_have_text("0.001245 USD")
    await expect(page.locator("#run-tokens")).to_contain_text("135 in · 56 out")
    shot = artifacts / "8-timeline.png"
    await page.screenshot(path=shot, full_page=True)
    _docs(shot, "inspector-timeline.png")


async def test_run_rows_say_what_was_asked_and_session_totals(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo, artifacts: Path
) -> None:
    """Run rows: first user message, duration, turns, status; the session's tokens and cost."""
    await log_in(page, service.url, tokens.reader)
    runs = await _runs(page, service, demo)
    assert "What's the weather in Paris and Tokyo?" in runs
    assert "Find me flights from Paris to Tokyo." in runs
    first = page.locator(".run-line").first
    await expect(first.locator(".badge")).to_have_text("completed")
    await expect(first.locator(".turns")).to_have_text("2 turns")
    await expect(first.locator(".duration")).to_have_text(re.compile(r"^\d+ ms$"))
    await expect(page.locator("#session-tokens")).to_contain_text(re.compile(r"\d+ in · \d+ out"))
    await expect(page.locator("#session-tokens .cost")).to_have_text(re.compile(r"USD$"))
    await page.screenshot(path=artifacts / "9-run-rows.png", full_page=True)


async def test_session_reads_as_one_conversation(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo, artifacts: Path
) -> None:
    """Every turn once, in order; the agent call links its child; the wait says what for."""
    await log_in(page, service.url, tokens.reader)
    await page.goto(f"{service.url}/ui/session?id={demo.session_id}")
    await page.get_by_role("link", name="Conversation").click()
    conversation = page.locator("ol.conversation")
    dividers = conversation.locator("li.turn-divider .turn-no")
    await expect(dividers).to_have_text(["Turn 1", "Turn 2", "Turn 3", "Turn 3 (continued)",
                                         "Turn 4"])  # fmt: skip
    users = await conversation.locator("li.bubble.user").all_inner_texts()
    assert (
        sum("What's the weather in Paris and Tokyo?" in u for u in users) == 1
    )  # once, not re-seeded
    # The agent used as a tool links to its child run.
    research = page.get_by_role("region", name="tool call research")
    await expect(research.locator("a.child-link")).to_have_attribute(
        "href", re.compile(r"/ui/run/transcript\?id=run-.*\.call_3$")
    )
    # The suspended turn says what it waited for and which run continued it; the
    # continuation's result is shown beside the call.
    suspended = conversation.locator("li.turn-divider", has_text="suspended")
    await expect(suspended.locator(".waits")).to_contain_text("waits for approval")
    await expect(suspended.locator(".waits a")).to_have_count(1)
    booking = page.get_by_role("region", name="tool call book_table").locator("xpath=..")
    await expect(booking.locator(".result")).to_contain_text("confirmation AL-220")
    shot = artifacts / "10-conversation.png"
    await page.screenshot(path=shot, full_page=True)
    _docs(shot, "inspector-conversation.png")
    # The suspended run's own transcript: the pending call says what it waits for.
    await suspended.locator("a.id").first.click()
    pending = page.locator(".result.pending")
    await expect(pending).to_contain_text("waits for approval")
    await expect(pending).to_contain_text(re.compile(r"; run run-\w+ continued it\."))
    await expect(pending.get_by_role("link")).to_have_attribute("href", re.compile(r"transcript"))
    await expect(page.locator(".suspended-here")).to_contain_text(
        "The run suspended here: it waits for approval"
    )
    await page.screenshot(path=artifacts / "11-suspended-transcript.png", full_page=True)
    # Search within the session's conversation and its records.
    await page.goto(f"{service.url}/ui/session/conversation?id={demo.session_id}")
    await page.get_by_label("Find").fill("eiffel")
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("status").first).to_contain_text("hold “eiffel”")
    await page.get_by_role("link", name="Search").click()
    await page.get_by_label("Find in every run's records").fill("AL-220")
    await page.keyboard.press("Enter")
    hits = page.locator("ol.hits > li")
    await expect(hits.first.locator(".snippet")).to_contain_text("AL-220")
    await page.screenshot(path=artifacts / "12-session-search.png", full_page=True)


async def test_sessions_list_counts_runs_and_updates_live(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo, artifacts: Path
) -> None:
    """Run counts; a session started while the list is open appears, marked running."""
    await log_in(page, service.url, tokens.reader)
    row = page.locator(f'tr[data-session="{demo.session_id}"]')
    await expect(row.locator("td.runs")).to_have_text("6")
    await expect(page.locator("#live")).to_have_text("Live: following new records")
    now = datetime.now(UTC).replace(microsecond=0)
    async with StoreClient(service.url, token=tokens.host) as host:
        await host.create_session("list-live-1", created_at=now)
        run = RecordBuilder(RunStart(run_id="list-live-run", agent_id="scribe",
                                     session_id="list-live-1", started_at=now))  # fmt: skip
        await host.start_root_run(run.root_start())
    fresh = page.locator('tr[data-session="list-live-1"]')
    await expect(fresh.locator(".badge.running")).to_be_visible()
    await expect(fresh.locator("td.runs")).to_have_text("1")
    await page.screenshot(path=artifacts / "13-sessions-live.png", full_page=True)


async def test_ten_thousand_record_run_opens_paged_and_searchable(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo, artifacts: Path
) -> None:
    """Records and transcript open on their first page, with search, counts and the end."""
    await log_in(page, service.url, tokens.reader)
    started = time.perf_counter()
    await page.goto(f"{service.url}/ui/run?id={demo.long_run}")
    await expect(page.locator("ol.records > li").first).to_be_visible()
    records_first_screen = time.perf_counter() - started
    await expect(page.locator("ol.records > li")).to_have_count(200)
    counts = await page.locator("[data-counts] .count").all_inner_texts()
    assert sum(int(c) for c in counts) == 10_000
    # Payloads are folded (one line) until unfolded.
    first = page.locator("details.payload").first
    assert await first.get_attribute("open") is None
    await page.get_by_role("button", name="Unfold all").click()
    await expect(first).to_have_attribute("open", "")
    await page.screenshot(path=artifacts / "14-long-records.png")
    # Search within the run finds the one record holding the needle.
    await page.get_by_label("Find").fill(NEEDLE)
    await page.get_by_role("button", name="Filter").click()
    await expect(page.locator("ol.records > li")).to_have_count(2)  # its result and message
    await expect(page.locator("ol.records > li .type").first).to_have_text("tool_result_received")

    started = time.perf_counter()
    await page.goto(f"{service.url}/ui/run/transcript?id={demo.long_run}")
    await expect(page.locator("li.bubble").first).to_be_visible()
    transcript_first_screen = time.perf_counter() - started
    await expect(page.locator("li.bubble")).to_have_count(100)
    total = 1 + LONG_TURNS  # the user's message, then each turn's call beside its result
    await expect(page.get_by_role("navigation", name="Pages of messages").first).to_contain_text(
        f"Messages 1 to 100 of {total}"
    )
    await page.get_by_role("link", name="Jump to the end").first.click()
    await expect(page.locator("li.bubble").last).to_contain_text(f"page {LONG_TURNS} looked up")
    await page.get_by_label("Find").fill(NEEDLE)
    await page.keyboard.press("Enter")
    await expect(page.locator("li.bubble")).to_have_count(1)
    await expect(page.locator("li.bubble")).to_contain_text(NEEDLE)
    await page.screenshot(path=artifacts / "15-long-transcript.png")
    # The waterfall of 1,250 turns opens on its first page of steps.
    await page.goto(f"{service.url}/ui/run/timeline?id={demo.long_run}")
    await expect(page.locator("#run-total")).to_have_text("51.00 s")
    steps = 1 + 3 * LONG_TURNS  # the start, then each turn, its model call and its tool call
    pages = page.get_by_role("navigation", name="Pages of steps")
    await expect(pages).to_contain_text(f"Steps 1 to 150 of {steps}")
    await expect(page.locator("tr.step-turn")).to_have_count(50)
    await expect(page.locator("tr.step-write rect.tick")).to_have_count(300)  # spread over all
    usage = page.get_by_role("table", name="tokens per turn")
    await expect(usage.locator("tbody tr")).to_have_count(201)  # 200 turns, then how many more
    await expect(usage.locator("tfoot")).to_contain_text(str(100 * LONG_TURNS))
    await pages.get_by_role("link", name="Jump to the end").click()
    last = (steps - 1) // 150 * 150
    await expect(pages).to_contain_text(f"Steps {last + 1} to {steps} of {steps}")
    await expect(page.locator("tr.step-tool").last).to_contain_text("tool · lookup")
    (artifacts / "first-screen-times.txt").write_text(
        f"records {records_first_screen:.3f} s, transcript {transcript_first_screen:.3f} s\n"
    )


async def test_times_are_local_with_utc_on_hover(
    browser: object, service: ServiceProcess, tokens: Tokens, demo: Demo
) -> None:
    """A viewer in Tokyo sees Tokyo time; the UTC time is the hover title."""
    context = await browser.new_context(timezone_id="Asia/Tokyo")  # type: ignore[attr-defined]
    try:
        page = await context.new_page()
        await log_in(page, service.url, tokens.reader)
        created = page.locator(f'tr[data-session="{demo.acme_session}"] time').first
        # Created at 2020-06-01 12:00:00 UTC: 21:00 in Tokyo.
        await expect(created).to_have_text("2020-06-01 21:00:00.000")
        await expect(created).to_have_attribute("title", "2020-06-01T12:00:00.000Z (UTC)")
    finally:
        await context.close()


async def test_error_pages_keep_navigation_and_say_it_in_words(
    page: Page, service: ServiceProcess, tokens: Tokens, artifacts: Path
) -> None:
    """A missing run: the header and its forms stay, the title is words; a favicon is served."""
    await log_in(page, service.url, tokens.reader)
    answer = await page.goto(f"{service.url}/ui/run?id=no-such-run")
    assert answer is not None
    assert answer.status == 404
    await expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
    await expect(page.get_by_role("alert")).to_contain_text("no-such-run")
    assert "Error" not in await page.title()
    await expect(page.get_by_role("button", name="Log out")).to_be_visible()
    await expect(page.get_by_label("Open run")).to_be_visible()
    icon = await page.locator('link[rel="icon"]').get_attribute("href")
    assert icon is not None
    fetched = await page.request.get(f"{service.url}{icon}")
    assert fetched.status == 200
    assert fetched.headers["content-type"].startswith("image/svg+xml")
    await page.screenshot(path=artifacts / "16-error.png")


async def test_host_cancels_a_run_and_ends_a_session_reader_is_refused(
    page: Page, service: ServiceProcess, tokens: Tokens, artifacts: Path
) -> None:
    """Host: cancel recorded as [C1] (reason and intent record), session ended; reader: 403."""
    now = datetime.now(UTC).replace(microsecond=0)
    async with StoreClient(service.url, token=tokens.host) as host:
        await host.create_session("act-1", created_at=now)
        run = RecordBuilder(RunStart(run_id="act-run", agent_id="scribe", session_id="act-1",
                                     started_at=now))  # fmt: skip
        await host.start_root_run(run.root_start())
        # A reader sees no action, and a post with its cookie is refused, changing nothing.
        await log_in(page, service.url, tokens.reader)
        await page.goto(f"{service.url}/ui/run?id=act-run")
        await expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)
        refused = await page.request.post(f"{service.url}/ui/run/cancel",
                                           form={"id": "act-run", "reason": "nope"})  # fmt: skip
        assert refused.status == 403
        assert "may only look" in await refused.text()
        refused = await page.request.post(f"{service.url}/ui/session/end", form={"id": "act-1"})
        assert refused.status == 403
        assert (await host.load_run("act-run")).cancellation_reason == ""
        assert (await host.load_session("act-1")).status == "active"
        # A cross-site post with a host's token is refused too.
        async with httpx.AsyncClient() as client:
            forged = await client.post(
                f"{service.url}/ui/run/cancel",
                data={"id": "act-run"},
                headers={"Authorization": f"Bearer {tokens.host}", "Sec-Fetch-Site": "cross-site"},
            )
        assert forged.status_code == 403
        # The host cancels from the page, and ends the session.
        await page.context.clear_cookies()
        await log_in(page, service.url, tokens.host)
        await page.goto(f"{service.url}/ui/run?id=act-run")
        await page.get_by_label("Reason").fill("stopped from the inspector test")
        await page.get_by_role("button", name="Cancel run").click()
        await expect(page.locator("#run-cancel")).to_have_text("stopped from the inspector test")
        await expect(page.locator("dl.facts")).to_contain_text("Cancellation requested")
        await expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)
        await expect(page.locator("ol.records .type")).to_contain_text(
            ["run_started", "runtime.cancellation_intent"]
        )
        assert (await host.load_run("act-run")).cancellation_reason == (
            "stopped from the inspector test"
        )
        await page.screenshot(path=artifacts / "17-cancel-requested.png", full_page=True)
        await page.goto(f"{service.url}/ui/session?id=act-1")
        await page.get_by_role("button", name="End session").click()
        await expect(page.locator("#session-status")).to_have_text("ended")
        assert (await host.load_session("act-1")).status == "ended"
        await page.screenshot(path=artifacts / "18-session-ended.png", full_page=True)


async def test_new_views_fit_a_phone(
    browser: object, service: ServiceProcess, tokens: Tokens, demo: Demo, artifacts: Path
) -> None:
    """At 390 px wide no page scrolls sideways (wide tables scroll inside themselves)."""
    context = await browser.new_context(viewport={"width": 390, "height": 844})  # type: ignore[attr-defined]
    try:
        page = await context.new_page()
        await log_in(page, service.url, tokens.host)
        runs = await _runs(page, service, demo)
        run_id = runs["Please research: when was the Eiffel Tower built?"]
        for name, path in (
            ("sessions", "/ui"),
            ("runs", f"/ui/session?id={demo.session_id}"),
            ("conversation", f"/ui/session/conversation?id={demo.session_id}"),
            ("search", f"/ui/session/search?id={demo.session_id}&q=AL-220"),
            ("records", f"/ui/run?id={run_id}"),
            ("timeline", f"/ui/run/timeline?id={run_id}"),
            ("transcript", f"/ui/run/transcript?id={run_id}"),
        ):
            await page.goto(f"{service.url}{path}")
            wide = await page.evaluate("document.scrollingElement.scrollWidth")
            culprits = await page.evaluate(
                "Array.from(document.querySelectorAll('main *'))"
                ".filter(e => e.getBoundingClientRect().right > 391)"
                ".slice(0, 3).map(e => e.tagName + '.' + e.className)"
            )
            assert wide <= 390, (name, wide, culprits)
            await page.screenshot(path=artifacts / f"19-phone-{name}.png", full_page=True)
    finally:
        await context.close()


async def test_a_run_waiting_for_a_clarification_says_so_and_how_to_answer(
    page: Page, service: ServiceProcess, tokens: Tokens, artifacts: Path
) -> None:
    """No pending call to show: the header, the transcript's end and the conversation say it."""
    now = datetime.now(UTC).replace(microsecond=0)
    run = RecordBuilder(RunStart(run_id="ask-run", agent_id="concierge", session_id="ask-1",
                                 started_at=now))  # fmt: skip
    question = Message(role="assistant", parts=(TextPart(text="Which evening suits you?"),))
    checkpoint = RunCheckpoint(version=CHECKPOINT_VERSION, agent_id="concierge", turn=1,
                               awaiting=AwaitClarification(question="Which evening?"))  # fmt: skip
    async with StoreClient(service.url, token=tokens.host) as host:
        await host.create_session("ask-1", created_at=now)
        await host.start_root_run(run.root_start())
        await host.append_run_record(run.record(
            TRANSCRIPT_APPENDED, encode_messages([question]), event_key="turn:1:assistant:messages",
            at=now + timedelta(milliseconds=5)))  # fmt: skip
        await host.record_run_suspension(
            run.suspension(Checkpoint(id="ask-run:suspension", data=checkpoint.encode()),
                           at=now + timedelta(milliseconds=9), pending_count=0)
        )  # fmt: skip
    await log_in(page, service.url, tokens.reader)
    await page.goto(f"{service.url}/ui/run/transcript?id=ask-run")
    await expect(page.locator("#run-waits")).to_have_text("it waits for a clarification")
    await expect(page.locator(".suspended-here")).to_contain_text(
        "it waits for a clarification; no run has continued it yet"
    )
    how = page.locator("details.how-to-answer")
    await how.locator("summary").click()
    await expect(how.locator("pre")).to_contain_text(
        'agent_client("concierge").resume(\n    "ask-1", "ask-run", "<your answer>")'
    )
    await page.screenshot(path=artifacts / "20-waiting-for-clarification.png", full_page=True)
    await page.goto(f"{service.url}/ui/session/conversation?id=ask-1")
    await expect(page.locator("li.turn-divider .waits")).to_have_text("waits for a clarification")


async def test_a_turn_transcript_shows_where_each_message_is_stored(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo, artifacts: Path
) -> None:
    """The last turn's transcript holds the whole conversation, read through its history
    references: the page says which run each turn follows, continues or forks, and each
    earlier message links to the run that stores it."""
    await log_in(page, service.url, tokens.reader)
    runs = await _runs(page, service, demo)
    last = runs["Find me flights from Paris to Tokyo."]
    first = runs["What's the weather in Paris and Tokyo?"]
    await page.goto(f"{service.url}/ui/run/transcript?id={last}")
    history = page.get_by_role("list", name="where this transcript comes from")
    lines = await history.locator("li").all_inner_texts()
    assert len(lines) == 4, lines
    assert "follows the whole conversation of" in lines[0]
    assert any("continues the suspended run" in line for line in lines)
    first_message = page.locator("li.bubble").first
    await expect(first_message).to_contain_text("What's the weather in Paris and Tokyo?")
    await expect(first_message.locator("a.origin")).to_have_text(f"from {first}")
    own = page.locator("li.bubble", has_text="Find me flights from Paris to Tokyo.")
    await expect(own.locator("a.origin")).to_have_count(0)
    await page.screenshot(path=artifacts / "21-transcript-provenance.png", full_page=True)
