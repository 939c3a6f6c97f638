"""Conformance: paging (to be written)."""

from __future__ import annotations

from agentledger.storage.conformance._base import ConformanceBase

__all__ = ["PagingConformance"]


class PagingConformance(ConformanceBase):
    """Capability: paging."""
