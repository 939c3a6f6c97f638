"""[S2] What the framework refuses before any store method runs is a typed error too.

An unknown route is a ``NotFoundError`` of kind ``route``, a wrong method a
``ValidationError`` naming the method: a client of another version hears why,
never a bare HTTP status.
"""

from __future__ import annotations

import httpx
import pytest

from agentledger.errors import NotFoundError, ValidationError
from agentledger.service.error_codec import decode_error
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
