"""Calls a client makes at the same moment, sent to the service as one request.

Concurrent workers sharing one :class:`~agentledger.service.client.StoreClient`
(the activities of a Temporal worker, the runs of one runtime) often call at
once. The first call of a moment waits one turn of the event loop; calls made
meanwhile join it, and they go together as one ``POST /v1/calls``. A call with
nobody beside it goes alone, as before, so a lone worker pays one loop turn and
no extra round trip. Nothing waits for an answer to another request: a call that
comes once a group has left starts the next group at once.

Each member gets its own answer or its own error. A member cancelled before its
group leaves is left out; the group, once sent, is answered whatever happens to
the member that started it.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from agentledger.service.wire import MAX_CALLS
from agentledger.storage.coalescer import Coalescer, Member, SendGroup

__all__ = ["MAX_GROUP", "MAX_GROUP_BYTES", "Answer", "Call", "CallBatches", "Member"]

_log = logging.getLogger("agentledger.service")

MAX_GROUP = MAX_CALLS
"""The most calls in one group: the service's limit per request."""
MAX_GROUP_BYTES = 256 * 1024
"""The most request bytes in one group; a larger call always goes alone."""

Answer = tuple[int, bytes, bool]
"""(HTTP status, answer body, whether it is MessagePack) of one call."""


class Call(NamedTuple):
    """One call in a group: its method's name and its JSON request."""

    name: str
    body: bytes


async def _alone(call: Call) -> Answer | None:
    return None  # its caller sends it alone


def _size(call: Call) -> int:
    return len(call.body)


class CallBatches:
    """Groups the calls made at the same moment; ``send_group`` sends each group and
    settles each member's answer (a result, None to go alone, or an error)."""

    def __init__(self, send_group: SendGroup[Call, Answer | None]) -> None:
        self._send_group = send_group
        self._calls: Coalescer[Call, Answer | None] = Coalescer(
            self._send, _alone, max_members=MAX_GROUP, max_bytes=MAX_GROUP_BYTES, size=_size
        )

    async def _send(self, group: list[Member[Call, Answer | None]]) -> None:
        """Send ``group``; a send that breaks leaves each member it did not settle to go
        alone, for its own answer or typed error."""
        try:
            await self._send_group(group)
        except Exception:
            _log.warning("store client: a group of calls failed; each goes alone", exc_info=True)

    async def call(self, name: str, body: bytes) -> Answer | None:
        """The answer of the call ``name`` with request ``body`` if it went in a group;
        None if it is to be sent alone (it was alone, or the group was refused whole)."""
        return await self._calls.submit(Call(name, body))
