"""Whether a run is paused on Temporal, for its page: asked of the host runtime's engine.

A run on Temporal whose workflow task keeps failing (a bug in the run loop)
stays as the store has it (``running``, or ended if the bug struck right after
its ending was written) and waits for fixed code; only Temporal knows it. The
run page asks the client ``agentledger serve --temporal`` connected, else,
when the service's host runtime runs its runs on a
:class:`~agentledger.engine.temporal.TemporalEngine`, that engine's
(:func:`agentledger.engine.temporal.paused.find_pause`). Without either, or
if Temporal cannot be reached, the page shows the run as the store has it.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

from agentledger.errors import AgentledgerError

if TYPE_CHECKING:
    from agentledger.engine.temporal.paused import Pause

__all__ = ["pause_of"]

_log = logging.getLogger("agentledger.service.inspector")


def _temporal_client(host: Any) -> Any:
    """The Temporal client of the host runtime's engine; None if it runs runs elsewhere."""
    engines = sys.modules.get("agentledger.engine.temporal.engine")
    if engines is None:  # never imported: no engine here is a TemporalEngine
        return None
    engine = getattr(getattr(host, "runtime", None), "engine", None)
    return engine.client if isinstance(engine, engines.TemporalEngine) else None


async def pause_of(state: Any, run_id: str) -> Pause | None:
    """The pause of run ``run_id``, if the service knows a Temporal server."""
    client = getattr(state, "temporal", None) or _temporal_client(state.host_runtime)
    if client is None:
        return None
    from agentledger.engine.temporal.paused import find_pause

    try:
        return await find_pause(client, run_id)
    except AgentledgerError as e:  # Temporal unreachable: the page shows the store's view
        _log.warning("inspector: cannot ask Temporal whether run %s is paused: %s", run_id, e)
        return None
