"""[G2] Through the service, a cascading purge is a host's, and a scoped host's only within
its scope: a copy held by a session outside it refuses the purge, which deletes nothing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import msgspec
import pytest

from agentledger.errors import AccessDeniedError
from agentledger.service import StoreClient
from agentledger.storage import CopiedFrom, RecordBuilder, RunStart, RunStatus
from agentledger.storage.derivation import HISTORY_COPIED
from tests.service.process import ServiceProcess, Tokens

AT = datetime(2026, 1, 1, tzinfo=UTC)


async def _copy(host: StoreClient, source: str, holder: str, holder_labels: dict[str, str]) -> None:
    """``source`` (tenant acme, ended) and ``holder`` (ended) holding a copy of its run."""
    await host.create_session(source, created_at=AT, labels={"tenant": "acme"})
    run = RecordBuilder(RunStart(run_id=f"{source}-r", agent_id="a", session_id=source,
                                 started_at=AT))  # fmt: skip
    await host.start_root_run(run.root_start())
    await host.record_run_terminal(run.terminal(RunStatus.COMPLETED, at=AT))
    await host.end_session(source, ended_at=AT)
    await host.create_session(holder, created_at=AT, labels=holder_labels)
    fork = RecordBuilder(RunStart(run_id=f"{holder}-r", agent_id="a", session_id=holder,
                                  started_at=AT))  # fmt: skip
    copied = CopiedFrom(session_id=source, run_id=f"{source}-r", through="2")
    record = fork.record(HISTORY_COPIED, copied.encode(), event_key="copied", at=AT)
    await host.start_root_run(msgspec.structs.replace(fork.root_start(), records=(record,)))
    await host.record_run_terminal(fork.terminal(RunStatus.COMPLETED, at=AT))
    await host.end_session(holder, ended_at=AT)


async def test_a_scoped_host_cascades_only_within_its_scope(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    ns = uuid.uuid4().hex[:8]
    async with (
        StoreClient(sqlite_service.url, token=tokens.host) as host,
        StoreClient(sqlite_service.url, token=tokens.acme["host"]) as acme,
        StoreClient(sqlite_service.url, token=tokens.acme["reader"]) as reader,
    ):
        await _copy(host, f"{ns}-a", f"{ns}-globex", {"tenant": "globex"})
        with pytest.raises(AccessDeniedError):
            await acme.purge_session(f"{ns}-a", cascade=True)
        assert (await host.load_session(f"{ns}-a")).id == f"{ns}-a"  # nothing was purged
        with pytest.raises(AccessDeniedError):  # a reader never purges
            await reader.purge_session(f"{ns}-a", cascade=True)
        await _copy(host, f"{ns}-b", f"{ns}-acme", {"tenant": "acme"})
        receipt = await acme.purge_session(f"{ns}-b", cascade=True)
        assert receipt.cascaded == [f"{ns}-acme"]
        kept = await host.purge_session(f"{ns}-a")  # unscoped, no cascade: the copy remains
        assert [c.session_id for c in kept.derived] == [f"{ns}-globex"]
