"""Conformance: continuation (to be written)."""

from __future__ import annotations

from agentledger.storage.conformance._base import ConformanceBase

__all__ = ["ContinuationConformance"]


class ContinuationConformance(ConformanceBase):
    """Capability: continuation."""
