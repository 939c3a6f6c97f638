"""Opening a follow of a log, the same on ``GET /v1/{runs|sessions}/{id}/records`` and on
a client's WebSocket [S5]: the one decision of who may follow what.

:func:`open_follow` checks the caller's token and role, the log against its label scope,
reads the first page (an unknown run or a bad cursor is an ordinary refusal), and gives
the stream of server-sent events that :func:`agentledger.service.follow.follow` makes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from agentledger.service.follow import follow
from agentledger.service.gate import gate
from agentledger.service.scope import check_scope
from agentledger.service.state import ServiceState
from agentledger.service.wire import STORE_READERS, Subject

__all__ = ["FOLLOWS", "open_follow"]

FOLLOWS = {"follow_run_records": "run", "follow_session_records": "session"}
"""The follow operations, and the kind of log each follows."""


async def open_follow(
    state: ServiceState, operation: str, scope_id: str, after: str, authorization: str | None
) -> AsyncIterator[bytes]:
    """The server-sent events of the log ``operation`` follows (:data:`FOLLOWS`), from
    ``after`` on.

    Raises:
        AgentledgerError: the follow is refused (token, role, scope, log, cursor).
    """
    name = FOLLOWS[operation]
    principal = gate(state, operation, authorization, STORE_READERS)
    await check_scope(state.store, principal, operation, (Subject(name, scope_id),))
    list_page = (
        state.store.list_run_records if name == "run" else state.store.list_session_run_records
    )
    return await follow(
        list_page,
        scope_id,
        after,
        notifier=state.notifier,
        stopping=lambda: state.stopping,
        key=f"{name}:{scope_id}",
    )
