"""A short flood against a real ``agentledger serve``, on SQLite and PostgreSQL.

More writers than the service takes at once (each its own connection), followers
timing records, 200 slow clients trickling headers or bodies, a reader scanning a
large run beside 16 writers, a stream never read: the service keeps every
acknowledged write, sheds with 503 and ``Retry-After`` (StoreClient waits and
retries, so every write is acknowledged in the end), answers nothing else 5xx,
says overloaded on /readyz, closes the slow and the unread, stays within its
memory bound, and serves calls as fast as before once the flood ends. The full
flood, with figures, is ``bench/service_overload.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from pathlib import Path

import msgspec
import pytest

from agentledger.errors import OverloadedError
from agentledger.service.auth import add_token
from agentledger.service.error_codec import decode_error
from tests.service.overload_driver import T0, Plan, run_flood
from tests.service.process import ServiceProcess

PLAN = Plan(
    writers=32, writes=8, followers=60, timed_writes=60, slow_clients=200,
    scan_records=1600, scan_writers=16, unread_streams=1, unread_wait=8, seconds=40,
)  # fmt: skip
OPTIONS = ("--max-calls", "16", "--max-streams", "200", "--client-timeout", "2")
RSS_BOUND = 512 * 2**20
"""The service's memory bound under this flood (bench/service_overload.py measures it)."""


def _flood(db: str, tmp_path: Path, plan: Plan = PLAN) -> None:
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "host")
    with ServiceProcess(db, tokens, options=OPTIONS) as service:
        result = asyncio.run(run_flood(service.url, token, service.pid, plan))
    summary = result.summary()
    assert result.lost == 0, summary
    assert result.writer_errors == [], (result.writer_errors[:5], summary)
    assert result.acknowledged == (plan.writers + plan.scan_writers) * plan.writes + (
        plan.timed_writes
    ), summary
    assert result.shed.get("calls", 0) + result.shed.get("calls_per_token", 0) > 0, summary
    assert result.raw_503 == result.raw_503_retry_after, summary
    assert not [s for s in result.statuses if s >= 500 and s != 503], summary
    assert result.ready_overloaded, summary
    # Each slow client is closed with 408, or shed at once (503) when every call slot of
    # its token is taken; none is served, none left hanging.
    answers = {"headers: 408", "headers: 503", "body: 408", "body: 503"}
    assert set(result.slow_answers) <= answers, summary
    assert sum(result.slow_answers.values()) == plan.slow_clients, summary
    assert result.slow_answers.get("headers: 408", 0) >= plan.slow_clients // 4, summary
    assert result.unread_cut == plan.unread_streams, summary
    assert result.scan_pages == 2 * (plan.scan_records // 100 + 1), summary
    assert 0 < result.rss_peak < RSS_BOUND, summary
    assert result.recovery_seconds >= 0, summary


def test_flood_on_sqlite(tmp_path: Path) -> None:
    _flood(str(tmp_path / "flood.db"), tmp_path)


def test_flood_on_postgres(postgres_dsn: str, tmp_path: Path) -> None:
    # Smaller: each PostgreSQL commit costs more than SQLite's; still past --max-calls.
    plan = dataclasses.replace(PLAN, writers=24, writes=6, followers=40, timed_writes=40)
    _flood(postgres_dsn, tmp_path, plan)


def test_connections_past_the_limit_are_refused_retryably(tmp_path: Path) -> None:
    """Past --max-connections a new connection is answered 503, Retry-After and a typed
    OverloadedError, and closed; once others close, new ones are served again."""
    tokens = tmp_path / "tokens.json"
    add_token(tokens, "host")
    with ServiceProcess(str(tmp_path / "c.db"), tokens, options=("--max-connections", "4")) as svc:
        host, port = svc.url.removeprefix("http://").rsplit(":", 1)
        held = [socket.create_connection((host, int(port))) for _ in range(4)]
        try:
            with socket.create_connection((host, int(port))) as extra:
                extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = _read_all(extra)
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503"), answer
            assert b"retry-after: 1" in head.lower(), answer
            error = decode_error(body)
            assert isinstance(error, OverloadedError), answer
            assert error.retry_after == 1.0
            assert "4 connections" in error.reason
        finally:
            for sock in held:
                sock.close()
        for _ in range(50):  # the service notices the closed ones as it reads them
            with socket.create_connection((host, int(port))) as again:
                again.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if _read_all(again).startswith(b"HTTP/1.1 200"):
                    break
        else:
            pytest.fail("connections were still refused after the others closed")
        with socket.create_connection((host, int(port))) as large:  # headers past 64 KiB
            large.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: y\r\n" * 7000)
            assert _read_all(large).startswith(b"HTTP/1.1 431"), "headers past 64 KiB served"


def _read_all(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_overloaded_error_travels_typed() -> None:
    """The shed answer's body is the error itself, fields and all."""
    from agentledger.service.admission import overloaded_answer

    headers, body = overloaded_answer(OverloadedError("x", operation="append", retry_after=2.5))
    assert (b"retry-after", b"2") in headers
    error = decode_error(body)
    assert isinstance(error, OverloadedError)
    assert (error.reason, error.operation, error.retry_after) == ("x", "append", 2.5)
    assert msgspec.json.decode(body)["error"]["type"] == "OverloadedError"


def _scope(method: str, path: str, token: str, length: int | None = None) -> dict[str, object]:
    headers = [(b"authorization", f"Bearer {token}".encode())]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    return {"type": "http", "method": method, "path": path, "headers": headers}


def test_admission_counts_each_limit_and_frees_on_release() -> None:
    """Calls in total and per token, streams, body bytes held: each limit sheds past it,
    names itself, and a released slot is taken again; the probes are never shed."""
    from agentledger.service.admission import Admission, OverloadLimits, Ticket

    limits = OverloadLimits(max_calls=3, max_calls_per_token=2, max_streams=1,
                            max_streams_per_token=1, max_body_bytes=100)  # fmt: skip
    admission = Admission(limits, body_cap=1000)
    a1 = admission.admit(_scope("POST", "/v1/append_run_record", "a", 10))
    a2 = admission.admit(_scope("POST", "/v1/append_run_record", "a", 10))
    a3 = admission.admit(_scope("POST", "/v1/append_run_record", "a", 10))
    assert isinstance(a1, Ticket)
    assert isinstance(a2, Ticket)
    assert isinstance(a3, OverloadedError)
    assert "for this token" in a3.reason
    assert a3.operation == "append_run_record"
    big = admission.admit(_scope("POST", "/v1/append_run_record", "b", 90))
    assert isinstance(big, OverloadedError)
    assert "bytes of request bodies" in big.reason
    unsized = admission.admit(_scope("POST", "/v1/calls", "b"))  # counted at the body cap
    assert isinstance(unsized, OverloadedError)
    b1 = admission.admit(_scope("POST", "/v1/load_run", "b", 5))
    assert isinstance(b1, Ticket)
    full = admission.admit(_scope("GET", "/ui", "c"))
    assert isinstance(full, OverloadedError)
    assert "3 calls" in full.reason
    assert admission.overloaded()
    for probe in ("/healthz", "/readyz", "/metrics"):
        assert isinstance(admission.admit(_scope("GET", probe, "c")), Ticket)
    s1 = admission.admit(_scope("GET", "/v1/runs/r1/records", "c"))
    assert isinstance(s1, Ticket)
    s2 = admission.admit(_scope("GET", "/v1/sessions/s/records", "d"))
    assert isinstance(s2, OverloadedError)
    assert "follow streams" in s2.reason
    a1.release()
    a1.release()  # a second release gives nothing back twice
    assert isinstance(admission.admit(_scope("POST", "/v1/load_run", "c", 5)), Ticket)
    assert isinstance(admission.admit(_scope("POST", "/v1/load_run", "c", 5)), OverloadedError)
    assert admission.calls == 3
    assert admission.body_bytes == 20
    assert admission.shed == {"calls_per_token": 1, "body_bytes": 2, "calls": 2, "streams": 1}


def test_a_shed_group_of_calls_is_sent_again_whole(tmp_path: Path) -> None:
    """Calls a StoreClient groups into one request, shed (every slot of the token taken by a
    client trickling its body), are sent again as the same group after Retry-After, and all
    succeed once the slot is free: the members do not each go alone."""
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "host")
    options = ("--max-calls", "2", "--client-timeout", "2")  # one call at a time per token
    with ServiceProcess(str(tmp_path / "g.db"), tokens, options=options) as service:
        host, port = service.url.removeprefix("http://").rsplit(":", 1)

        async def scenario() -> str:
            from agentledger.service import StoreClient
            from agentledger.storage import RecordBuilder, RunStart

            # over HTTP: groups are how a client without the socket sends calls at once
            async with StoreClient(service.url, token=token, socket=False) as client:
                await client.create_session("g", created_at=T0)
                run = RecordBuilder(RunStart(run_id="g1", agent_id="a", session_id="g",
                                             started_at=T0))  # fmt: skip
                await client.start_root_run(run.root_start())
                slow = socket.create_connection((host, int(port)))
                head = f"POST /v1/append_run_record HTTP/1.1\r\nAuthorization: Bearer {token}"
                slow.sendall(head.encode() + b"\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
                try:
                    for _ in range(100):  # until the slow client holds the token's one slot
                        if await asyncio.to_thread(_post_status, service.url, token) == 503:
                            break
                    records = [run.record("note", b"{}", event_key=f"k{i}", at=T0)
                               for i in range(10)]  # fmt: skip
                    await asyncio.gather(*(client.append_run_record(r) for r in records))
                finally:
                    slow.close()
                page = await client.list_run_records("g1")
                assert {f"k{i}" for i in range(10)} <= {r.event_key for r in page.records}
            return await _metrics_text(service.url)

        text = asyncio.run(scenario())
    assert 'agentledger_shed_total{limit="calls_per_token"}' in text
    assert 'agentledger_requests_total{method="calls",status="200"} 1.0' in text, text
    assert 'agentledger_requests_total{method="append_run_record",status="200"} 10.0' in text


def _post_status(url: str, token: str) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"{url}/v1/load_session_status", data=b'{"session_id": "g"}',
        headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


async def _metrics_text(url: str) -> str:
    import aiohttp

    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as answer:
        return await answer.text()


def test_a_body_too_slow_is_counted_as_the_408_its_client_saw(tmp_path: Path) -> None:
    """A request whose body does not arrive within --client-timeout is answered 408 by its
    connection and closed; /metrics counts it as 408, not as a 503 of a caller gone away."""
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "host")
    options = ("--client-timeout", "1")
    with ServiceProcess(str(tmp_path / "b.db"), tokens, options=options) as service:
        host, port = service.url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port))) as slow:
            head = f"POST /v1/append_run_record HTTP/1.1\r\nAuthorization: Bearer {token}"
            slow.sendall(head.encode() + b"\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            answer = _read_all(slow)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        text = asyncio.run(_metrics_text(service.url))
    assert 'agentledger_requests_total{method="append_run_record",status="408"} 1.0' in text, text
    assert 'method="append_run_record",status="503"' not in text, text
    assert 'agentledger_shed_total{limit="slow_clients"} 1.0' in text, text


def test_unread_streams_past_the_backlog_budget_are_cut_loose(tmp_path: Path) -> None:
    """serve --max-backlog-bytes: three follow streams whose clients read nothing hold,
    together, more waiting records than the budget; the service cuts the slowest loose
    (counted as backlog_budget) and keeps serving."""
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "host")
    options = ("--max-backlog-bytes", str(256 * 1024))
    with ServiceProcess(str(tmp_path / "k.db"), tokens, options=options) as service:
        host, port = service.url.removeprefix("http://").rsplit(":", 1)

        async def scenario() -> str:
            from agentledger.service import StoreClient
            from agentledger.storage import RecordBuilder, RunStart

            async with StoreClient(service.url, token=token) as client:
                await client.create_session("k", created_at=T0)
                run = RecordBuilder(RunStart(run_id="k1", agent_id="a", session_id="k",
                                             started_at=T0))  # fmt: skip
                await client.start_root_run(run.root_start())
                unread = []
                for _ in range(3):
                    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    sock.connect((host, int(port)))
                    sock.sendall(f"GET /v1/runs/k1/records HTTP/1.1\r\nHost: x\r\n"
                                 f"Authorization: Bearer {token}\r\n\r\n".encode())  # fmt: skip
                    unread.append(sock)
                try:
                    pad = b'{"pad": "' + b"z" * 16_000 + b'"}'
                    for i in range(200):
                        await client.append_run_record(run.record("note", pad, event_key=f"k{i}",
                                                                  at=T0))  # fmt: skip
                        text = await _metrics_text(service.url)
                        if 'agentledger_shed_total{limit="backlog_budget"}' in text:
                            return text
                    return await _metrics_text(service.url)
                finally:
                    for sock in unread:
                        sock.close()

        text = asyncio.run(scenario())
    assert 'agentledger_shed_total{limit="backlog_budget"}' in text, text
    assert 'limit="stream_backlog"' not in text, text
