"""[S2] [S3] A StoreClient's calls on one persistent WebSocket (``/v1/socket``): each call
answered exactly as ``POST /v1/<name>`` alone, the token checked at the upgrade and with
every call, calls in flight failing as transient when the connection drops, and a client
of an older service (no socket) going over HTTP as before.

The conformance suite (``test_conformance.py``) runs through StoreClient, hence over the
socket; these are the socket's own cases."""

from __future__ import annotations

import asyncio
import io
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import msgspec
import pytest
import uvicorn
from litestar import Litestar
from prometheus_client.parser import text_string_to_metric_families

from agentledger.errors import AccessDeniedError, AgentledgerError, TransientError
from agentledger.service import StoreClient, TokenTable, add_token, create_app
from agentledger.service.error_codec import decode_error, encode_error
from agentledger.service.socket_wire import SOCKET_ROUTE, decode_answer, encode_call
from agentledger.service.state import ServiceState
from agentledger.service.wire import body_cap
from agentledger.storage import RecordBuilder, RunStart
from agentledger.storage.sqlite import SQLiteStore
from tests.conditions import HANG_GUARD, until
from tests.service.process import ServiceProcess, Tokens, free_port
from tests.service.proxy import Proxy

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def _run(run_id: str, session_id: str) -> RecordBuilder:
    return RecordBuilder(RunStart(run_id=run_id, agent_id="a", session_id=session_id,
                                  started_at=_at(0)))  # fmt: skip


async def _metric(url: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` with ``labels`` the service reports."""
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"{url}/metrics")).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


async def _upgrades(url: str) -> float:
    return await _metric(url, "agentledger_requests_total", method="socket", status="101")


async def _outcomes(calls: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Each call's result, or the encoded typed error it raised, all made at once."""

    async def one(call: Callable[[], Awaitable[Any]]) -> Any:
        try:
            return await call()
        except AgentledgerError as e:
            return encode_error(e)

    return list(await asyncio.gather(*(one(c) for c in calls)))


@asynccontextmanager
async def _serving(app: Any) -> AsyncIterator[str]:
    """``app`` served by uvicorn on loopback, in this event loop; yields its URL."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="critical")
    )
    task = asyncio.create_task(server.serve())
    await until(lambda: server.started or task.done(), "uvicorn listening")
    if task.done():
        task.result()
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@asynccontextmanager
async def _embedded(tmp_path: Path, **caps: int) -> AsyncIterator[tuple[str, str, ServiceState]]:
    """The service in this process over a fresh SQLite file (``caps``: its size caps):
    URL, a host token, its state."""
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "host")
    store = await SQLiteStore.open(str(tmp_path / "ledger.db"), **caps)
    state = ServiceState(store, TokenTable.load(tokens))
    try:
        async with _serving(create_app(state=state)) as url:
            yield url, token, state
    finally:
        await store.close()


async def test_every_call_of_a_client_goes_on_one_connection(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """Sequential and concurrent calls of one client: one upgrade, every call answered."""
    url = sqlite_service.url
    upgrades = await _upgrades(url)
    async with StoreClient(url, token=tokens.host) as client:
        await client.create_session("sock-one", created_at=_at(0))
        run = _run("sock-one-r", "sock-one")
        await client.start_root_run(run.root_start())
        notes = [run.record("note", b"{}", event_key=f"n{i}", at=_at(i)) for i in range(1, 33)]
        appended = await asyncio.gather(*(client.append_run_record(n) for n in notes))
        assert sorted(int(a.id) for a in appended) == list(range(2, 34))
        assert (await client.load_run("sock-one-r")).run_id == "sock-one-r"
    assert await _upgrades(url) == upgrades + 1


async def test_each_call_is_answered_as_it_is_over_http(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """For an unscoped, a reader and a label-scoped token: results and typed errors
    (role refused, scope refused, not found, a bad request) equal those over HTTP."""
    url = sqlite_service.url
    async with StoreClient(url, token=tokens.host) as host:
        for tenant in ("acme", "globex"):
            await host.create_session(f"sock-{tenant}", created_at=_at(0),
                                      labels={"tenant": tenant})  # fmt: skip
        run = _run("sock-read", "sock-acme")
        await host.start_root_run(run.root_start())
        record = run.record("note", b"{}", event_key="r1", at=_at(1))
        await host.append_run_record(record)  # so its exact retries are answered alike
    for token in (tokens.host, tokens.reader, tokens.acme["host"], tokens.acme["reader"]):
        async with (
            StoreClient(url, token=token) as socket,
            StoreClient(url, token=token, socket=False) as http,
        ):

            def calls(client: StoreClient) -> list[Callable[[], Awaitable[Any]]]:
                return [
                    lambda: client.load_run("sock-read"),
                    lambda: client.load_session("sock-globex"),
                    lambda: client.load_session("sock-missing"),
                    lambda: client.list_sessions(labels={"tenant": "globex"}),
                    lambda: client.append_run_record(record),
                    lambda: client.list_run_records("sock-read", limit=0),
                ]

            over_socket = await _outcomes(calls(socket))
            assert socket._socket is not None
            assert socket._socket._ws is not None
            assert over_socket == await _outcomes(calls(http))


async def test_the_upgrade_refuses_an_unknown_token_with_its_typed_error(
    sqlite_service: ServiceProcess,
) -> None:
    """The token is checked at the upgrade: 401 and the typed error, no connection; a
    client with that token gets each call's own refusal, as over HTTP."""
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(sqlite_service.url + SOCKET_ROUTE,
                                  headers={"authorization": "Bearer not-a-token"})  # fmt: skip
        assert refused.value.status == 401
        async with http.get(sqlite_service.url + SOCKET_ROUTE,
                            headers={"authorization": "Bearer not-a-token", "connection": "upgrade",
                                     "upgrade": "websocket", "sec-websocket-version": "13",
                                     "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ=="},
                            ) as answer:  # fmt: skip
            error = decode_error(await answer.read())
        assert isinstance(error, AccessDeniedError)
        assert error.status == 401
    async with StoreClient(sqlite_service.url, token="not-a-token") as client:
        with pytest.raises(AccessDeniedError) as info:
            await client.load_session("sock-x")
        assert (info.value.status, info.value.operation) == (401, "load_session")


async def test_a_token_no_longer_accepted_is_refused_on_the_open_connection(
    tmp_path: Path,
) -> None:
    """The token is checked again with every call: once the service stops accepting it (it
    expired, or was taken out of the table), the next call on the connection already open
    is refused as over HTTP, and the connection is not reopened for it."""
    async with _embedded(tmp_path) as (url, token, state):
        upgrades = await _upgrades(url)
        async with StoreClient(url, token=token) as client:
            await client.create_session("sock-exp", created_at=_at(0))
            connection = client._socket._ws if client._socket is not None else None
            assert connection is not None
            state.tokens = TokenTable([])  # the token expires
            with pytest.raises(AccessDeniedError) as info:
                await client.load_session("sock-exp")
            assert (info.value.status, info.value.operation) == (401, "load_session")
            assert client._socket is not None
            assert client._socket._ws is connection
        assert await _upgrades(url) == upgrades + 1


async def test_a_slow_call_does_not_hold_up_the_others_on_the_connection(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """An append waiting for the write lock; a read on the same connection is answered
    meanwhile; the append is answered once the lock goes."""
    async with StoreClient(sqlite_service.url, token=tokens.host) as client:
        await client.create_session("sock-slow", created_at=_at(0))
        run = _run("sock-slow-r", "sock-slow")
        await client.start_root_run(run.root_start())
        note = run.record("note", b"{}", event_key="n1", at=_at(1))
        holder = sqlite3.connect(sqlite_service.db, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")  # the write lock: appends wait for it
            append = asyncio.create_task(client.append_run_record(note))
            loaded = await asyncio.wait_for(client.load_session("sock-slow"), HANG_GUARD)
            assert loaded.id == "sock-slow"
            assert not append.done()
        finally:
            holder.rollback()
            holder.close()
        appended = await asyncio.wait_for(append, HANG_GUARD)
        assert (appended.id, appended.inserted) == ("2", True)


async def test_clients_racing_on_one_run_each_get_the_stored_answer(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """Eight clients (a connection each) append the same 24 records at once: each is
    stored once, in one order, and every client is answered with its stored id."""
    url = sqlite_service.url
    async with StoreClient(url, token=tokens.host) as host:
        await host.create_session("sock-race", created_at=_at(0))
        run = _run("sock-race-r", "sock-race")
        await host.start_root_run(run.root_start())
    notes = [run.record("note", b"{}", event_key=f"n{i}", at=_at(i)) for i in range(1, 25)]
    clients = [StoreClient(url, token=tokens.worker) for _ in range(8)]
    try:
        answers = await asyncio.gather(
            *(asyncio.gather(*(c.append_run_record(n) for n in notes)) for c in clients)
        )
    finally:
        for c in clients:
            await c.close()
    async with StoreClient(url, token=tokens.host) as host:
        page = await host.list_run_records("sock-race-r")
    stored = {r.event_key: r.id for r in page.records}
    assert len(page.records) == 25
    assert len(set(stored.values())) == 25
    for answered in answers:
        assert [a.id for a in answered] == [stored[n.event_key] for n in notes]
    assert sum(a.inserted for answered in answers for a in answered) == 24


async def test_the_service_killed_mid_call_then_the_exact_retry_after_a_restart(
    tmp_path: Path, tokens: Tokens
) -> None:
    """[S3] An append in flight when the service dies fails with TransientError; after
    a restart on the same address the same client's exact retry is answered."""
    db = str(tmp_path / "killed.db")
    listen = f"127.0.0.1:{free_port()}"
    service = ServiceProcess(db, tokens.path, listen=listen).start()
    # Its own timeout past the test's wait: the TransientError is the dropped connection's.
    async with StoreClient(service.url, token=tokens.host, timeout=4 * HANG_GUARD) as client:
        try:
            await client.create_session("sock-kill", created_at=_at(0))
            run = _run("sock-kill-r", "sock-kill")
            await client.start_root_run(run.root_start())
            note = run.record("note", b"{}", event_key="n1", at=_at(1))
            holder = sqlite3.connect(db, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")  # the append waits in the service
            append = asyncio.create_task(client.append_run_record(note))
            in_flight = "agentledger_requests_in_flight"
            while await _metric(service.url, in_flight) < 1:  # noqa: ASYNC110 (another process)
                await asyncio.sleep(0.01)  # the append reached the store
            service.kill()
            with pytest.raises(TransientError) as info:
                await asyncio.wait_for(append, HANG_GUARD)
            assert info.value.operation == "append_run_record"
            holder.rollback()
            holder.close()
            with pytest.raises(TransientError):  # nobody listening: as over HTTP
                await client.load_session("sock-kill")
            service = ServiceProcess(db, tokens.path, listen=listen).start()
            retried = await client.append_run_record(note)
            assert (retried.id, retried.inserted) == ("2", True)
            again = await client.append_run_record(note)
            assert (again.id, again.inserted) == ("2", False)
        finally:
            if service.process is not None and service.process.poll() is None:
                service.stop()


async def test_a_client_of_a_service_without_the_socket_goes_over_http(
    tmp_path: Path,
) -> None:
    """An older service (its router knows no ``/v1/socket``, refuses the upgrade): the
    client's calls are answered over HTTP, it stops trying the socket, and concurrent
    calls still go together as ``POST /v1/calls``."""
    async with _embedded(tmp_path) as (_url, token, state):
        app = create_app(state=state)

        async def older(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "websocket":  # what a service without the socket does
                await Litestar.__call__(app, scope, receive, send)
            else:
                await app(scope, receive, send)

        async with _serving(older) as old_url:
            async with aiohttp.ClientSession() as http:
                with pytest.raises(aiohttp.WSServerHandshakeError):
                    await http.ws_connect(old_url + SOCKET_ROUTE,
                                          headers={"authorization": f"Bearer {token}"})  # fmt: skip
            async with StoreClient(old_url, token=token) as client:
                await client.create_session("sock-old", created_at=_at(0))
                assert client._socket is None
                groups = await _metric(old_url, "agentledger_requests_total", method="calls")
                loaded = await asyncio.gather(*(client.load_session("sock-old") for _ in range(8)))
                assert {s.id for s in loaded} == {"sock-old"}
                assert await _metric(old_url, "agentledger_requests_total", method="calls") > groups
            assert await _upgrades(old_url) == 0


async def test_a_message_that_is_not_a_call_closes_the_connection(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """No call id to answer: the service closes the connection (1003); calls that are well
    formed but name no method or carry a bad request are answered as refusals."""
    headers = {"authorization": f"Bearer {tokens.host}"}
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(sqlite_service.url + SOCKET_ROUTE, headers=headers) as ws,
    ):
        await ws.send_bytes(encode_call(7, "no_such_method", b"{}"))
        call_id, status, answer = decode_answer((await ws.receive()).data)
        assert (call_id, status) == (7, 422)
        assert decode_error(answer) is not None
        await ws.send_bytes(encode_call(8, "load_session", b'{"session_id": 1}'))
        call_id, status, answer = decode_answer((await ws.receive()).data)
        assert (call_id, status) == (8, 422)
        await ws.send_bytes(msgspec.msgpack.encode(["not", "a", "call"]))
        closed = await ws.receive()
        assert closed.type == aiohttp.WSMsgType.CLOSE
        assert closed.data == 1003


async def test_a_call_past_the_body_cap_is_refused_as_over_http(tmp_path: Path) -> None:
    """The service's body cap holds for a call on the socket: the same typed refusal as
    ``POST /v1/<name>`` gives that body."""
    async with _embedded(tmp_path, max_payload_bytes=1000, max_checkpoint_bytes=1000) as (
        url,
        token,
        state,
    ):
        body = b" " * (body_cap(state.limits) + 1)
        headers = {"authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(url + SOCKET_ROUTE, headers=headers) as ws:
                await ws.send_bytes(encode_call(1, "append_run_record", body))
                call_id, status, answer = decode_answer((await ws.receive()).data)
            async with http.post(url + "/v1/append_run_record", data=io.BytesIO(body),
                                 headers=headers) as alone:  # fmt: skip
                assert (call_id, status) == (1, alone.status) == (1, 422)
                assert answer == await alone.read()


async def test_a_follow_shares_the_connection_and_ends_when_the_client_stops(
    tmp_path: Path,
) -> None:
    """[S5] A follow on the client's socket: records appended by another client arrive
    as they commit, the calls and the follow share one connection, and leaving the
    follow ends the service's stream of it."""
    async with _embedded(tmp_path) as (url, token, state):
        upgrades = await _upgrades(url)
        async with StoreClient(url, token=token) as client, StoreClient(url, token=token) as w:
            await client.create_session("sock-follow", created_at=_at(0))
            run = _run("sock-follow-r", "sock-follow")
            await client.start_root_run(run.root_start())
            followed = client.follow_run_records("sock-follow-r")
            first = await anext(followed)
            assert first.record.event_key == "run_started"
            for i in (1, 2):
                await w.append_run_record(run.record("note", b"{}", event_key=f"n{i}", at=_at(i)))
                seen = await asyncio.wait_for(anext(followed), HANG_GUARD)
                assert seen.record.event_key == f"n{i}"
            assert state.notifier.waiting
            assert client._socket is not None
            assert len(client._socket._streams) == 1  # on the socket, not a GET
            await followed.aclose()
            assert not client._socket._streams
            await until(lambda: not state.notifier.waiting, "the service's stream ended")
            assert (await client.load_run("sock-follow-r")).last_record_id == "3"
        assert await _upgrades(url) == upgrades + 2  # one per client, its calls and follow too


async def test_a_follow_is_refused_on_the_socket_as_over_http(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """A token scoped to another tenant, an unknown run, a bad cursor: the same typed
    refusals on the socket as from ``GET /v1/runs/{id}/records``."""
    url = sqlite_service.url
    async with StoreClient(url, token=tokens.host) as host:
        await host.create_session("sock-fg", created_at=_at(0), labels={"tenant": "globex"})
        await host.start_root_run(_run("sock-fg-r", "sock-fg").root_start())
    cases = [
        (tokens.acme["reader"], "sock-fg-r", ""),
        (tokens.reader, "sock-fg-missing", ""),
        (tokens.reader, "sock-fg-r", "not-a-cursor"),
    ]
    for token, run_id, after in cases:
        refusals = []
        for socket in (True, False):
            async with StoreClient(url, token=token, socket=socket) as client:
                with pytest.raises(AgentledgerError) as info:
                    await anext(client.follow_run_records(run_id, after=after))
                refusals.append(encode_error(info.value))
                assert (client._socket is not None) is socket
        assert refusals[0] == refusals[1]


async def test_calls_on_the_socket_are_admitted_shed_and_sent_again_as_over_http(
    tmp_path: Path,
) -> None:
    """Each call on the socket takes a call slot as an HTTP call does: past the limit it is
    answered 503 with a typed OverloadedError, and the client sends it again after the wait
    it asks for, so every write lands once. The connection itself holds a stream slot while
    it is open."""
    from agentledger.service.admission import OverloadLimits

    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "host")
    store = await SQLiteStore.open(str(tmp_path / "ledger.db"))
    limits = OverloadLimits(max_calls=1, max_calls_per_token=1, retry_after=0.01)
    state = ServiceState(store, TokenTable.load(tokens), overload=limits)
    try:
        async with (
            _serving(create_app(state=state)) as url,
            StoreClient(url, token=token) as client,
        ):
            await client.create_session("s", created_at=T0)
            run = _run("r", "s")
            await client.start_root_run(run.root_start())
            assert state.admission.streams == 1  # the client's one connection
            records = [run.record("note", b"{}", event_key=f"k{i}", at=_at(i + 1))
                       for i in range(16)]  # fmt: skip
            await asyncio.gather(*(client.append_run_record(r) for r in records))
            page = await client.list_run_records("r")
            assert sorted(r.event_key for r in page.records if r.type == "note") == sorted(
                f"k{i}" for i in range(16)
            )
            assert await _upgrades(url) == 1  # every call went on the one socket
        assert sum(state.admission.shed.values()) > 0
        await until(lambda: state.admission.streams == 0, "the connection's slot freed")
        assert state.admission.calls == 0
    finally:
        await store.close()


async def test_calls_whose_answers_never_come_time_out_as_transient(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """On an open socket whose answers stop coming (the connection stays open and silent),
    each call fails with a TransientError once its timeout is up: a call made after one
    that was answered, and calls made together (one timer serves the calls' timeouts,
    moving on to the oldest call still waiting)."""
    async with (
        Proxy(sqlite_service.url) as proxy,
        asyncio.timeout(HANG_GUARD),
        StoreClient(proxy.url, token=tokens.host, timeout=0.5) as client,
    ):
        await client.create_session("sock-late", created_at=_at(0))  # answered
        proxy.mode = "swallow"
        with pytest.raises(TransientError) as info:
            await client.load_session("sock-late")
        assert info.value.operation == "load_session"
        assert "no answer from the store service within 0.5 s" in str(info.value)
        late = await asyncio.gather(
            *(client.load_session_status("sock-late") for _ in range(3)),
            return_exceptions=True,
        )
        assert [type(e) for e in late] == [TransientError] * 3
        assert client._socket is not None
        assert client._socket._pending == {}


async def test_the_client_answers_the_services_pings_and_its_close(tmp_path: Path) -> None:
    """The service pings an open connection and drops one whose client does not answer:
    StoreClient's socket answers each ping, so its connection stays open across them;
    when the service closes it, the next call opens another."""
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "host")
    store = await SQLiteStore.open(str(tmp_path / "ledger.db"))
    state = ServiceState(store, TokenTable.load(tokens))
    config = uvicorn.Config(create_app(state=state), host="127.0.0.1", port=0, lifespan="off",
                            log_level="critical", ws_ping_interval=0.05,
                            ws_ping_timeout=HANG_GUARD)  # fmt: skip
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        await until(lambda: server.started or task.done(), "uvicorn listening")
        port = server.servers[0].sockets[0].getsockname()[1]
        async with StoreClient(f"http://127.0.0.1:{port}", token=token) as client:
            await client.create_session("sock-ping", created_at=_at(0))
            assert client._socket is not None
            connection = client._socket._ws
            sockets = [c for c in server.server_state.connections if hasattr(c, "last_ping_rtt")]
            assert len(sockets) == 1
            await until(lambda: sockets[0].last_ping_rtt > 0, "a ping answered")
            assert (await client.load_session("sock-ping")).id == "sock-ping"
            assert client._socket._ws is connection
            sockets[0].shutdown()  # the service closes it (1012: restarting)
            await until(lambda: client._socket is not None and client._socket._ws is None,
                        "the close seen")  # fmt: skip
            assert (await client.load_session("sock-ping")).id == "sock-ping"
            assert client._socket._ws is not None
            assert client._socket._ws is not connection
    finally:
        server.should_exit = True
        await task
        await store.close()


async def test_large_calls_and_answers_arrive_whole_in_pieces(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """Requests of 300 KB and a page of 1.5 MB cross the socket in many reads at each
    end; each arrives whole, byte for byte."""
    async with StoreClient(sqlite_service.url, token=tokens.host) as client:
        await client.create_session("sock-big", created_at=_at(0))
        run = _run("sock-big-r", "sock-big")
        await client.start_root_run(run.root_start())
        payloads = [b'{"text": "' + bytes([65 + i]) * 300_000 + b'"}' for i in range(5)]
        for i, payload in enumerate(payloads):
            await client.append_run_record(run.record("note", payload, event_key=f"b{i}",
                                                      at=_at(i + 1)))  # fmt: skip
        page = await client.list_run_records("sock-big-r")
        assert [r.payload for r in page.records[1:]] == payloads
        assert client._socket is not None
        assert client._socket._ws is not None  # all on the socket, not over HTTP


async def test_a_token_with_a_line_break_is_not_sent_as_headers(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """A token that carries a line break is no header value: the socket does not write it
    into its upgrade request (where it would end the header and begin another), and the
    call fails as it does over HTTP, whose client refuses such a header."""
    smuggled = f"{tokens.host}\r\nX-Smuggled: 1"
    outcomes = []
    for socket in (True, False):
        async with StoreClient(sqlite_service.url, token=smuggled, socket=socket) as client:
            with pytest.raises(Exception) as info:  # noqa: PT011 (HTTP's client's own error)
                await client.load_session_status("anything")
            outcomes.append(type(info.value))
    assert outcomes[0] is outcomes[1]
