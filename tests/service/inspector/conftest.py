"""Fixtures of the inspector's browser tests: the demo database, a real service, headless Chromium.

The browser is Debian's ``/usr/bin/chromium`` driven by Playwright (never
``playwright install``). Screenshots go to ``$AGENTLEDGER_ARTIFACTS`` (or a
temporary directory); with ``AGENTLEDGER_DOCS_SCREENSHOT=1`` the pictures of
the README and docs/inspector.md are also written to ``docs/`` (the transcript, the
waterfall and the session's conversation).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, async_playwright, expect

from agentledger.storage import RecordBuilder, RunStart, RunStatus
from agentledger.storage.payloads import TRANSCRIPT_APPENDED
from agentledger.storage.sqlite import SQLiteStore
from agentledger.transcript import (
    DocumentPart,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    encode_messages,
)
from tests.service.process import ServiceProcess, Tokens

# Assertions wait as long as actions do (20 s): on two busy cores a page can take longer to
# load or redraw than Playwright's 5 s default. A passing check returns as soon as it holds.
expect.set_options(timeout=20_000)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
T0 = datetime(2020, 6, 1, 12, 0, tzinfo=UTC)  # older than any demo session
HOSTILE = '<img src=x onerror="document.title=1">'
# A 1x1 PNG.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c63f8cfc0f01f0005000201e0e6a1a20000000049454e44ae426082"
)
THOUGHT = "The user wants a summary; fetch the figures first."
ANSWER = "Revenue rose 12% in Q3; the Q4 forecast could not be read."
RICH = [
    Message(
        role="user",
        parts=(
            TextPart(text="Summarize the attached report and its chart."),
            DocumentPart(name="report.txt", format="txt", text="Q3 revenue rose 12%."),
            ImagePart(format="png", data=PIXEL),
        ),
    ),
    Message(
        role="assistant",
        parts=(
            ThinkingPart(text=THOUGHT, signature="sig-1", final=True),
            ToolUsePart(id="t1", name="figures", input={"quarter": "Q3", "x": 1.10}),
            ToolUsePart(id="t2", name="forecast", input={"quarter": "Q4"}),
        ),
    ),
    Message(
        role="user",
        parts=(
            ToolResultPart(tool_use_id="t1", content={"revenue": 112}),
            ToolResultPart(tool_use_id="t2", content="forecast unavailable", is_error=True),
        ),
    ),
    Message(role="assistant", parts=(TextPart(text=ANSWER),)),
]


@dataclass
class Demo:
    """The demo database and what the tests added to it."""

    db: Path
    session_id: str
    rich_run: str
    acme_session: str
    globex_session: str
    long_run: str = "long-run"
    long_session: str = "long-1"


LONG_TURNS = 1_250
"""Planner turns of the long run: 8 records each, 10,000 records in all."""
NEEDLE = "the-needle-in-turn-977"
USAGE = b'{"model":"long-model","input_tokens":100,"output_tokens":10}'
PRICES = """currency = "USD"
[models.demo-concierge]
input = 3.0
output = 15.0
[models.demo-research]
input = "0.80"
output = "4"
[models.long-model]
input = 1
output = 2
"""


def _said(role: str, text: str) -> bytes:
    return encode_messages([Message(role=role, parts=(TextPart(text=text),))])  # type: ignore[arg-type]


async def _seed_long_run(store: SQLiteStore) -> None:
    """A run of 10,000 records: turns of a model call and a tool call, and a transcript."""
    await store.create_session("long-1", created_at=T0 - timedelta(days=1))
    run = RecordBuilder(
        RunStart(run_id="long-run", agent_id="grinder", session_id="long-1",
                 started_at=T0 - timedelta(days=1))
    )  # fmt: skip
    await store.start_root_run(run.root_start())
    at = T0 - timedelta(days=1)
    batch = [run.record(TRANSCRIPT_APPENDED, _said("user", "Grind through the archive."),
                        event_key="input:messages", at=at)]  # fmt: skip
    for turn in range(1, LONG_TURNS + 1):
        at += timedelta(milliseconds=40)
        step = f"turn:{turn}"
        call = {"tool_call_id": f"c{turn}", "tool_name": "lookup", "input": {"page": turn}}
        said = NEEDLE if turn == 977 else f"page {turn} looked up"
        batch += [
            run.record("run_phase_changed", b'{"phase":"planning"}',
                       event_key=f"{step}:phase:planning", at=at),
            run.record("model_usage", USAGE, event_key=f"{step}:usage:0", at=at),
            run.record(TRANSCRIPT_APPENDED, encode_messages([Message(role="assistant", parts=(
                ToolUsePart(id=f"c{turn}", name="lookup", input={"page": turn}),))]),
                event_key=f"{step}:assistant:messages", at=at),
            run.record("tool_call_scheduled", msgspec.json.encode(call),
                       event_key=f"{step}:tool:c{turn}:scheduled", at=at),
            run.record("tool_result_received",
                       msgspec.json.encode({**call, "content": said, "is_error": False}),
                       event_key=f"{step}:tool:c{turn}:result", at=at + timedelta(milliseconds=25)),
            run.record(TRANSCRIPT_APPENDED, encode_messages([Message(role="user", parts=(
                ToolResultPart(tool_use_id=f"c{turn}", content=said),))]),
                event_key=f"{step}:tool_results:messages", at=at + timedelta(milliseconds=30)),
            run.record("planner_note", b'{"text":"onwards"}', event_key=f"{step}:note:0",
                       at=at + timedelta(milliseconds=30)),
            run.record("note", b'{"filler":true}', event_key=f"{step}:filler",
                       at=at + timedelta(milliseconds=30)),
        ]  # fmt: skip
    drop = {"turn:1:filler", "turn:2:filler", "turn:3:filler"}  # 10,000 with start and end
    batch = [r for r in batch if r.event_key not in drop]
    for i in range(0, len(batch), 500):
        await store.append_run_records(batch[i : i + 500])
    await store.record_run_terminal(run.terminal(RunStatus.COMPLETED, at=at + timedelta(seconds=1)))


def _run_demo(db: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentledger", "demo", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=db.parent,
    )
    assert done.returncode == 0, done.stderr


async def _seed(db: Path) -> Demo:
    """Labelled sessions, a run with a rich transcript, and a hostile label (escaped or not)."""
    store = await SQLiteStore.open(str(db))
    try:
        demo = (await store.list_sessions()).sessions[0].id
        acme = {"tenant": "acme", "note": HOSTILE}
        await store.create_session("acme-1", created_at=T0, labels=acme)
        await store.create_session(
            "globex-1", created_at=T0 + timedelta(seconds=1), labels={"tenant": "globex"}
        )
        await store.end_session("globex-1", ended_at=T0 + timedelta(seconds=5))
        run = RecordBuilder(
            RunStart(run_id="acme-report", agent_id="analyst", session_id="acme-1", started_at=T0)
        )
        await store.start_root_run(run.root_start())
        payload = encode_messages(RICH)
        await store.append_run_record(
            run.record(TRANSCRIPT_APPENDED, payload, event_key="m1", at=T0 + timedelta(seconds=2))
        )
        await _seed_long_run(store)
        return Demo(db, demo, "acme-report", "acme-1", "globex-1")
    finally:
        await store.close()


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """``agentledger demo`` into a fresh file, plus the tests' own sessions."""
    db = tmp_path_factory.mktemp("inspector") / "agentledger.db"
    _run_demo(db)
    return asyncio.run(_seed(db))


@pytest.fixture(scope="session")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Tokens:
    """A token per role, plus a reader scoped to ``tenant=acme`` (``tokens.acme``)."""
    table = Tokens(tmp_path_factory.mktemp("tokens") / "tokens.json")
    table.acme = table.scoped("reader", tenant="acme")  # type: ignore[attr-defined]
    return table


@pytest.fixture(scope="session")
def service(
    demo: Demo, tokens: Tokens, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    """``agentledger serve`` over the demo database, with a price table."""
    prices = tmp_path_factory.mktemp("prices") / "prices.toml"
    prices.write_text(PRICES, encoding="utf-8")
    env = {"AGENTLEDGER_PRICES": str(prices)}
    with ServiceProcess(str(demo.db), tokens.path, env=env) as process:
        yield process


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go (``$AGENTLEDGER_ARTIFACTS`` if set)."""
    where = os.environ.get("AGENTLEDGER_ARTIFACTS")
    folder = Path(where) if where else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser() -> AsyncIterator[Browser]:
    """Headless Debian Chromium, one for the whole run (each test gets its own context)."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (as .ci/run does)")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest_asyncio.fixture(loop_scope="session")
async def page(browser: Browser) -> AsyncIterator[Page]:
    """A fresh browser context (no cookies) on a laptop-sized screen."""
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(20_000)
    try:
        yield await context.new_page()
    finally:
        await context.close()


async def log_in(page: Page, url: str, token: str) -> None:
    """Log in through the form, with the keyboard."""
    await page.goto(f"{url}/ui/login")
    await page.get_by_label("Token").fill(token)
    await page.keyboard.press("Enter")
    await page.wait_for_url(f"{url}/ui")
