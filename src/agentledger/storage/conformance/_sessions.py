"""Conformance: sessions (to be written)."""

from __future__ import annotations

from agentledger.storage.conformance._base import ConformanceBase

__all__ = ["SessionConformance"]


class SessionConformance(ConformanceBase):
    """Capability: sessions."""
