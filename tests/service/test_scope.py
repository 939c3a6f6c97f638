"""[S4] [D6] A label-scoped token (tenant=acme) sees and writes only its tenant's data.

Another tenant's sessions, runs and records cannot be loaded, listed, paged,
followed or written, whether their ids were guessed or listed elsewhere: a
call naming them is answered as if they did not exist (404), one asking for
labels outside the scope is a 403, and either leaves the store exactly as it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentledger.errors import AccessDeniedError, NotFoundError
from agentledger.service import StoreClient
from agentledger.storage import Checkpoint, RecordBuilder, RunStart, RunStatus
from agentledger.storage.conformance import dump_store
from tests.service.process import ServiceProcess, Tokens

T0 = datetime(2026, 9, 1, tzinfo=UTC)


def _at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def _run(run_id: str, session_id: str = "", **kw: Any) -> RecordBuilder:
    return RecordBuilder(RunStart(run_id=run_id, agent_id="a", session_id=session_id,
                                  started_at=_at(1), **kw))  # fmt: skip


class World:
    """Two tenants' sessions, runs and one-shot runs, made with an unscoped host token."""

    sessions = ("scope-acme", "scope-globex")
    runs = ("scope-acme-r", "scope-globex-r", "scope-acme-1x", "scope-globex-1x")

    def __init__(self) -> None:
        self.acme = _run("scope-acme-r", "scope-acme")
        self.globex = _run("scope-globex-r", "scope-globex")
        self.acme_one_shot = _run("scope-acme-1x", labels={"tenant": "acme"})
        self.globex_one_shot = _run("scope-globex-1x", labels={"tenant": "globex"})

    async def build(self, host: StoreClient) -> None:
        for tenant in ("acme", "globex"):
            await host.create_session(f"scope-{tenant}", created_at=_at(0),
                                      labels={"tenant": tenant})  # fmt: skip
        for run in (self.acme, self.globex):
            await host.start_root_run(run.root_start())
            await host.append_run_record(run.record("note", b"{}", event_key="n1", at=_at(2)))
        for run in (self.acme_one_shot, self.globex_one_shot):
            await host.start_one_shot_run(run.one_shot_start())


@pytest.fixture(scope="module")
def world(sqlite_service: ServiceProcess, tokens: Tokens) -> World:
    world = World()

    async def build() -> None:
        async with StoreClient(sqlite_service.url, token=tokens.host) as host:
            await world.build(host)

    asyncio.run(build())
    return world


@pytest.fixture
async def acme(sqlite_service: ServiceProcess, tokens: Tokens) -> AsyncIterator[StoreClient]:
    async with StoreClient(sqlite_service.url, token=tokens.acme["host"]) as client:
        yield client


async def _denied(call: Callable[[], Awaitable[Any]]) -> AccessDeniedError:
    with pytest.raises(AccessDeniedError) as info:
        await call()
    assert info.value.status == 403
    return info.value


async def _refused(call: Callable[[], Awaitable[Any]]) -> None:
    """Refused as for a missing row, or (labels outside the scope) with a 403."""
    with pytest.raises((NotFoundError, AccessDeniedError)) as info:
        await call()
    if isinstance(info.value, AccessDeniedError):
        assert info.value.status == 403
        assert "outside the token's scope" in info.value.reason


async def test_a_scoped_token_sees_its_own_tenant(world: World, acme: StoreClient) -> None:
    """[S4] loads, listings, pages and follows inside the scope work as for any host."""
    assert (await acme.load_session("scope-acme")).labels == {"tenant": "acme"}
    assert (await acme.load_run("scope-acme-r")).status is RunStatus.RUNNING
    assert len((await acme.list_run_records("scope-acme-r")).records) == 2
    assert len((await acme.list_session_run_records("scope-acme")).records) == 2
    assert [m.run_id for m in await acme.list_runs_by_session("scope-acme")] == ["scope-acme-r"]
    assert (await acme.load_run("scope-acme-1x")).labels == {"tenant": "acme"}
    followed = await anext(acme.follow_run_records("scope-acme-r"))
    assert followed.record.type == "run_started"
    page = await acme.list_sessions(limit=1)
    listed = [s.id for s in page.sessions]
    while page.next_cursor:
        page = await acme.list_sessions(cursor=page.next_cursor, limit=1)
        listed += [s.id for s in page.sessions]
    assert "scope-acme" in listed
    assert all(s.startswith("scope-acme") or not s.startswith("scope-") for s in listed)
    assert "scope-globex" not in listed


async def test_a_scoped_token_cannot_touch_another_tenant(
    world: World, acme: StoreClient, sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """[S4] every read and write of globex's data is refused, and nothing changes."""
    g, g1 = world.globex, world.globex_one_shot
    refused: list[Callable[[], Awaitable[Any]]] = [
        lambda: acme.load_session("scope-globex"),
        lambda: acme.load_session_status("scope-globex"),
        lambda: acme.list_runs_by_session("scope-globex"),
        lambda: acme.list_session_run_records("scope-globex"),
        lambda: acme.load_run("scope-globex-r"),
        lambda: acme.load_run("scope-globex-1x"),
        lambda: acme.list_run_records("scope-globex-r"),
        lambda: acme.load_run_suspension("scope-globex-r"),
        lambda: acme.load_tool_result("scope-globex-r", "k"),
        lambda: acme.save_tool_result("scope-globex-r", "k", b"intruder"),
        lambda: acme.save_tool_result("scope-globex-1x", "k", b"intruder"),
        lambda: anext(acme.follow_run_records("scope-globex-r")),
        lambda: anext(acme.follow_session_run_records("scope-globex")),
        lambda: acme.list_sessions(labels={"tenant": "globex"}),
        lambda: acme.append_run_record(g.record("note", b"{}", event_key="n2", at=_at(3))),
        lambda: acme.record_run_cancellation(g.cancellation("stop", at=_at(3))),
        lambda: acme.record_run_suspension(g.suspension(Checkpoint(id="c", data=b"x"), at=_at(3))),
        lambda: acme.record_run_terminal(g.terminal(RunStatus.COMPLETED, at=_at(3))),
        lambda: acme.repair_run_terminal(g.terminal(RunStatus.COMPLETED, at=_at(3))),
        lambda: acme.record_run_terminal(g1.terminal(RunStatus.COMPLETED, at=_at(3))),
        lambda: acme.start_root_run(_run("scope-intruder", "scope-globex").root_start()),
        lambda: acme.start_child_run(
            _run("scope-child", "scope-globex", parent_run_id="scope-globex-r").child_start(
                parent_agent_id="a", tool_name="t", tool_call_id="c1"
            )
        ),
        lambda: acme.start_one_shot_child_run(
            _run(
                "scope-1x-child", parent_run_id="scope-globex-1x", labels={"tenant": "acme"}
            ).one_shot_child_start(parent_agent_id="a", tool_name="t", tool_call_id="c1")
        ),
        lambda: acme.start_one_shot_run(_run("scope-unlabelled-1x").one_shot_start()),
        lambda: acme.create_session("scope-new", created_at=_at(5), labels={"tenant": "globex"}),
        lambda: acme.create_session("scope-new", created_at=_at(5)),
        lambda: acme.end_session("scope-globex", ended_at=_at(6)),
        lambda: acme.purge_session("scope-globex"),
    ]
    async with StoreClient(sqlite_service.url, token=tokens.host) as host:
        ids = ([*world.sessions, "scope-new"],
               [*world.runs, "scope-intruder", "scope-child", "scope-1x-child",
                "scope-unlabelled-1x"])  # fmt: skip
        before = await dump_store(host, *ids)
        for call in refused:
            await _refused(call)
        assert await dump_store(host, *ids) == before
        assert await host.load_tool_result("scope-globex-r", "k") is None
    # ... while the same token may write inside its scope.
    mine = _run("scope-acme-1x-2", labels={"tenant": "acme", "extra": "ok"})
    assert (await acme.start_one_shot_run(mine.one_shot_start())).started.inserted


async def test_a_scoped_reader_is_both_scoped_and_read_only(
    world: World, sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """[S4] role and scope both apply."""
    async with StoreClient(sqlite_service.url, token=tokens.acme["reader"]) as reader:
        assert (await reader.load_run("scope-acme-r")).run_id == "scope-acme-r"
        with pytest.raises(NotFoundError):
            await reader.load_run("scope-globex-r")
        error = await _denied(lambda: reader.end_session("scope-acme", ended_at=_at(7)))
        assert "may not call end_session" in error.reason
        # Saved tool results are a worker's private scratch: not for readers, even in scope.
        error = await _denied(lambda: reader.load_tool_result("scope-acme-r", "k"))
        assert "may not call load_tool_result" in error.reason
