"""Conformance: payloads (to be written)."""

from __future__ import annotations

from agentledger.storage.conformance._base import ConformanceBase

__all__ = ["PayloadConformance"]


class PayloadConformance(ConformanceBase):
    """Capability: payloads."""
