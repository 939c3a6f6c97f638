"""The web inspector served by the store service at ``/ui`` (DESIGN section 11).

Read-only pages for ``reader`` and ``host`` tokens: sessions (filtered by
status and labels, paged newest first), a session's run tree, a run's
records in commit order with full payloads and a type filter, and its
transcript rebuilt from the log as a conversation, all updated live through
the service's follow stream. Server-rendered with Jinja2 (autoescaped) and a
little vanilla JavaScript; templates and static files ship in the package,
with no build step and nothing fetched from elsewhere.
"""

from __future__ import annotations

from agentledger.service.inspector.routes import inspector_handlers

__all__ = ["inspector_handlers"]
