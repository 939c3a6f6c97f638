"""[S4] Bearer tokens, roles and refusals: 401 without a token, 403 for the wrong role.

Every refusal is checked against the store: a dump taken through a host
client before and after the refused call must be equal.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest

from agentledger.errors import AccessDeniedError, SessionNotFoundError
from agentledger.service import StoreClient
from agentledger.service.error_codec import decode_error
from agentledger.service.wire import METHODS, Role
from agentledger.storage import RecordBuilder, RunStart, RunStatus, SessionStatus
from agentledger.storage.conformance import dump_store
from tests.service.process import ServiceProcess, Tokens

AT = datetime(2026, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)


@pytest.fixture
async def host(sqlite_service: ServiceProcess, tokens: Tokens) -> AsyncIterator[StoreClient]:
    async with StoreClient(sqlite_service.url, token=tokens.host) as client:
        yield client


def test_the_token_file_holds_only_hashes(tokens: Tokens) -> None:
    """[S4] tokens are hashed at rest (sha256), each with its role."""
    text = tokens.path.read_text()
    entries = json.loads(text)["tokens"]
    roles = {"host": tokens.host, "worker": tokens.worker, "reader": tokens.reader}
    for role, token in roles.items():
        assert token not in text
        digest = hashlib.sha256(token.encode()).hexdigest()
        assert {"sha256": digest, "role": role, "labels": {}} in entries


@pytest.mark.parametrize("token", ["", "not-a-token"])
async def test_no_or_unknown_token_is_401_and_changes_nothing(
    sqlite_service: ServiceProcess, host: StoreClient, token: str
) -> None:
    """[S4] no token (or an unknown one): 401, and the session is not created."""
    before = await dump_store(host, ["auth-anon"], [])
    async with StoreClient(sqlite_service.url, token=token) as anonymous:
        with pytest.raises(AccessDeniedError) as info:
            await anonymous.create_session("auth-anon", created_at=AT)
    assert (info.value.status, info.value.operation) == (401, "create_session")
    assert await dump_store(host, ["auth-anon"], []) == before
    with pytest.raises(SessionNotFoundError):
        await host.load_session("auth-anon")


async def test_a_worker_token_cannot_end_a_session(
    sqlite_service: ServiceProcess, tokens: Tokens, host: StoreClient
) -> None:
    """[S4] [D1] session administration is the host's: a worker gets 403, the session stays."""
    await host.create_session("auth-worker", created_at=AT)
    before = await dump_store(host, ["auth-worker"], [])
    async with StoreClient(sqlite_service.url, token=tokens.worker) as worker:
        with pytest.raises(AccessDeniedError) as info:
            await worker.end_session("auth-worker", ended_at=AT)
        assert (info.value.status, info.value.operation) == (403, "end_session")
        # ... while the Store methods are the worker's own.
        run = RecordBuilder(RunStart(run_id="auth-worker-run", agent_id="a",
                                     session_id="auth-worker", started_at=AT))  # fmt: skip
        started = await worker.start_root_run(run.root_start())
        assert started.started.inserted
    after = await dump_store(host, ["auth-worker"], [])
    assert after["session:auth-worker"] == before["session:auth-worker"]
    assert await host.load_session_status("auth-worker") is SessionStatus.ACTIVE


async def test_a_reader_token_cannot_write_anything(
    sqlite_service: ServiceProcess, tokens: Tokens, host: StoreClient
) -> None:
    """[S4] a reader may load and list, and every write method answers it 403."""
    await host.create_session("auth-reader", created_at=AT)
    run = RecordBuilder(RunStart(run_id="auth-reader-run", agent_id="a",
                                 session_id="auth-reader", started_at=AT))  # fmt: skip
    await host.start_root_run(run.root_start())
    before = await dump_store(host, ["auth-reader"], ["auth-reader-run"])
    async with StoreClient(sqlite_service.url, token=tokens.reader) as reader:
        assert (await reader.load_run("auth-reader-run")).run_id == "auth-reader-run"
        assert len((await reader.list_run_records("auth-reader-run")).records) == 1
        with pytest.raises(AccessDeniedError) as info:
            await reader.append_run_record(run.record("note", b"{}", event_key="n1", at=AT))
        assert info.value.status == 403
        with pytest.raises(AccessDeniedError):
            await reader.record_run_terminal(run.terminal(RunStatus.COMPLETED, at=AT))
        with pytest.raises(AccessDeniedError):
            await reader.end_session("auth-reader", ended_at=AT)
    writes = [m for m in METHODS if m.writes]
    assert {m.name for m in writes} >= {"create_session", "purge_session", "start_root_run"}
    async with httpx.AsyncClient(base_url=sqlite_service.url) as http:
        for method in writes:
            assert Role.READER not in method.roles
            answer = await http.post(
                method.route, content=b"{}", headers={"authorization": f"Bearer {tokens.reader}"}
            )
            assert answer.status_code == 403, method.name
            error = decode_error(answer.content)
            assert isinstance(error, AccessDeniedError)
            assert error.operation == method.name
    assert await dump_store(host, ["auth-reader"], ["auth-reader-run"]) == before
