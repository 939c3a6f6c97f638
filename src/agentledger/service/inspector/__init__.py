"""The web inspector served by the store service at ``/ui`` (DESIGN section 11).

Pages for ``reader`` and ``host`` tokens: sessions (filtered by status and
labels, paged newest first, with run counts and a running mark), a session's
runs (what each was asked, its duration, turns and tokens) and its whole
conversation, a run's records (paged, searchable, payloads folded), its
timeline (a waterfall of its steps) with tokens and cost, and its transcript,
all updated live through the service's follow stream. A ``host`` token may
also cancel a run or end a session, and with a host runtime answer a
suspended run or fork after a message; a ``reader`` only looks. Server-rendered
with Jinja2 (autoescaped) and a little vanilla JavaScript; templates and
static files ship in the package, with no build step and nothing fetched
from elsewhere.
"""

from __future__ import annotations

from agentledger.service.inspector.routes import inspector_handlers

__all__ = ["inspector_handlers"]
