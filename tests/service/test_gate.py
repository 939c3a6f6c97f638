"""The service's one gate (stopping, token, role) and its one way out (typed error to
answer, metrics), on a real service state over a SQLite file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentledger.errors import AccessDeniedError, NotFoundError, TransientError
from agentledger.service import Role, TokenTable, add_token
from agentledger.service.error_codec import decode_error
from agentledger.service.gate import admit, gate, json_refusal, metered
from agentledger.service.state import ServiceState
from agentledger.storage.sqlite import SQLiteStore

HOSTS = frozenset({Role.HOST})


@pytest.fixture
async def state(tmp_path: Path) -> AsyncIterator[tuple[ServiceState, str, str]]:
    """A service state, a reader's token and a host's."""
    tokens = tmp_path / "tokens.json"
    reader, host = add_token(tokens, "reader"), add_token(tokens, "host")
    store = await SQLiteStore.open(str(tmp_path / "ledger.db"))
    try:
        yield ServiceState(store, TokenTable.load(tokens)), reader, host
    finally:
        await store.close()


async def test_the_gate_checks_stopping_then_the_token_then_the_role(
    state: tuple[ServiceState, str, str],
) -> None:
    service, reader, host = state
    assert gate(service, "end_session", f"Bearer {host}", HOSTS).role == Role.HOST
    with pytest.raises(AccessDeniedError) as unknown:
        gate(service, "end_session", "Bearer nobody", HOSTS)
    assert unknown.value.status == 401
    with pytest.raises(AccessDeniedError) as role:
        gate(service, "end_session", f"Bearer {reader}", HOSTS)
    assert role.value.status == 403
    assert role.value.reason == "a reader token may not call end_session"
    with pytest.raises(AccessDeniedError, match="may not look around"):
        gate(service, "x", f"Bearer {reader}", HOSTS, purpose="look around")
    service.stopping = True
    with pytest.raises(TransientError, match="shutting down"):
        gate(service, "end_session", "Bearer nobody", HOSTS)  # before the token is read
    principal = service.tokens.authenticate(f"Bearer {host}", "end_session")
    with pytest.raises(TransientError, match="shutting down"):
        admit(service, principal, "end_session", HOSTS)  # an admitted caller too


async def test_every_answer_is_counted_once_and_a_failure_is_a_typed_error(
    state: tuple[ServiceState, str, str],
) -> None:
    service, _, _ = state

    async def fine() -> tuple[int, bytes, str]:
        return 200, b"{}", "application/json"

    async def missing() -> tuple[int, bytes, str]:
        raise NotFoundError(kind="run", id="r1")

    async def broken() -> tuple[int, bytes, str]:
        raise RuntimeError("a bug")

    def status(answer: tuple[int, bytes, str]) -> int:
        return answer[0]

    assert await metered(service, "load_run", fine, json_refusal, status) == (
        200, b"{}", "application/json",
    )  # fmt: skip
    code, body, _ = await metered(service, "load_run", missing, json_refusal, status)
    assert code == 404
    assert isinstance(decode_error(body), NotFoundError)
    code, body, _ = await metered(service, "load_run", broken, json_refusal, status)
    failure = decode_error(body)
    assert code == 500
    assert isinstance(failure, TransientError)
    assert "internal error in the store service" in str(failure)
    assert service.metrics.in_flight == 0
    text = service.metrics.render().decode()
    for code in (200, 404, 500):
        line = f'agentledger_requests_total{{method="load_run",status="{code}"}} 1.0'
        assert line in text
