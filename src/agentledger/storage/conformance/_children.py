"""Conformance: children (to be written)."""

from __future__ import annotations

from agentledger.storage.conformance._base import ConformanceBase

__all__ = ["ChildrenConformance"]


class ChildrenConformance(ConformanceBase):
    """Capability: children."""
