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

import asyncio
from collections.abc import Awaitable, Callable

from agentledger.service.wire import MAX_CALLS

__all__ = ["MAX_GROUP", "MAX_GROUP_BYTES", "Answer", "CallBatches", "Member"]

MAX_GROUP = MAX_CALLS
"""The most calls in one group: the service's limit per request."""
MAX_GROUP_BYTES = 256 * 1024
"""The most request bytes in one group; a larger call always goes alone."""

Answer = tuple[int, bytes, bool]
"""(HTTP status, answer body, whether it is MessagePack) of one call."""


class Member:
    """One call in a group: its method, its JSON request, and its answer to come.

    The answer is ``None`` when the call is to be sent alone after all (the service
    refused the group as a whole, or does not take groups).
    """

    __slots__ = ("answer", "body", "name")

    def __init__(self, name: str, body: bytes, answer: asyncio.Future[Answer | None]) -> None:
        self.name = name
        self.body = body
        self.answer = answer


SendGroup = Callable[[list[Member]], Awaitable[None]]
"""Sends a group and settles every member's ``answer`` (a result, None, or an error)."""


class CallBatches:
    """Groups the calls made at the same moment; ``send_group`` sends each group."""

    def __init__(self, send_group: SendGroup) -> None:
        self._send_group = send_group
        self._forming: list[Member] | None = None
        self._size = 0
        self._sending: set[asyncio.Task[None]] = set()

    async def call(self, name: str, body: bytes) -> Answer | None:
        """The answer of the call ``name`` with request ``body`` if it went in a group;
        None if it is to be sent alone (it was alone, or the group was refused whole)."""
        if len(body) > MAX_GROUP_BYTES:
            return None
        member = Member(name, body, asyncio.get_running_loop().create_future())
        forming = self._forming
        if (
            forming is not None
            and len(forming) < MAX_GROUP
            and self._size + len(body) <= MAX_GROUP_BYTES
        ):
            forming.append(member)
            self._size += len(body)
            return await member.answer
        forming = self._forming = [member]
        self._size = len(body)
        try:
            await asyncio.sleep(0)  # one loop turn: the calls made meanwhile join
        except asyncio.CancelledError:
            self._leave(forming)
            forming.remove(member)
            self._start([m for m in forming if not m.answer.done()])
            raise
        self._leave(forming)
        group = [m for m in forming if not m.answer.done()]  # without the cancelled
        if len(group) == 1:
            return None
        self._start(group)
        return await member.answer

    def _leave(self, forming: list[Member]) -> None:
        """Stop ``forming`` taking members, if it still does."""
        if self._forming is forming:
            self._forming = None

    def _start(self, group: list[Member]) -> None:
        """Send ``group`` in its own task, so no member's cancellation stops it; a group
        of one is told to go alone."""
        if len(group) == 1:
            group[0].answer.set_result(None)
        elif group:
            task = asyncio.get_running_loop().create_task(self._send(group))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, group: list[Member]) -> None:
        """Send ``group``; a member ``send_group`` left unsettled is told to go alone."""
        try:
            await self._send_group(group)
        finally:
            for member in group:
                if not member.answer.done():
                    member.answer.set_result(None)
