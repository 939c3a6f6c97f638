"""Conformance: terminal (to be written)."""

from __future__ import annotations

from agentledger.storage.conformance._base import ConformanceBase

__all__ = ["TerminalConformance"]


class TerminalConformance(ConformanceBase):
    """Capability: terminal."""
