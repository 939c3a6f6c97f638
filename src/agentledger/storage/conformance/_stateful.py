"""Conformance: stateful (to be written)."""

from __future__ import annotations

from agentledger.storage.conformance._base import ConformanceBase

__all__ = ["StatefulConformance"]


class StatefulConformance(ConformanceBase):
    """Capability: stateful."""
