"""Conformance: starts (to be written)."""

from __future__ import annotations

from agentledger.storage.conformance._base import ConformanceBase

__all__ = ["StartConformance"]


class StartConformance(ConformanceBase):
    """Capability: starts."""
