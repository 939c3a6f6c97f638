"""Prometheus metrics of the store service: requests and latency per method [S6], and what
the sessions of each value of one label (a tenant) hold [G3].

Counted in plain Python numbers on the event loop (every call runs there) and turned into
Prometheus metrics only when ``/metrics`` is read: prometheus_client's own counter,
histogram and gauge take a lock per update, which cost ~25 us of server CPU per call.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from agentledger.storage.accounting import LabelUsage

__all__ = ["CONTENT_TYPE_LATEST", "ServiceMetrics"]

_USAGE = (
    ("sessions", "Sessions"),
    ("bytes", "Payload bytes as stored in the records of sessions"),
    ("records", "Records of sessions"),
    ("runs", "Runs of sessions"),
    ("input_tokens", "Model input tokens reported by sessions"),
    ("output_tokens", "Model output tokens reported by sessions"),
    ("cached_tokens", "Model input tokens read from the provider's cache by sessions"),
)

# Store calls take from well under a millisecond (SQLite, loopback) to seconds (a lock).
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_BOUNDS = [str(b) for b in _BUCKETS] + ["+Inf"]  # as Prometheus writes them: "0.0005", "1.0"


class _Latency:
    """One method's latency histogram: a count per bucket (not cumulative) and the sum."""

    __slots__ = ("buckets", "created", "sum")

    def __init__(self) -> None:
        self.buckets = [0] * (len(_BUCKETS) + 1)
        self.sum = 0.0
        self.created = time.time()


class ServiceMetrics:
    """One registry per app, so several services in one process keep apart."""

    def __init__(self) -> None:
        self.in_flight = 0
        """Store service requests being handled now."""
        self._requests: dict[tuple[str, int], list[float]] = {}  # -> [count, created]
        self._latency: dict[str, _Latency] = {}
        self.usage: list[LabelUsage] = []
        """[G3] the per-label usage totals, read from the store when ``/metrics`` is asked."""
        self.registry = CollectorRegistry()
        self.registry.register(_Collector(self))

    def observe(self, method: str, status: int, seconds: float) -> None:
        """Count one answered request and its latency."""
        counted = self._requests.get((method, status))
        if counted is None:
            counted = self._requests[(method, status)] = [0.0, time.time()]
        counted[0] += 1
        latency = self._latency.get(method)
        if latency is None:
            latency = self._latency[method] = _Latency()
        latency.buckets[bisect_left(_BUCKETS, seconds)] += 1  # a bucket holds <= its bound
        latency.sum += seconds

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        """The metrics as Prometheus metric families, read now."""
        requests = CounterMetricFamily(
            "agentledger_requests",
            "Store service requests by method and HTTP status.",
            labels=("method", "status"),
        )
        for (method, status), (count, created) in self._requests.items():
            requests.add_metric((method, str(status)), count, created=created)
        yield requests
        latency = HistogramMetricFamily(
            "agentledger_request_seconds",
            "Store service request latency by method.",
            labels=("method",),
        )
        for method, found in self._latency.items():
            cumulative, buckets = 0, []
            for bound, count in zip(_BOUNDS, found.buckets, strict=True):
                cumulative += count
                buckets.append((bound, float(cumulative)))
            latency.add_metric((method,), buckets, found.sum)
        yield latency
        since = GaugeMetricFamily(
            "agentledger_request_seconds_created",
            "Store service request latency by method.",
            labels=("method",),
        )
        for method, found in self._latency.items():
            since.add_metric((method,), found.created)
        yield since
        yield GaugeMetricFamily(
            "agentledger_requests_in_flight",
            "Store service requests being handled now.",
            value=self.in_flight,
        )
        for name, what in _USAGE:
            family = GaugeMetricFamily(
                f"agentledger_usage_{name}",
                f"{what} carrying each value of the label, from the store's counters.",
                labels=("label", "value"),
            )
            for group in self.usage:
                count = group.sessions if name == "sessions" else getattr(group.usage, name)
                family.add_metric((group.key, group.value), count)
            yield family


class _Collector(Collector):
    """The registry's view of one :class:`ServiceMetrics`."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self.metrics.collect()
