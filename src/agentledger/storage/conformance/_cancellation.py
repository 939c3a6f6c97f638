"""Conformance: cancellation (to be written)."""

from __future__ import annotations

from agentledger.storage.conformance._base import ConformanceBase

__all__ = ["CancellationConformance"]


class CancellationConformance(ConformanceBase):
    """Capability: cancellation."""
