"""[S5] Live updates: a run started while the page is open appears, and its records stream in.

The writes go through the store service (a host ``StoreClient``), as a
worker's would; the page follows them through the service's follow stream.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from agentledger.service import StoreClient
from agentledger.storage import RecordBuilder, RunStart, RunStatus
from agentledger.storage.payloads import TRANSCRIPT_APPENDED
from agentledger.transcript import Message, TextPart, encode_messages
from tests.service.inspector.conftest import log_in
from tests.service.process import ServiceProcess, Tokens

# One event loop for the whole run, shared with the one browser.
pytestmark = pytest.mark.asyncio(loop_scope="session")


def _said(role: str, text: str) -> bytes:
    return encode_messages([Message(role=role, parts=(TextPart(text=text),))])  # type: ignore[arg-type]


async def test_new_run_appears_and_its_records_stream_in(
    page: Page, service: ServiceProcess, tokens: Tokens, artifacts: Path
) -> None:
    """Session page: the new run appears; run page: rows, status and transcript follow the log."""
    now = datetime.now(UTC).replace(microsecond=0)
    at = iter(now + timedelta(milliseconds=i) for i in range(100))
    async with StoreClient(service.url, token=tokens.host) as host:
        await host.create_session("live-1", created_at=next(at))
        await log_in(page, service.url, tokens.reader)
        await page.goto(f"{service.url}/ui/session?id=live-1")
        await expect(page.locator("section.runs .empty")).to_have_text("No runs yet.")
        await expect(page.locator("#live")).to_have_text("Live: following new records")

        run = RecordBuilder(RunStart(run_id="live-run", agent_id="scribe", session_id="live-1",
                                     started_at=next(at)))  # fmt: skip
        await host.start_root_run(run.root_start())
        link = page.get_by_role("link", name="live-run", exact=True)
        await expect(link).to_be_visible()
        await link.click()
        records = page.locator("ol.records > li")
        await expect(records).to_have_count(1)
        await expect(page.locator("#live")).to_have_text("Live: following new records")

        await host.append_run_record(
            run.record("note", b'{"step": 1}', event_key="n1", at=next(at))
        )
        await host.append_run_record(
            run.record(TRANSCRIPT_APPENDED, _said("user", "Hello, live page."), event_key="m1",
                       at=next(at))
        )  # fmt: skip
        await expect(records).to_have_count(3)
        await expect(records.nth(1).locator(".payload")).to_contain_text('"step": 1')
        await expect(records.nth(2).locator(".type")).to_have_text(TRANSCRIPT_APPENDED)
        await page.screenshot(path=artifacts / "6-live-records.png", full_page=True)

        await page.get_by_role("link", name="Transcript").click()
        bubbles = page.locator("li.bubble")
        await expect(bubbles).to_have_count(1)
        await host.append_run_record(
            run.record(TRANSCRIPT_APPENDED, _said("assistant", "Hello from the run."),
                       event_key="m2", at=next(at))
        )  # fmt: skip
        await expect(bubbles).to_have_count(2)
        await expect(bubbles.nth(1)).to_contain_text("Hello from the run.")
        await host.record_run_terminal(run.terminal(RunStatus.COMPLETED, at=next(at)))
        await expect(page.locator("#run-status")).to_have_text("completed")
        await page.screenshot(path=artifacts / "7-live-transcript.png", full_page=True)


async def test_filtered_records_follow_only_their_types(
    page: Page, service: ServiceProcess, tokens: Tokens
) -> None:
    """With a type filter, only records of those types stream in, in commit order."""
    now = datetime.now(UTC).replace(microsecond=0)
    at = iter(now + timedelta(milliseconds=i) for i in range(300))
    async with StoreClient(service.url, token=tokens.host) as host:
        await host.create_session("live-2", created_at=next(at))
        run = RecordBuilder(RunStart(run_id="live-filter", agent_id="scribe",
                                     session_id="live-2", started_at=next(at)))  # fmt: skip
        await host.start_root_run(run.root_start())
        await log_in(page, service.url, tokens.reader)
        await page.goto(f"{service.url}/ui/run?id=live-filter&type=keep")
        await expect(page.locator("#live")).to_have_text("Live: following new records")
        for i in range(120):  # more than one store page of the follow stream
            kind = "keep" if i % 3 == 0 else "skip"
            payload = b'{"i": %d}' % i
            await host.append_run_record(run.record(kind, payload, event_key=f"k{i}", at=next(at)))
        records = page.locator("ol.records > li")
        await expect(records).to_have_count(40)
        assert set(await records.locator(".type").all_inner_texts()) == {"keep"}
        seqs = [int(s.lstrip("#")) for s in await records.locator(".seq").all_inner_texts()]
        assert seqs == [2 + 3 * i for i in range(40)]
        # The type filter's counts follow too, new types included.
        counts = page.locator("[data-counts]")
        await expect(counts.locator('label[data-type="keep"] .count')).to_have_text("40")
        await expect(counts.locator('label[data-type="skip"] .count')).to_have_text("80")
        await expect(counts.locator('label[data-type="run_started"] .count')).to_have_text("1")
