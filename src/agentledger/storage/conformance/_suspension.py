"""Conformance: suspension (to be written)."""

from __future__ import annotations

from agentledger.storage.conformance._base import ConformanceBase

__all__ = ["SuspensionConformance"]


class SuspensionConformance(ConformanceBase):
    """Capability: suspension."""
