"""Conformance: purge (to be written)."""

from __future__ import annotations

from agentledger.storage.conformance._base import ConformanceBase

__all__ = ["PurgeConformance"]


class PurgeConformance(ConformanceBase):
    """Capability: purge."""
