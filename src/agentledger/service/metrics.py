"""Prometheus metrics of the store service: requests and latency per method [S6]."""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

__all__ = ["CONTENT_TYPE_LATEST", "ServiceMetrics"]

# Store calls take from well under a millisecond (SQLite, loopback) to seconds (a lock).
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ServiceMetrics:
    """One registry per app, so several services in one process keep apart."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "agentledger_requests",
            "Store service requests by method and HTTP status.",
            ("method", "status"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "agentledger_request_seconds",
            "Store service request latency by method.",
            ("method",),
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "agentledger_requests_in_flight",
            "Store service requests being handled now.",
            registry=self.registry,
        )

        self._children: dict[tuple[str, int], tuple[Counter, Histogram]] = {}

    def observe(self, method: str, status: int, seconds: float) -> None:
        """Count one answered request and its latency."""
        children = self._children.get((method, status))
        if children is None:  # a label lookup per call costs more than the count itself
            children = (self.requests.labels(method, str(status)), self.latency.labels(method))
            self._children[(method, status)] = children
        children[0].inc()
        children[1].observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
