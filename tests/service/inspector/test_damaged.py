"""A record whose payload is damaged is reported by the pages that read it, named, as an error
page: never read as an empty payload and shown as if nothing were wrong. A fork in a session's
conversation is a branch of its source's turn, not the next turn."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from agentledger.runtime import records as rt
from agentledger.service import StoreClient
from agentledger.storage import RecordBuilder, RunStart
from tests.service.process import ServiceProcess, Tokens
from tests.views.test_conversation import forked_session

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_damaged_payload_is_an_error_page_naming_the_record(
    service: ServiceProcess, tokens: Tokens
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    run = RunStart(run_id="damaged-run", agent_id="a", session_id="damaged", started_at=now)
    records = RecordBuilder(run, turn_id="t1")
    ms = timedelta(milliseconds=1)
    async with StoreClient(service.url, token=tokens.host) as host:
        await host.create_session("damaged", created_at=now)
        await host.start_root_run(records.root_start())
        phase = rt.RecordSpec.phase(rt.Phase.PLANNING, 1)
        stored = await host.append_run_records(
            [
                records.record(phase.type, phase.payload, event_key=phase.event_key, at=now + ms),
                # valid JSON, but not a usage payload: a count that is not a number
                records.record(
                    rt.MODEL_USAGE,
                    b'{"model": "m", "input_tokens": "many"}',
                    event_key=rt.usage_key(1, 0),
                    at=now + ms,
                ),
            ]
        )
    damaged = stored[-1].id
    bearer = {"Authorization": f"Bearer {tokens.reader}"}
    async with httpx.AsyncClient(headers=bearer) as client:
        for path in ("/ui/run", "/ui/run/timeline"):
            shown = await client.get(f"{service.url}{path}", params={"id": "damaged-run"})
            page = html.unescape(shown.text)
            assert shown.status_code == 500, (path, shown.status_code)
            assert "Stored data is damaged" in page, path
            assert f"corrupt record '{damaged}' of run 'damaged-run'" in page, path
            assert "model_usage payload is not a valid UsagePayload" in page, path
            assert "many in" not in page, path
        fragment = await client.get(f"{service.url}/ui/run/header", params={"id": "damaged-run"})
        assert fragment.status_code == 500
        assert f"corrupt record '{damaged}'" in fragment.text


async def test_a_fork_shows_as_a_branch_in_the_conversation(
    service: ServiceProcess, tokens: Tokens
) -> None:
    async with StoreClient(service.url, token=tokens.host) as host:
        await forked_session(host, "branched", prefix="b-")
    bearer = {"Authorization": f"Bearer {tokens.reader}"}
    async with httpx.AsyncClient(headers=bearer) as client:
        shown = await client.get(
            f"{service.url}/ui/session/conversation", params={"id": "branched"}
        )
    assert shown.status_code == 200
    page = html.unescape(shown.text)
    labels = re.findall(r'<span class="turn-no">([^<]*)</span>', page)
    # one path at a time: the main conversation marks where the branch leaves it
    assert labels == ["Turn 1", "Turn 2", "Turn 3"]
    assert "Branch of turn 2</a> leaves the conversation here, after message 3" in page
    async with httpx.AsyncClient(headers=bearer) as client:
        shown = await client.get(
            f"{service.url}/ui/session/conversation", params={"id": "branched", "branch": "b-fork"}
        )
        tree = await client.get(f"{service.url}/ui/session", params={"id": "branched"})
        nowhere = await client.get(
            f"{service.url}/ui/session/conversation", params={"id": "branched", "branch": "x"}
        )
    page = html.unescape(shown.text)
    labels = re.findall(r'<span class="turn-no">([^<]*)</span>', page)
    assert labels == ["Turn 1", "Turn 2", "Branch of turn 2"]
    assert "at record 3: it leaves the conversation after message 3" in page
    assert "b-fork</a> at message 3" not in page
    assert re.search(r'class="rel fork"[^>]*>⑂ branch of <a[^>]*>b-two</a> at message 3',
                     html.unescape(tree.text))  # fmt: skip
    assert nowhere.status_code == 422
