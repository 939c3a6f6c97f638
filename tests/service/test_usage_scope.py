"""[G3] Usage per label through the service: a label-scoped token's totals are its scope's.

The per-label totals the store keeps cover every tenant; a token scoped to tenant=acme
asking for them grouped by tenant, or for one total, is answered for acme's sessions
alone, grouping by another label stays within acme, and asking for another tenant's
totals is a 403.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agentledger.errors import AccessDeniedError
from agentledger.service import StoreClient
from agentledger.storage import RecordBuilder, RunStart, UsageTotals
from agentledger.storage.accounting import add
from tests.service.process import ServiceProcess, Tokens

T0 = datetime(2026, 9, 1, tzinfo=UTC)
SESSIONS = {  # id -> (tenant, tier, notes)
    "u-acme-1": ("acme", "gold", 1),
    "u-acme-2": ("acme", "free", 2),
    "u-acme-3": ("acme", "gold", 3),
    "u-globex-1": ("globex", "gold", 4),
}


async def _fill(host: StoreClient) -> dict[str, UsageTotals]:
    usage = {}
    for sid, (tenant, tier, notes) in SESSIONS.items():
        await host.create_session(sid, created_at=T0, labels={"tenant": tenant, "tier": tier})
        run = RecordBuilder(RunStart(run_id=f"{sid}-r", agent_id="a", session_id=sid,
                                     started_at=T0))  # fmt: skip
        await host.start_root_run(run.root_start())
        for i in range(notes):
            await host.append_run_record(run.record("note", b'{"n":1}', event_key=f"n{i}", at=T0))
        usage[sid] = await host.load_session_usage(sid)
    return usage


def _total(usage: dict[str, UsageTotals], **wanted: str) -> tuple[int, UsageTotals]:
    chosen = [
        sid
        for sid, (tenant, tier, _) in SESSIONS.items()
        if wanted.get("tenant", tenant) == tenant and wanted.get("tier", tier) == tier
    ]
    total = UsageTotals()
    for sid in chosen:
        total = add(total, usage[sid])
    return len(chosen), total


async def test_a_scoped_token_reads_its_tenants_totals_alone(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    async with StoreClient(sqlite_service.url, token=tokens.host) as host:
        usage = await _fill(host)
        every = await host.usage_by_label("tenant")
        assert [(r.value, r.sessions) for r in every] == [("acme", 3), ("globex", 1)]
    async with StoreClient(sqlite_service.url, token=tokens.acme["host"]) as acme:
        (row,) = await acme.usage_by_label("tenant")
        assert (row.value, row.sessions, row.usage) == ("acme", *_total(usage, tenant="acme"))
        assert row == every[0]
        (one,) = await acme.usage_by_label()
        assert (one.sessions, one.usage) == _total(usage, tenant="acme")
        tiers = await acme.usage_by_label("tier")
        assert [(r.value, r.sessions, r.usage) for r in tiers] == [
            ("free", *_total(usage, tenant="acme", tier="free")),
            ("gold", *_total(usage, tenant="acme", tier="gold")),
        ]
        with pytest.raises(AccessDeniedError) as refused:
            await acme.usage_by_label("tenant", labels={"tenant": "globex"})
        assert refused.value.status == 403
