"""[S6] The service's metrics, counted in plain numbers, read as Prometheus text."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from agentledger.service.metrics import ServiceMetrics


def _samples(metrics: ServiceMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.render().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_counts_latency_buckets_and_requests_in_flight() -> None:
    """A latency on a bucket's bound counts in that bucket (as prometheus_client's own
    histogram does), one past the last bound only in +Inf; counts are per method and
    status; in-flight is what it is when read."""
    metrics = ServiceMetrics()
    for seconds in (0.0005, 0.0007, 0.001, 0.02, 11.0):
        metrics.observe("append_run_record", 200, seconds)
    metrics.observe("append_run_record", 409, 0.002)
    metrics.in_flight += 2
    got = _samples(metrics)
    method = ("method", "append_run_record")

    def bucket(le: str) -> float:
        return got[("agentledger_request_seconds_bucket", (("le", le), method))]

    assert bucket("0.0005") == 1
    assert bucket("0.001") == 3
    assert bucket("0.0025") == 4
    assert bucket("0.025") == 5
    assert bucket("10.0") == 5
    assert bucket("+Inf") == 6
    assert got[("agentledger_request_seconds_count", (method,))] == 6
    assert abs(got[("agentledger_request_seconds_sum", (method,))] - 11.0242) < 1e-9
    assert got[("agentledger_requests_total", (method, ("status", "200")))] == 5
    assert got[("agentledger_requests_total", (method, ("status", "409")))] == 1
    assert got[("agentledger_requests_in_flight", ())] == 2
    assert ServiceMetrics().render().count(b"agentledger_requests_total{") == 0  # apart
