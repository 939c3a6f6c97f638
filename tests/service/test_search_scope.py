"""[G1] [S4] Search through the service: a reader may search, and a label-scoped token finds
only its tenant's messages; naming another tenant's session or labels is refused as for any
call (404, 403), so a search tells nothing of what lies outside the scope."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from agentledger.errors import AccessDeniedError, NotFoundError, ValidationError
from agentledger.service import StoreClient
from agentledger.storage import RecordBuilder, RunStart, payloads
from agentledger.transcript import Message, TextPart, encode_messages
from tests.service.process import ServiceProcess, Tokens

T0 = datetime(2026, 9, 2, tzinfo=UTC)
WORD = "zqsearchscopeword"


def _at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


@pytest.fixture(scope="module")
def tenants(sqlite_service: ServiceProcess, tokens: Tokens) -> None:
    """Two tenants' sessions, each with a message holding WORD, written by a host token."""

    async def build() -> None:
        async with StoreClient(sqlite_service.url, token=tokens.host) as host:
            for tenant in ("acme", "globex"):
                sid = f"search-{tenant}"
                await host.create_session(sid, created_at=_at(0), labels={"tenant": tenant})
                run = RecordBuilder(
                    RunStart(run_id=f"{sid}-r", agent_id="a", session_id=sid, started_at=_at(1))
                )
                await host.start_root_run(run.root_start())
                said = encode_messages([Message(role="user", parts=(TextPart(text=WORD),))])
                record = run.record(payloads.TRANSCRIPT_APPENDED, said, event_key="m", at=_at(2))
                await host.append_run_record(record)

    asyncio.run(build())


async def test_an_unscoped_reader_searches_every_tenant(
    tenants: None, sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    async with StoreClient(sqlite_service.url, token=tokens.reader) as reader:
        page = await reader.search(WORD)
        assert [h.session_id for h in page.hits] == ["search-globex", "search-acme"]
        assert page.hits[0].snippet == f"**{WORD}**"
        only = await reader.search(WORD, session_id="search-acme")
        assert [h.run_id for h in only.hits] == ["search-acme-r"]
        with pytest.raises(ValidationError):
            await reader.search("")


@pytest.mark.parametrize("role", ["host", "reader"])
async def test_a_scoped_token_finds_only_its_tenant(
    role: str, tenants: None, sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    async with StoreClient(sqlite_service.url, token=tokens.acme[role]) as acme:
        page = await acme.search(WORD)
        assert [h.session_id for h in page.hits] == ["search-acme"]
        assert [h.session_id for h in (await acme.search(WORD, limit=1)).hits] == ["search-acme"]
        mine = await acme.search(WORD, session_id="search-acme", labels={"tenant": "acme"})
        assert [h.session_id for h in mine.hits] == ["search-acme"]
        with pytest.raises(NotFoundError):
            await acme.search(WORD, session_id="search-globex")
        with pytest.raises(NotFoundError):
            await acme.search(WORD, session_id="search-nobody")
        with pytest.raises(AccessDeniedError) as denied:
            await acme.search(WORD, labels={"tenant": "globex"})
        assert denied.value.status == 403
        assert "outside the token's scope" in denied.value.reason
