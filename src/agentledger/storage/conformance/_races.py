"""Conformance: races (to be written)."""

from __future__ import annotations

from agentledger.storage.conformance._base import ConformanceBase

__all__ = ["RaceConformance"]


class RaceConformance(ConformanceBase):
    """Capability: races."""
