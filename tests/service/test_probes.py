"""[S6] /healthz, /readyz, /openapi.json and /metrics of a real service."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from agentledger.service import StoreClient
from agentledger.service.wire import METHODS
from tests.service.process import ServiceProcess, Tokens


async def test_probes_answer_without_a_token(sqlite_service: ServiceProcess) -> None:
    async with httpx.AsyncClient(base_url=sqlite_service.url) as http:
        assert (await http.get("/healthz")).status_code == 200
        ready = await http.get("/readyz")
        assert (ready.status_code, ready.text) == (200, "ready\n")


async def test_openapi_describes_every_method(sqlite_service: ServiceProcess) -> None:
    """[S6] one POST per store method, with request and response schemas; the follow GETs."""
    async with httpx.AsyncClient(base_url=sqlite_service.url) as http:
        document = (await http.get("/openapi.json")).json()
    assert document["openapi"].startswith("3.1")
    paths = document["paths"]
    for method in METHODS:
        operation = paths[method.route]["post"]
        assert operation["operationId"] == method.name
        assert operation["requestBody"]["content"]["application/json"]["schema"]
        assert operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert "get" in paths["/v1/runs/{run_id}/records"]
    assert "get" in paths["/v1/sessions/{session_id}/records"]
    assert "Record" in document["components"]["schemas"]


async def test_metrics_count_requests_and_latency_per_method(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """[S6] a Prometheus counter per method and status, a latency histogram per method."""
    async with StoreClient(sqlite_service.url, token=tokens.host) as client:
        for i in range(3):
            await client.create_session(f"metrics-{i}", created_at=datetime(2026, 1, 1, tzinfo=UTC))
        async with httpx.AsyncClient(base_url=sqlite_service.url) as http:
            text = (await http.get("/metrics")).text
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert samples['agentledger_requests_total{method="create_session",status="200"}'] >= 3
    assert samples['agentledger_request_seconds_count{method="create_session"}'] >= 3
    assert 'agentledger_request_seconds_bucket{le="0.005",method="create_session"}' in samples
    assert samples["agentledger_requests_in_flight"] == 0


async def test_metrics_total_usage_per_tenant(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """[G3] one gauge per counter and tenant, read from the store's counters when asked."""
    from agentledger.storage.conformance import World

    async with StoreClient(sqlite_service.url, token=tokens.host) as client:
        world = World(client)
        tenant = f"usage-{world.ns}"
        for name in ("a", "b"):
            sid = await world.session(name, labels={"tenant": tenant})
            root = await world.root(f"{name}-root", session=sid)
            await client.append_run_record(world.note(root, "n"))
        (kept,) = await client.usage_by_label("tenant", labels={"tenant": tenant})
        async with httpx.AsyncClient(base_url=sqlite_service.url) as http:
            text = (await http.get("/metrics")).text
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    series = f'{{label="tenant",value="{tenant}"}}'
    assert samples[f"agentledger_usage_sessions{series}"] == 2
    assert samples[f"agentledger_usage_runs{series}"] == 2
    assert samples[f"agentledger_usage_records{series}"] == kept.usage.records
    assert samples[f"agentledger_usage_bytes{series}"] == kept.usage.bytes
    assert kept.usage.records == 4  # each root's run_started and note
