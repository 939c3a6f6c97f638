"""Conformance: one shot (to be written)."""

from __future__ import annotations

from agentledger.storage.conformance._base import ConformanceBase

__all__ = ["OneShotConformance"]


class OneShotConformance(ConformanceBase):
    """Capability: one shot."""
