"""Conformance: records (to be written)."""

from __future__ import annotations

from agentledger.storage.conformance._base import ConformanceBase

__all__ = ["RecordConformance"]


class RecordConformance(ConformanceBase):
    """Capability: records."""
