"""[S2] Calls a StoreClient makes at the same moment go as one ``POST /v1/calls``, and each
is answered exactly as it would be alone: its result, or its own typed error.

That is the client's way over HTTP (``socket=False``, or a service without the socket):
every client here is made so; the socket has its tests in ``test_socket.py``."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import httpx
import msgspec
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from agentledger.errors import (
    AccessDeniedError,
    AgentledgerError,
    SessionNotFoundError,
    TransientError,
    ValidationError,
)
from agentledger.service import StoreClient
from agentledger.service.error_codec import encode_error
from agentledger.service.wire import FRAMES, MAX_CALLS
from agentledger.storage import RecordBuilder, RunStart
from tests.service.process import ServiceProcess, Tokens
from tests.service.proxy import Proxy

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def _run(run_id: str, session_id: str) -> RecordBuilder:
    return RecordBuilder(RunStart(run_id=run_id, agent_id="a", session_id=session_id,
                                  started_at=_at(0)))  # fmt: skip


def _alone(url: str, token: str) -> StoreClient:
    """A client that sends every call alone: what a grouped call must answer like."""
    client = StoreClient(url, socket=False, token=token)
    client._batches = None
    return client


def _requests(url: str, method: str) -> float:
    """How many requests of ``method`` the service has answered (any status)."""
    text = httpx.get(f"{url}/metrics").text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "agentledger_requests_total" and s.labels["method"] == method
    )


async def _outcomes(calls: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Each call's result, or the encoded typed error it raised, all made at once."""

    async def one(call: Callable[[], Awaitable[Any]]) -> Any:
        try:
            return await call()
        except AgentledgerError as e:
            return encode_error(e)

    return list(await asyncio.gather(*(one(c) for c in calls)))


async def test_calls_made_at_once_go_as_one_request(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """Sixteen workers appending at once on one client: a group or two, not sixteen
    requests, and every record stored in its run."""
    url = sqlite_service.url
    async with StoreClient(url, socket=False, token=tokens.host) as client:
        await client.create_session("batch-many", created_at=_at(0))
        runs = [_run(f"batch-many-{i}", "batch-many") for i in range(16)]
        for run in runs:
            await client.start_root_run(run.root_start())
        groups, appends = _requests(url, "calls"), _requests(url, "append_run_record")
        results = await asyncio.gather(*(
            client.append_run_record(run.record("note", b'{"n": 1}', event_key="n1", at=_at(1)))
            for run in runs
        ))  # fmt: skip
        assert [(r.id, r.inserted) for r in results] == [("2", True)] * 16
        assert 1 <= _requests(url, "calls") - groups <= 2
        assert _requests(url, "append_run_record") - appends == 16  # each call counted too
        for run in runs:
            page = await client.list_run_records(run.run.run_id)
            assert [r.event_key for r in page.records] == ["run_started", "n1"]


async def test_a_lone_call_goes_alone(sqlite_service: ServiceProcess, tokens: Tokens) -> None:
    url = sqlite_service.url
    async with StoreClient(url, socket=False, token=tokens.host) as client:
        groups = _requests(url, "calls")
        await client.create_session("batch-lone", created_at=_at(0))
        await client.load_session("batch-lone")
        assert _requests(url, "calls") == groups


async def test_each_call_of_a_group_is_answered_as_alone(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """A new record, an exact retry, a conflict, a missing run, a page and a refused
    request in one group: each answer (or typed error) equals the one it gets alone."""
    url = sqlite_service.url
    async with (
        StoreClient(url, socket=False, token=tokens.host) as grouped,
        _alone(url, tokens.host) as alone,
    ):
        await alone.create_session("batch-mixed", created_at=_at(0))
        kept, fresh = _run("batch-kept", "batch-mixed"), _run("batch-fresh", "batch-mixed")
        for run in (kept, fresh):
            await alone.start_root_run(run.root_start())
        note = kept.record("note", b'{"n": 1}', event_key="n1", at=_at(1))
        await alone.append_run_record(note)
        other = kept.record("note", b'{"n": 2}', event_key="n1", at=_at(1))

        def calls(client: StoreClient, fresh_key: str) -> list[Callable[[], Awaitable[Any]]]:
            new = fresh.record("note", b"{}", event_key=fresh_key, at=_at(2))
            return [
                lambda: client.append_run_record(new),  # inserted
                lambda: client.append_run_record(note),  # an exact retry
                lambda: client.append_run_record(other),  # a conflict
                lambda: client.load_run("batch-nowhere"),  # not found
                lambda: client.list_run_records("batch-kept", limit=2),
                lambda: client.list_run_records("batch-kept", cursor="not-a-cursor"),
            ]

        groups = _requests(url, "calls")
        got = await _outcomes(calls(grouped, "g"))
        assert _requests(url, "calls") == groups + 1
        expected = await _outcomes(calls(alone, "a"))
        assert (got[0].id, got[0].inserted) == ("2", True)
        assert expected[0].id == "3"
        assert got[1:] == expected[1:]
        assert all(isinstance(e, bytes) for e in got[2:4] + got[5:])  # the refusals, typed


async def test_a_token_refused_for_a_call_is_refused_for_that_call_only(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """A reader's group: its reads answered, its write refused (403) as alone; a
    label-scoped token's call on another tenant's session refused as alone."""
    url = sqlite_service.url
    async with StoreClient(url, socket=False, token=tokens.host) as host:
        for tenant in ("acme", "globex"):
            await host.create_session(f"batch-{tenant}", created_at=_at(0),
                                      labels={"tenant": tenant})  # fmt: skip
        run = _run("batch-read", "batch-acme")
        await host.start_root_run(run.root_start())
    record = run.record("note", b"{}", event_key="r1", at=_at(1))
    for token in (tokens.reader, tokens.acme["host"]):
        async with (
            StoreClient(url, socket=False, token=token) as grouped,
            _alone(url, token) as alone,
        ):

            def calls(client: StoreClient) -> list[Callable[[], Awaitable[Any]]]:
                return [
                    lambda: client.load_run("batch-read"),
                    lambda: client.load_session("batch-globex"),
                    lambda: client.append_run_record(record),
                ]

            got, expected = await _outcomes(calls(grouped)), await _outcomes(calls(alone))
            assert got[0].run_id == "batch-read"
            if token == tokens.reader:  # may read everything, write nothing
                assert got == expected
                assert b'"status":403' in got[2]
            else:  # may write its tenant's run, and not read globex's session
                assert got[1] == expected[1]
                assert isinstance(got[1], bytes)
                assert (got[2].inserted, expected[2].inserted) == (True, False)


async def test_an_unknown_token_refuses_each_call_under_its_own_name(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """The service refuses the group whole (401); each call is then sent alone and gets
    its own refusal, naming its own operation."""
    async with StoreClient(sqlite_service.url, socket=False, token="not-a-token") as client:
        errors = await asyncio.gather(
            client.load_session("batch-x"), client.load_run("batch-y"), return_exceptions=True
        )
    assert [type(e) for e in errors] == [AccessDeniedError] * 2
    assert [(e.operation, e.status) for e in errors] == [("load_session", 401),  # type: ignore[union-attr]
                                                        ("load_run", 401)]  # fmt: skip


async def test_a_group_whose_reply_is_lost_is_transient_for_each_then_retried_exactly(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """The group committed and its reply was lost: each member's TransientError names its
    own operation, and each exact retry answers with the ids of the first write."""
    async with (
        Proxy(sqlite_service.url) as proxy,
        StoreClient(proxy.url, socket=False, token=tokens.host) as client,
    ):
        await client.create_session("batch-lost", created_at=_at(0))
        runs = [_run(f"batch-lost-{i}", "batch-lost") for i in range(3)]
        for run in runs:
            await client.start_root_run(run.root_start())
        notes = [run.record("note", b"{}", event_key="n1", at=_at(1)) for run in runs]
        proxy.drop_next_reply()
        lost = await asyncio.gather(*(client.append_run_record(n) for n in notes),
                                    return_exceptions=True)  # fmt: skip
        assert proxy.dropped == 1
        assert [type(e) for e in lost] == [TransientError] * 3
        assert {e.operation for e in lost} == {"append_run_record"}  # type: ignore[union-attr]
        retried = [await client.append_run_record(n) for n in notes]
        assert [(r.id, r.inserted) for r in retried] == [("2", False)] * 3


async def test_a_member_cancelled_while_its_group_is_out_leaves_the_others_answered(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    async with StoreClient(sqlite_service.url, socket=False, token=tokens.host) as client:
        await client.create_session("batch-cancel", created_at=_at(0))
        runs = [_run(f"batch-cancel-{i}", "batch-cancel") for i in range(4)]
        for run in runs:
            await client.start_root_run(run.root_start())
        tasks = [
            asyncio.create_task(client.append_run_record(
                run.record("note", b"{}", event_key="n1", at=_at(1))))
            for run in runs
        ]  # fmt: skip
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # the group has left
        tasks[0].cancel()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(done[0], asyncio.CancelledError)
        assert [(r.id, r.inserted) for r in done[1:]] == [("2", True)] * 3  # type: ignore[union-attr]


def test_the_route_refuses_what_is_not_a_group(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """Not an array of pairs, more calls than the limit: a typed 422 for the request; an
    unknown method name: a typed 422 for that call only; JSON unless MessagePack is asked."""
    headers = {"authorization": f"Bearer {tokens.host}"}
    with httpx.Client(base_url=sqlite_service.url, headers=headers) as http:
        for body in (b"{}", b'[["load_run"]]', b"not json"):
            answer = http.post("/v1/calls", content=body)
            assert answer.status_code == 422
            assert answer.json()["error"]["type"] == "ValidationError"
        many = b"[" + b",".join([b'["load_session", {"session_id": "x"}]'] * (MAX_CALLS + 1))
        answer = http.post("/v1/calls", content=many + b"]")
        assert answer.status_code == 422
        assert f"at most {MAX_CALLS} calls" in answer.json()["error"]["message"]
        answer = http.post(
            "/v1/calls",
            content=b'[["no_such_method", {}], ["load_session", {"session_id": "batch-none"}]]',
        )
        assert answer.status_code == 200
        (bad, bad_answer), (missing, missing_answer) = answer.json()
        assert (bad, bad_answer["error"]["type"]) == (422, "ValidationError")
        assert "the name of a store method" in bad_answer["error"]["message"]
        assert (missing, missing_answer["error"]["type"]) == (404, "SessionNotFoundError")
        assert http.post("/v1/calls", content=b"[]").json() == []
        assert http.get("/v1/calls").status_code == 405


@pytest.mark.parametrize("token", ["", "not-a-token"])
def test_the_route_needs_a_known_token(sqlite_service: ServiceProcess, token: str) -> None:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    answer = httpx.post(f"{sqlite_service.url}/v1/calls", content=b"[]", headers=headers)
    assert answer.status_code == 401
    assert answer.json()["error"]["type"] == "AccessDeniedError"


@asynccontextmanager
async def _answering(answer: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Any:
    """A local HTTP server answering every POST with ``answer``; yields its URL."""
    app = web.Application()
    app.router.add_route("POST", "/{path:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_a_service_without_groups_gets_each_call_alone(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """A new client in front of an older service (a rolling upgrade): the service answers
    ``/v1/calls`` with 404, the group's calls are sent alone, and the client stops grouping."""
    seen: list[str] = []

    async def older(request: web.Request) -> web.Response:
        seen.append(request.path)
        if request.path == "/v1/calls":
            return web.json_response({"error": {"type": "NotFoundError", "message": "no route",
                                                "fields": {}}}, status=404)  # fmt: skip
        async with aiohttp.ClientSession() as http:
            answer = await http.post(sqlite_service.url + request.path, data=await request.read(),
                                     headers={k: v for k, v in request.headers.items()
                                              if k.lower() in ("authorization", "accept",
                                                               "content-type")})  # fmt: skip
            return web.Response(body=await answer.read(), status=answer.status,
                                content_type=answer.content_type)  # fmt: skip

    async with (
        _answering(older) as url,
        StoreClient(url, socket=False, token=tokens.host) as client,
    ):
        await client.create_session("batch-older", created_at=_at(0))
        for _ in range(2):
            loaded = await asyncio.gather(client.load_session("batch-older"),
                                          client.load_session("batch-older"))  # fmt: skip
            assert [s.id for s in loaded] == ["batch-older"] * 2
    assert seen.count("/v1/calls") == 1
    assert seen.count("/v1/load_session") == 4


async def test_a_quick_call_is_not_held_back_by_a_slow_one_beside_it(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """Each call of a group is answered as it is answered: a read is answered while the
    append beside it still waits for the database's write lock (held here by another
    connection), and the append once the lock is let go."""
    url = sqlite_service.url
    async with StoreClient(url, socket=False, token=tokens.host) as client:
        await client.create_session("batch-slow", created_at=_at(0))
        run = _run("batch-slow-r", "batch-slow")
        await client.start_root_run(run.root_start())
        note = run.record("note", b"{}", event_key="n1", at=_at(1))
        groups = _requests(url, "calls")
        holder = sqlite3.connect(sqlite_service.db, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")  # the write lock: appends wait for it
            append = asyncio.create_task(client.append_run_record(note))
            loaded = await asyncio.wait_for(client.load_session("batch-slow"), 60)
            assert loaded.id == "batch-slow"
            await asyncio.sleep(0.2)
            assert not append.done()
        finally:
            holder.rollback()
            holder.close()
        appended = await asyncio.wait_for(append, 30)
        assert (appended.id, appended.inserted) == ("2", True)
        assert _requests(url, "calls") == groups + 1  # they went together


def _frame(index: int, status: int, answer: bytes) -> bytes:
    frame = msgspec.msgpack.encode((index, status, answer))
    return len(frame).to_bytes(4, "big") + frame


@pytest.mark.parametrize("rest", [b"", b"\x00\x00\x00\x03abc"], ids=["cut", "garbled"])
async def test_a_stream_cut_short_or_garbled_fails_only_the_calls_not_yet_answered(
    rest: bytes,
) -> None:
    """The first answer arrives, then the stream ends (the service went away) or carries
    bytes that are no answer: the first call keeps its answer, the second gets a
    TransientError or a ValidationError naming its own operation."""
    missing = encode_error(SessionNotFoundError(session_id="gone"))
    seen: list[str] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        seen.append(request.path)
        response = web.StreamResponse(headers={"content-type": FRAMES})
        await response.prepare(request)
        await response.write(_frame(0, 404, missing) + rest)
        return response

    async with _answering(answer) as url, StoreClient(url, socket=False, token="t") as client:
        first, second = await asyncio.gather(
            client.load_session("gone"), client.load_run("r"), return_exceptions=True
        )
    assert seen == ["/v1/calls"]  # nothing sent again: its outcome is unknown
    assert isinstance(first, SessionNotFoundError)
    assert first.session_id == "gone"
    if rest:
        assert isinstance(second, ValidationError)
        assert second.field == "load_run answer"
    else:
        assert isinstance(second, TransientError)
        assert second.operation == "load_run"
