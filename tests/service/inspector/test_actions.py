"""Acting on runs through a host runtime: answer a suspended run, fork after a message, cancel
a live run; a reader is refused, and a service without a host runtime says so.

``agentledger serve --host-runtime tests.service.inspector.host_agents:build``
over a database whose suspended runs the same agents left (seeded in this
process, before the service starts), driven from real headless Chromium.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Page, expect

from agentledger.runtime import Answer
from agentledger.runtime.checkpoint import CHECKPOINT_VERSION, RunCheckpoint
from agentledger.runtime.planner import AwaitClarification
from agentledger.service import StoreClient
from agentledger.storage import RecordBuilder, RunStart, RunStatus
from agentledger.storage.payloads import TRANSCRIPT_APPENDED
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.types import Checkpoint
from agentledger.transcript import Message, TextPart, encode_messages
from tests.conditions import HANG_GUARD
from tests.runtime.test_effects import LoseWrite
from tests.service.inspector.conftest import log_in
from tests.service.inspector.host_agents import runtime
from tests.service.inspector.looping import seed_crash_loop
from tests.service.process import ServiceProcess, Tokens

# One event loop for the whole run, shared with the one browser.
pytestmark = pytest.mark.asyncio(loop_scope="session")

ROOT = Path(__file__).resolve().parents[3]
HOST_RUNTIME = "tests.service.inspector.host_agents:build"


@dataclass
class Acting:
    """The service with a host runtime, and a host token scoped to another tenant."""

    service: ServiceProcess
    acme_host: str


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


async def _seed(db: Path) -> None:
    """Suspended runs of each kind, and a clarified conversation to fork."""
    store = await SQLiteStore.open(str(db))
    seeded = runtime(store)
    try:
        sessions = ("book-1", "book-2", "ask-1", "fetch-1", "fork-1", "refuse-1", "deleg-1")
        for session in sessions:
            await store.create_session(session, created_at=_now())
        for session, agent, said in (
            ("book-1", "booker", "Book me a table."),
            ("book-2", "booker", "Book me a table."),
            ("ask-1", "asker", "What is the weather?"),
            ("fetch-1", "fetcher", "How many A-17 are in stock?"),
            ("fork-1", "asker", "What is the weather?"),
            ("refuse-1", "booker", "Book me a table."),
            ("deleg-1", "delegator", "Ask the asker."),
        ):
            out = await seeded.agent_client(agent).run(session, said, run_id=f"{session}-run")
            assert out.status is RunStatus.SUSPENDED, out
        done = await seeded.agent_client("asker").resume(
            "fork-1", "fork-1-run", Answer(text="Oslo")
        )
        assert done.status is RunStatus.COMPLETED
    finally:
        await seeded.close()
    # A once call whose result's write was lost: the run asks whether it happened.
    try:
        # A planner turn that kept killing its worker (written as the run loop pauses one).
        for session in ("loop-1", "loop-2"):
            await store.create_session(session, created_at=_now())
            await seed_crash_loop(store, session_id=session, run_id=f"{session}-run",
                                  agent_id="sender", said="Send it.", at=_now())  # fmt: skip
        for session in ("doubt-1", "doubt-2"):
            lossy = runtime(LoseWrite(store, "turn:1:tool:send-1:result"))
            try:
                await store.create_session(session, created_at=_now())
                client = lossy.agent_client("sender")
                out = await client.run(session, "Send it.", run_id=f"{session}-run")
                assert out.status is RunStatus.SUSPENDED, out
                assert out.awaiting is not None
                assert out.awaiting.kind == "in_doubt"
            finally:
                await lossy.close()
    finally:
        await store.close()


@pytest.fixture(scope="module")
def acting(tokens: Tokens, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Acting]:
    db = tmp_path_factory.mktemp("acting") / "agentledger.db"
    asyncio.run(_seed(db))
    acme_host = tokens.scoped("host", tenant="acme")  # before the service reads the file
    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH", ""))))
    with ServiceProcess(
        str(db), tokens.path, env={"PYTHONPATH": path}, options=("--host-runtime", HOST_RUNTIME)
    ) as process:
        yield Acting(process, acme_host)


async def _finished(url: str, token: str, run_id: str) -> RunStatus:
    """The run's status once it is no longer running (the host runtime runs it; a minute at
    most, a hang guard)."""
    async with StoreClient(url, token=token) as client:
        deadline = asyncio.get_running_loop().time() + HANG_GUARD
        while asyncio.get_running_loop().time() < deadline:
            meta = await client.load_run(run_id)
            if meta.status is not RunStatus.RUNNING:
                return meta.status
            await asyncio.sleep(0.05)
    raise AssertionError(f"{run_id} still running")


def _run_id(page: Page) -> str:
    found = re.search(r"[?&]id=([^&]+)", page.url)
    assert found is not None, page.url
    return found.group(1)


async def _left_for_a_new_transcript(page: Page, shown: str) -> None:
    """Wait until the page has moved from run ``shown``'s transcript to another run's (the
    page was already on a URL of that shape, so matching the shape alone returns at once)."""
    await page.wait_for_url(
        lambda u: re.search(r"/ui/run/transcript\?id=run-", u) is not None and shown not in u
    )


async def test_host_approves_and_declines_a_confirmation(
    page: Page, acting: Acting, tokens: Tokens, artifacts: Path
) -> None:
    """Approve: the continuation runs the call and says it booked; decline: it says why not."""
    url = acting.service.url
    await log_in(page, url, tokens.host)
    await page.goto(f"{url}/ui/run?id=book-1-run")
    question = page.get_by_role("region", name="What the run asks")
    await expect(question.locator("#run-question")).to_have_text("Book this table?")
    await expect(question.locator(".calls")).to_contain_text("book_table")
    await page.screenshot(path=artifacts / "21-answer-confirmation.png", full_page=True)
    await page.get_by_role("button", name="Approve").click()
    await page.wait_for_url(re.compile(r"/ui/run/transcript\?id=run-.*#latest"))
    continuation = _run_id(page)
    assert await _finished(url, tokens.host, continuation) is RunStatus.COMPLETED
    # The live redraw of the header has landed (a running run's header is taller: it moves
    # the tabs, and a click made as it lands would miss the link); then wait for the
    # navigation itself.
    await expect(page.locator("#run-status")).to_have_text("completed", timeout=30_000)
    async with page.expect_navigation(url=re.compile(r"/ui/run/transcript\?")):
        await page.get_by_role("link", name="Transcript").click()
    await expect(page.locator("li.bubble").last).to_contain_text("Booked: 2 at Chez Demo.")
    await expect(page.locator("dl.facts")).to_contain_text("book-1-run")  # Continues
    await page.screenshot(path=artifacts / "22-approved-continuation.png", full_page=True)
    # The suspended run now links to its continuation and offers no answer.
    await page.goto(f"{url}/ui/run?id=book-1-run")
    await expect(page.get_by_role("form", name="Answer this run")).to_have_count(0)
    await expect(page.locator("dl.facts")).to_contain_text(continuation)
    # Declining, with a note the model reads.
    await page.goto(f"{url}/ui/run?id=book-2-run")
    await page.get_by_label("Note to the agent").fill("too pricey")
    await page.get_by_role("button", name="Decline").click()
    await page.wait_for_url(re.compile(r"/ui/run/transcript\?id=run-.*#latest"))
    declined = _run_id(page)
    assert await _finished(url, tokens.host, declined) is RunStatus.COMPLETED
    await page.goto(f"{url}/ui/run/transcript?id={declined}")
    await expect(page.locator("li.bubble").last).to_contain_text(
        "Not booked (declined by the user: too pricey)."
    )


async def test_host_answers_a_clarification_and_gives_outside_results(
    page: Page, acting: Acting, tokens: Tokens, artifacts: Path
) -> None:
    """A clarification's answer and an external tool's result each start a continuation."""
    url = acting.service.url
    await log_in(page, url, tokens.host)
    await page.goto(f"{url}/ui/run?id=ask-1-run")
    await expect(page.locator("#run-question")).to_have_text("Which city do you mean?")
    await page.get_by_label("Your answer").fill("Lyon")
    await page.screenshot(path=artifacts / "23-answer-clarification.png", full_page=True)
    await page.get_by_role("button", name="Send answer").click()
    await page.wait_for_url(re.compile(r"/ui/run/transcript\?id=run-.*#latest"))
    answered = _run_id(page)
    assert await _finished(url, tokens.host, answered) is RunStatus.COMPLETED
    await page.goto(f"{url}/ui/run/transcript?id={answered}")
    await expect(page.locator("li.bubble")).to_have_count(4)
    await expect(page.locator("li.bubble").nth(2)).to_contain_text("Lyon")
    await expect(page.locator("li.bubble").last).to_contain_text("The weather in Lyon is mild.")
    # Results from outside: JSON stays JSON.
    await page.goto(f"{url}/ui/run?id=fetch-1-run")
    await page.get_by_label("Result of stock_level").fill("42")
    await page.get_by_role("button", name="Send results").click()
    await page.wait_for_url(re.compile(r"/ui/run/transcript\?id=run-.*#latest"))
    fetched = _run_id(page)
    assert await _finished(url, tokens.host, fetched) is RunStatus.COMPLETED
    await page.goto(f"{url}/ui/run/transcript?id={fetched}")
    await expect(page.locator("li.bubble").last).to_contain_text("Stock: 42")


async def test_host_decides_a_tool_call_in_doubt(
    page: Page, acting: Acting, tokens: Tokens, artifacts: Path
) -> None:
    """A once call in doubt: a badge on the call, the three answers as buttons; 'It
    happened' gives the model the host's result, and the decision names who gave it."""
    url = acting.service.url
    await log_in(page, url, tokens.host)
    await page.goto(f"{url}/ui/run/transcript?id=doubt-1-run")
    await expect(page.locator(".badge.in-doubt")).to_have_text("in doubt")
    # from the call in the conversation to the host's three answers
    await page.get_by_role("link", name="decide what became of it").click()
    await page.wait_for_url(re.compile(r"/ui/run\?id=doubt-1-run#answer"))
    question = page.get_by_role("region", name="What the run asks")
    await expect(question.locator("#run-in-doubt")).to_contain_text("attempt 1")
    await expect(question.locator(".calls")).to_contain_text("send_note")
    for name in ("It happened", "Run it again", "It failed"):
        await expect(page.get_by_role("button", name=name)).to_have_count(1)
    await page.screenshot(path=artifacts / "26-answer-in-doubt.png", full_page=True)
    await page.get_by_label("What it returned").fill("delivered")
    await page.get_by_label("Decided by").fill("ops@example")
    await page.get_by_role("button", name="It happened").click()
    await page.wait_for_url(re.compile(r"/ui/run/transcript\?id=run-.*#latest"))
    continuation = _run_id(page)
    assert await _finished(url, tokens.host, continuation) is RunStatus.COMPLETED
    await page.goto(f"{url}/ui/run/transcript?id={continuation}")
    await expect(page.locator("li.bubble").last).to_contain_text("Sent: delivered.")
    async with StoreClient(url, token=tokens.host) as client:
        page_of = await client.list_run_records(continuation)
    answered = [r for r in page_of.records if r.type == "tool_call_answered"]
    assert len(answered) == 1
    assert b'"by":"ops@example"' in answered[0].payload
    assert b'"decision":"happened"' in answered[0].payload


async def test_a_call_in_doubt_is_decided_by_a_posted_form(acting: Acting, tokens: Tokens) -> None:
    """Without a browser: the run page offers the three answers and marks the call; a
    decision that does not fit is refused and changes nothing; 'failed' with a reason and
    who decided continues the run with an error result."""
    url = acting.service.url
    bearer = {"Authorization": f"Bearer {tokens.host}"}
    async with httpx.AsyncClient(headers=bearer) as client:
        shown = await client.get(f"{url}/ui/run", params={"id": "doubt-2-run"})
        assert shown.status_code == 200
        for text in ("It happened", "Run it again", "It failed", 'id="run-in-doubt"'):
            assert text in shown.text, text
        transcript = await client.get(f"{url}/ui/run/transcript", params={"id": "doubt-2-run"})
        assert 'class="badge suspended in-doubt"' in transcript.text
        line = await client.get(f"{url}/ui/run/timeline", params={"id": "doubt-2-run"})
        assert "tool · send_note (once)" in line.text
        for wrong in ({"decision": "approve"}, {"decision": "failed"}):  # no reason: refused
            refused = await client.post(f"{url}/ui/run/answer", data={"id": "doubt-2-run", **wrong})
            assert refused.status_code == 422, wrong
        async with StoreClient(url, token=tokens.host) as store:
            assert (await store.load_run("doubt-2-run")).successor_run_id == ""
        decided = await client.post(
            f"{url}/ui/run/answer",
            data={"id": "doubt-2-run", "decision": "failed", "reason": "bounced", "by": "ops"},
        )
        assert decided.status_code == 303
        continuation = decided.headers["location"].split("id=")[1].split("&")[0]
    assert await _finished(url, tokens.host, continuation) is RunStatus.COMPLETED
    async with StoreClient(url, token=tokens.host) as store:
        logged = (await store.list_run_records(continuation)).records
    answered = [r for r in logged if r.type == "tool_call_answered"]
    assert len(answered) == 1
    assert b'"decision":"failed"' in answered[0].payload
    assert b'"by":"ops"' in answered[0].payload
    assert any(b"bounced" in r.payload for r in logged if r.type == "tool_result_received")


async def test_host_runs_the_work_of_a_crash_loop_again(
    page: Page, acting: Acting, tokens: Tokens, artifacts: Path
) -> None:
    """A planner turn that kept killing its worker: the page says so and offers 'Run it
    again' and 'End the run'; running it again plans the turn anew and the run completes."""
    url = acting.service.url
    await log_in(page, url, tokens.host)
    await page.goto(f"{url}/ui/run?id=loop-1-run")
    await expect(page.locator("#run-waits")).to_have_text(
        "it is paused: agentledger.plan_turn started 3 times without finishing "
        "(its worker kept dying)"
    )
    question = page.get_by_role("region", name="What the run asks")
    await expect(question.locator("#run-crash-loop")).to_contain_text(
        "A planner turn (agentledger.plan_turn) was started 3 times without finishing"
    )
    await expect(page.get_by_role("button", name="End the run")).to_have_count(1)
    await page.screenshot(path=artifacts / "29-answer-crash-loop.png", full_page=True)
    await page.get_by_role("button", name="Run it again").click()
    await page.wait_for_url(re.compile(r"/ui/run/transcript\?id=run-.*#latest"))
    continuation = _run_id(page)
    assert await _finished(url, tokens.host, continuation) is RunStatus.COMPLETED
    await page.goto(f"{url}/ui/run/transcript?id={continuation}")
    await expect(page.locator("li.bubble").last).to_contain_text("Sent: note to ann.")
    async with StoreClient(url, token=tokens.host) as client:
        assert (await client.load_run("loop-1-run")).successor_run_id == continuation


async def test_a_crash_loop_is_ended_by_a_posted_form(acting: Acting, tokens: Tokens) -> None:
    """Without a browser: the page offers the two answers; an answer that does not fit is
    refused and changes nothing; 'end' ends the run failed (kind crash_loop), the turn
    not planned again."""
    url = acting.service.url
    bearer = {"Authorization": f"Bearer {tokens.host}"}
    async with httpx.AsyncClient(headers=bearer) as client:
        shown = await client.get(f"{url}/ui/run", params={"id": "loop-2-run"})
        for text in ('value="rerun">Run it again', 'value="end" class="danger">End the run'):
            assert text in shown.text, text
        for wrong in ("approve", "retry", "results"):
            refused = await client.post(f"{url}/ui/run/answer",
                                        data={"id": "loop-2-run", "decision": wrong})  # fmt: skip
            assert refused.status_code == 422, wrong
            assert "an answer to a crash loop" in refused.text
        async with StoreClient(url, token=tokens.host) as store:
            assert (await store.load_run("loop-2-run")).successor_run_id == ""
        ended = await client.post(f"{url}/ui/run/answer",
                                  data={"id": "loop-2-run", "decision": "end"})  # fmt: skip
        assert ended.status_code == 303
        continuation = ended.headers["location"].split("id=")[1].split("&")[0]
    assert await _finished(url, tokens.host, continuation) is RunStatus.FAILED
    async with StoreClient(url, token=tokens.host) as store:
        logged = (await store.list_run_records(continuation)).records
    assert logged[-1].type == "run_completed"
    assert b'"kind":"crash_loop"' in logged[-1].payload
    assert not [r for r in logged if r.type == "tool_call_scheduled"]  # not planned again


async def test_a_run_suspended_by_its_child_is_answered_through_it(
    page: Page, acting: Acting, tokens: Tokens, artifacts: Path
) -> None:
    """The parent shows its child's question and takes the answer; the child points to it."""
    url = acting.service.url
    async with StoreClient(url, token=tokens.host) as client:
        (child,) = [r for r in await client.list_runs_by_session("deleg-1") if r.parent_run_id]
    await log_in(page, url, tokens.host)
    await page.goto(f"{url}/ui/run?id={child.run_id}")
    await expect(page.locator("#run-question")).to_have_text("Which city do you mean?")
    await expect(page.get_by_role("form", name="Answer this run")).to_have_count(0)
    await page.get_by_role("link", name="deleg-1-run").last.click()
    question = page.get_by_role("region", name="What the run asks")
    await expect(question).to_contain_text(f"through its child run {child.run_id}")
    await page.get_by_label("Your answer").fill("Nice")
    await page.get_by_role("button", name="Send answer").click()
    await page.wait_for_url(re.compile(r"/ui/run/transcript\?id=run-.*#latest"))
    answered = _run_id(page)
    assert await _finished(url, tokens.host, answered) is RunStatus.COMPLETED
    await page.goto(f"{url}/ui/run/transcript?id={answered}")
    await expect(page.locator("li.bubble").last).to_contain_text(
        "The asker said: The weather in Nice is mild."
    )
    async with StoreClient(url, token=tokens.host) as client:
        assert (await client.load_run(child.run_id)).successor_run_id != ""


async def test_host_forks_after_a_middle_message_and_cancels_a_live_run(
    page: Page, acting: Acting, tokens: Tokens, artifacts: Path
) -> None:
    """Fork after the agent's question with another answer: a new run of the session, its
    history a reference to the source cut there; a fork that naps is canceled in its engine."""
    url = acting.service.url
    async with StoreClient(url, token=tokens.host) as client:
        (continued,) = [
            r.run_id
            for r in await client.list_runs_by_session("fork-1")
            if r.run_id != "fork-1-run"
        ]
    await log_in(page, url, tokens.host)
    await page.goto(f"{url}/ui/run/transcript?id={continued}")
    bubbles = page.locator("li.bubble")
    await expect(bubbles).to_have_count(4)
    # Only after the assistant's messages may a new user message follow.
    await expect(page.locator("details.fork")).to_have_count(2)
    await expect(bubbles.nth(0).locator("details.fork")).to_have_count(0)
    middle = bubbles.nth(1)
    await expect(middle).to_contain_text("Which city do you mean?")
    await middle.locator("details.fork summary").click()
    await middle.get_by_label("New message").fill("Paris")
    await page.screenshot(path=artifacts / "24-fork-from-a-message.png", full_page=True)
    await middle.get_by_role("button", name="Start fork").click()
    await _left_for_a_new_transcript(page, continued)
    forked = _run_id(page)
    assert await _finished(url, tokens.host, forked) is RunStatus.COMPLETED
    await page.reload()
    await expect(page.locator("li.bubble")).to_have_count(4)
    await expect(page.locator("li.bubble").nth(2)).to_contain_text("Paris")
    await expect(page.locator("li.bubble").last).to_contain_text("The weather in Paris is mild.")
    history = page.get_by_role("list", name="where this transcript comes from")
    await expect(history).to_contain_text("is a fork, at record")
    await expect(history).to_contain_text("fork-1-run")
    await page.screenshot(path=artifacts / "25-forked-run.png", full_page=True)
    async with StoreClient(url, token=tokens.host) as client:
        meta = await client.load_run(forked)
        assert meta.session_id == "fork-1"
        assert "Oslo" not in str(await client.list_run_records(forked))
    # A fork told to nap runs in the service's engine: canceling it reaches the engine.
    await page.goto(f"{url}/ui/run/transcript?id={forked}")
    last = page.locator("li.bubble").last
    await last.locator("details.fork summary").click()
    await last.get_by_label("New message").fill("slowly")
    await last.get_by_role("button", name="Start fork").click()
    await _left_for_a_new_transcript(page, forked)
    napping = _run_id(page)
    await page.goto(f"{url}/ui/run?id={napping}")
    await expect(page.locator("#run-status")).to_have_text("running")
    await expect(page.locator("form.act .hint")).to_contain_text("host runtime")
    await page.get_by_label("Reason").fill("no nap today")
    await page.get_by_role("button", name="Cancel run").click()
    # the form's answer is shown before the page is reloaded (a reload during its navigation
    # finds no page to reload)
    await expect(page.locator("#run-cancel")).to_have_text("no nap today")
    assert await _finished(url, tokens.host, napping) is RunStatus.CANCELED
    await page.reload()
    await expect(page.locator("#run-status")).to_have_text("canceled")
    await expect(page.locator("#run-cancel")).to_have_text("no nap today")
    await page.screenshot(path=artifacts / "26-canceled-in-the-engine.png", full_page=True)


async def test_a_reader_or_another_tenant_is_refused_and_nothing_changes(
    page: Page, acting: Acting, tokens: Tokens, artifacts: Path
) -> None:
    """A reader sees no answer or fork form and its posts are refused (403); a host scoped
    to another tenant is answered as if the run were missing; a cross-site post is refused."""
    url = acting.service.url
    async with StoreClient(url, token=tokens.host) as client:
        before = await client.list_runs_by_session("fork-1")
    await log_in(page, url, tokens.reader)
    await page.goto(f"{url}/ui/run?id=refuse-1-run")
    await expect(page.locator("#run-question")).to_have_text("Book this table?")
    await expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    await expect(page.locator("#no-host-runtime")).to_have_count(0)
    await page.goto(f"{url}/ui/run/transcript?id=fork-1-run")
    await expect(page.locator("li.bubble")).to_have_count(2)
    await expect(page.locator("details.fork")).to_have_count(0)
    await page.screenshot(path=artifacts / "27-reader-sees-no-actions.png", full_page=True)
    for path, form in (
        ("/ui/run/answer", {"id": "refuse-1-run", "decision": "approve"}),
        ("/ui/run/fork", {"id": "fork-1-run", "through": "3", "message": "Rome"}),
    ):
        refused = await page.request.post(f"{url}{path}", form=form)
        assert refused.status == 403, path
        assert "may only look" in await refused.text()
    async with httpx.AsyncClient() as client:
        scoped = await client.post(
            f"{url}/ui/run/answer",
            data={"id": "refuse-1-run", "decision": "approve"},
            headers={"Authorization": f"Bearer {acting.acme_host}"},
        )
        assert scoped.status_code == 404
        forged = await client.post(
            f"{url}/ui/run/answer",
            data={"id": "refuse-1-run", "decision": "approve"},
            headers={"Authorization": f"Bearer {tokens.host}", "Sec-Fetch-Site": "cross-site"},
        )
        assert forged.status_code == 403
        # A fork cut at a record the run does not hold is refused.
        bad_cut = await client.post(
            f"{url}/ui/run/fork",
            data={"id": "fork-1-run", "through": "999", "message": "Rome"},
            headers={"Authorization": f"Bearer {tokens.host}"},
        )
        assert bad_cut.status_code == 422, bad_cut.text
        # A host's answer that does not fit the question is refused in words.
        wrong = await client.post(
            f"{url}/ui/run/answer",
            data={"id": "refuse-1-run", "decision": "clarify", "text": "Rome"},
            headers={"Authorization": f"Bearer {tokens.host}"},
        )
        assert wrong.status_code == 422
        assert "an answer to a confirmation" in wrong.text
    async with StoreClient(url, token=tokens.host) as client:
        meta = await client.load_run("refuse-1-run")
        assert meta.status is RunStatus.SUSPENDED
        assert meta.successor_run_id == ""
        assert await client.list_runs_by_session("fork-1") == before


async def test_without_a_host_runtime_the_inspector_says_so(
    page: Page, service: ServiceProcess, tokens: Tokens, artifacts: Path
) -> None:
    """The plain service offers no answer or fork, says why in words, and refuses a post."""
    now = _now()
    run = RecordBuilder(RunStart(run_id="plain-ask", agent_id="concierge",
                                 session_id="plain-1", started_at=now))  # fmt: skip
    question = Message(role="assistant", parts=(TextPart(text="Which evening?"),))
    checkpoint = RunCheckpoint(version=CHECKPOINT_VERSION, agent_id="concierge", turn=1,
                               awaiting=AwaitClarification(question="Which evening?"))  # fmt: skip
    async with StoreClient(service.url, token=tokens.host) as host:
        await host.create_session("plain-1", created_at=now)
        await host.start_root_run(run.root_start())
        await host.append_run_record(run.record(
            TRANSCRIPT_APPENDED, encode_messages([question]), event_key="turn:1:assistant:messages",
            at=now + timedelta(milliseconds=5)))  # fmt: skip
        await host.record_run_suspension(
            run.suspension(Checkpoint(id="plain-ask:suspension", data=checkpoint.encode()),
                           at=now + timedelta(milliseconds=9), pending_count=0)
        )  # fmt: skip
    await log_in(page, service.url, tokens.host)
    await page.goto(f"{service.url}/ui/run?id=plain-ask")
    await expect(page.locator("#run-question")).to_have_text("Which evening?")
    await expect(page.locator("#no-host-runtime")).to_contain_text(
        "No host runtime is attached to this service"
    )
    await expect(page.get_by_role("button", name="Send answer")).to_have_count(0)
    await page.goto(f"{service.url}/ui/run/transcript?id=plain-ask")
    await expect(page.locator("details.fork")).to_have_count(0)
    await page.goto(f"{service.url}/ui/run?id=plain-ask")
    await page.screenshot(path=artifacts / "28-no-host-runtime.png", full_page=True)
    refused = await page.request.post(
        f"{service.url}/ui/run/answer",
        form={"id": "plain-ask", "decision": "clarify", "text": "Friday"},
    )
    assert refused.status == 422
    text = await refused.text()
    assert "host runtime" in text
    assert "RuntimeHost" not in text
    assert "ValidationError" not in text
    async with StoreClient(service.url, token=tokens.host) as host:
        assert (await host.load_run("plain-ask")).status is RunStatus.SUSPENDED
