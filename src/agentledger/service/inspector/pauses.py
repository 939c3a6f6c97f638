"""Whether a run is paused on Temporal, for its page: asked of the host runtime's engine.

A run on Temporal whose workflow task keeps failing (a bug in the run loop)
stays as the store has it (``running``, or ended if the bug struck right after
its ending was written) and waits for fixed code; only Temporal knows it. The
run page asks the client ``agentledger serve --temporal`` connected, else the
host runtime's (:meth:`agentledger.service.RuntimeHost.temporal_client`, e.g.
a runtime on a :class:`~agentledger.engine.temporal.TemporalEngine`), through
:func:`agentledger.engine.temporal.paused.find_pause`. Without either, or if
Temporal cannot be reached, the page shows the run as the store has it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agentledger.errors import AgentledgerError
from agentledger.service.state import ServiceState

if TYPE_CHECKING:
    from agentledger.engine.temporal.paused import Pause

__all__ = ["pause_of"]

_log = logging.getLogger("agentledger.service.inspector")


async def pause_of(state: ServiceState, run_id: str) -> Pause | None:
    """The pause of run ``run_id``, if the service knows a Temporal server."""
    client = state.temporal
    if client is None and state.host_runtime is not None:
        client = state.host_runtime.temporal_client()
    if client is None:
        return None
    from agentledger.engine.temporal.paused import find_pause

    try:
        return await find_pause(client, run_id)
    except AgentledgerError as e:  # Temporal unreachable: the page shows the store's view
        _log.warning("inspector: cannot ask Temporal whether run %s is paused: %s", run_id, e)
        return None
