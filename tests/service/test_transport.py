"""[S3] Transport failures are TransientError, and an exact retry after a lost reply is safe.

A real loopback proxy sits between the client and the service: it loses a
reply after the service committed, answers 502, or stalls.
"""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime

import pytest

from agentledger.errors import SessionNotFoundError, TransientError, ValidationError
from agentledger.service import StoreClient
from agentledger.storage import AppendResult, RecordBuilder, RunStart, SessionStatus
from tests.service.process import ServiceProcess, Tokens
from tests.service.proxy import Proxy

AT = datetime(2026, 5, 2, 9, 30, 0, 5000, tzinfo=UTC)


async def test_a_lost_reply_then_the_exact_retry_returns_the_original_ids(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """[S3] [X1] the call committed, its reply was lost: TransientError, then the retry
    answers with the ids of the first write (inserted=False) and stores nothing twice."""
    async with (
        Proxy(sqlite_service.url) as proxy,
        StoreClient(proxy.url, token=tokens.host) as client,
        StoreClient(sqlite_service.url, token=tokens.host) as direct,
    ):
        await client.create_session("lost-s", created_at=AT)
        run = RecordBuilder(RunStart(run_id="lost-r", agent_id="a", session_id="lost-s",
                                     started_at=AT))  # fmt: skip
        start = run.root_start()

        proxy.drop_next_reply()
        with pytest.raises(TransientError) as info:
            await client.start_root_run(start)
        assert info.value.operation == "start_root_run"
        assert proxy.dropped == 1
        assert (await direct.load_run("lost-r")).run_id == "lost-r"  # it did commit

        retry = await client.start_root_run(start)
        assert retry.started == AppendResult(id="1", inserted=False,
                                             session_status=SessionStatus.ACTIVE)  # fmt: skip

        note = run.record("planner_note", b'{"n": 1}', event_key="note-1", at=AT)
        proxy.drop_next_reply()
        with pytest.raises(TransientError):
            await client.append_run_record(note)
        assert proxy.dropped == 2
        again = await client.append_run_record(note)
        assert (again.id, again.inserted) == ("2", False)
        page = await direct.list_run_records("lost-r")
        assert [(r.id, r.event_key) for r in page.records] == [("1", "run_started"),
                                                               ("2", "note-1")]  # fmt: skip


async def test_a_502_without_a_typed_body_is_transient(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """[S3] a 5xx from something in front of the service is TransientError."""
    async with Proxy(sqlite_service.url) as proxy:
        proxy.mode = "bad_gateway"
        async with StoreClient(proxy.url, token=tokens.host) as client:
            with pytest.raises(TransientError) as info:
                await client.load_session_status("anything")
    assert info.value.operation == "load_session_status"
    assert "502" in str(info.value)


async def test_a_timeout_is_transient(sqlite_service: ServiceProcess, tokens: Tokens) -> None:
    """[S3] no answer within the client's timeout: TransientError."""
    async with Proxy(sqlite_service.url) as proxy:
        proxy.mode = "stall"
        async with StoreClient(proxy.url, token=tokens.host, timeout=0.3) as client:
            with pytest.raises(TransientError) as info:
                await client.load_run("r")
    assert info.value.operation == "load_run"


async def test_a_refused_connection_is_transient(tokens: Tokens) -> None:
    """[S3] nothing listening: TransientError, not an OSError."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with StoreClient(f"http://127.0.0.1:{port}", token=tokens.host) as client:
        with pytest.raises(TransientError) as info:
            await client.create_session("nobody", created_at=AT)
    assert info.value.operation == "create_session"


async def test_proxy_settings_of_the_environment_are_not_used(
    sqlite_service: ServiceProcess, tokens: Tokens, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client talks to the service it was given, not to a proxy the environment names."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{probe.getsockname()[1]}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, nowhere)
        monkeypatch.setenv(name.lower(), nowhere)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with StoreClient(sqlite_service.url, token=tokens.host) as client:
        created = await client.create_session("no-proxy-s", created_at=AT)
    assert created.id == "no-proxy-s"


async def test_a_redirect_is_refused_not_followed(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """Something in front of the service answering a redirect is not an agentledger service:
    the call is refused, and nothing is sent to where it points."""

    async def redirect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        path = request.split(b" ", 2)[1].decode()
        writer.write(
            b"HTTP/1.1 307 Temporary Redirect\r\nLocation: "
            + (sqlite_service.url + path).encode()
            + b"\r\nContent-Length: 0\r\n\r\n"
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(redirect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with (
            StoreClient(f"http://127.0.0.1:{port}", token=tokens.host) as client,
            StoreClient(sqlite_service.url, token=tokens.host) as direct,
        ):
            with pytest.raises(ValidationError, match="HTTP 307"):
                await client.create_session("redirected-s", created_at=AT)
            with pytest.raises(SessionNotFoundError):
                await direct.load_session("redirected-s")
    finally:
        server.close()
        await server.wait_closed()
