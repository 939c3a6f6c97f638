"""[S2] What the framework refuses before any store method runs is a typed error too.

An unknown route is a ``NotFoundError`` of kind ``route``, a wrong method a
``ValidationError`` naming the method: a client of another version hears why,
never a bare HTTP status.
"""

from __future__ import annotations

import httpx
import msgspec
import pytest

from agentledger.errors import NotFoundError, SessionNotFoundError, ValidationError
from agentledger.service.error_codec import decode_error
from agentledger.storage import Session
from tests.service.process import ServiceProcess, Tokens

ROUTES = [
    ("POST", "/v1/no_such_method", 404, NotFoundError),
    ("GET", "/nothing/here", 404, NotFoundError),
    ("GET", "/v1/runs/x/not-records", 404, NotFoundError),
    ("GET", "/v1/load_run", 405, ValidationError),
    ("PUT", "/v1/create_session", 405, ValidationError),
    ("DELETE", "/v1/runs/x/records", 405, ValidationError),
    ("POST", "/healthz", 405, ValidationError),
]


@pytest.mark.parametrize(("method", "path", "status", "error"), ROUTES)
async def test_the_frameworks_refusals_are_typed(
    sqlite_service: ServiceProcess,
    tokens: Tokens,
    method: str,
    path: str,
    status: int,
    error: type[Exception],
) -> None:
    headers = {"Authorization": f"Bearer {tokens.host}"}
    async with httpx.AsyncClient(base_url=sqlite_service.url, headers=headers) as http:
        answer = await http.request(method, path, content=b"{}")
    assert answer.status_code == status
    typed = decode_error(answer.content)
    assert type(typed) is error, answer.text
    if isinstance(typed, NotFoundError):
        assert (typed.kind, typed.id) == ("route", f"{method} {path}")
    if isinstance(typed, ValidationError):
        assert (typed.field, typed.got) == ("method", method)


async def test_results_come_as_msgpack_to_who_asks_and_errors_as_json(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """A result is JSON unless MessagePack is asked for; a typed error is JSON either way."""
    headers = {"Authorization": f"Bearer {tokens.host}"}
    created = b'{"session_id": "packed-s", "created_at": "2026-06-01T00:00:00Z"}'
    asked = b'{"session_id": "packed-s"}'
    async with httpx.AsyncClient(base_url=sqlite_service.url, headers=headers) as http:
        assert (await http.post("/v1/create_session", content=created)).status_code == 200
        plain = await http.post("/v1/load_session", content=asked)
        packed = await http.post(
            "/v1/load_session", content=asked, headers={"Accept": "application/msgpack"}
        )
        missing = await http.post(
            "/v1/load_session",
            content=b'{"session_id": "packed-none"}',
            headers={"Accept": "application/msgpack"},
        )
    assert plain.headers["content-type"] == "application/json"
    assert packed.headers["content-type"] == "application/msgpack"
    assert msgspec.msgpack.decode(packed.content, type=Session) == msgspec.json.decode(
        plain.content, type=Session
    )
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/json"
    assert isinstance(decode_error(missing.content), SessionNotFoundError)
