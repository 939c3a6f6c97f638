"""A StoreClient's one persistent WebSocket to the service, carrying all its calls.

:class:`CallSocket` opens the connection on the first call and keeps it: each call is
one message ``[call id, method name, request]``, each answer one message ``[call id,
HTTP status, answer]`` (see :mod:`agentledger.service.socket_wire`), many calls in
flight at once, each answered as soon as it is. When the connection drops, every call
in flight fails with a :class:`~agentledger.errors.TransientError` (its outcome is
unknown; an exact retry is safe, the store answers it with the original ids), and
the next call opens a new one. A service that refuses the upgrade (one of a version
without the socket, or one that turns the token away) is called over HTTP from then
on, where each call gets its own answer or typed error as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import aiohttp
import msgspec
from yarl import URL

from agentledger.errors import TransientError
from agentledger.service.call_batches import Answer
from agentledger.service.socket_wire import CANCEL, decode_answer, encode_call

__all__ = ["MAX_SOCKET_BODY", "CallSocket"]

MAX_SOCKET_BODY = 1024 * 1024
"""Requests larger than this go over HTTP: they would hold up the calls behind them,
and stay within what any server takes in one WebSocket message."""

_STOPPING = 503
"""The status of an upgrade refused because the service is stopping: try again later."""

Unreachable = Callable[[BaseException, str], TransientError]
"""The error of a call that got no answer, from the transport's error and the operation."""


class CallSocket:
    """One WebSocket to ``url`` of the ``session`` it is opened with; :meth:`call` sends a
    call on it. ``refused`` once the service refused the upgrade: use HTTP instead."""

    def __init__(self, url: URL, timeout: float, unreachable: Unreachable) -> None:
        self._url = url
        self._timeout = timeout
        self._unreachable = unreachable
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._opening: asyncio.Task[aiohttp.ClientWebSocketResponse | None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, tuple[asyncio.Future[Answer], str, float]] = {}
        """Each call in flight: its answer to come, its method's name and when it times out
        (the loop's clock), by call id, oldest first: so they time out in this order."""
        self._watch: asyncio.TimerHandle | None = None
        """The one timer of the calls' timeouts, set for the oldest call's (a timer per call
        costs more than the rest of the call's own work in this process)."""
        self._streams: dict[int, tuple[asyncio.Queue[Answer | TransientError], str]] = {}
        """Each follow: where its messages go, and its operation's name, by call id."""
        self._next_id = 0
        self.refused = False

    async def call(self, session: aiohttp.ClientSession, name: str, body: bytes) -> Answer | None:
        """The answer of the call ``name`` with request ``body``, or None when the service
        refused the upgrade (the caller sends it over HTTP).

        Raises:
            TransientError: no connection, or it dropped or timed out before the answer.
        """
        ws = self._ws
        if ws is None or ws.closed:
            ws = await self._open(session, name)
            if ws is None:
                return None
        call_id = self._next_id
        self._next_id += 1
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Answer] = loop.create_future()
        deadline = loop.time() + self._timeout
        self._pending[call_id] = (answer, name, deadline)
        if self._watch is None:
            self._watch = loop.call_at(deadline, self._expire)
        try:
            await ws.send_bytes(encode_call(call_id, name, body))
            return await answer
        except (aiohttp.ClientError, ConnectionError) as e:  # the connection went meanwhile
            raise self._unreachable(e, name) from e
        finally:
            self._pending.pop(call_id, None)

    def _expire(self) -> None:
        """Fail the calls whose time is up (a ``TransientError``: the outcome is unknown,
        an exact retry is safe); set the timer for the oldest of the rest."""
        self._watch = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        late = []
        for waiting, name, deadline in self._pending.values():  # oldest first
            if deadline > now:
                self._watch = loop.call_at(deadline, self._expire)
                break
            late.append((waiting, name))
        for waiting, name in late:
            if not waiting.done():
                waiting.set_exception(TransientError(
                    f"no answer from the store service within {self._timeout} s",
                    operation=name))  # fmt: skip

    async def subscribe(
        self, session: aiohttp.ClientSession, name: str, body: bytes
    ) -> tuple[int, asyncio.Queue[Answer | TransientError]] | None:
        """Start the follow ``name`` with request ``body``: its call id, and the queue its
        messages arrive on (a ``TransientError`` once the connection drops); None when
        the service refused the upgrade (the caller follows over HTTP).

        Raises:
            TransientError: no connection.
        """
        ws = self._ws
        if ws is None or ws.closed:
            ws = await self._open(session, name)
            if ws is None:
                return None
        call_id = self._next_id
        self._next_id += 1
        queue: asyncio.Queue[Answer | TransientError] = asyncio.Queue()
        self._streams[call_id] = (queue, name)
        try:
            await ws.send_bytes(encode_call(call_id, name, body))
        except (aiohttp.ClientError, ConnectionError) as e:
            self._streams.pop(call_id, None)
            raise self._unreachable(e, name) from e
        return call_id, queue

    async def unsubscribe(self, call_id: int) -> None:
        """End the follow ``call_id`` started (the service stops streaming it)."""
        if self._streams.pop(call_id, None) is None:
            return
        ws = self._ws
        if ws is not None and not ws.closed:
            with contextlib.suppress(aiohttp.ClientError, ConnectionError):
                await ws.send_bytes(encode_call(call_id, CANCEL, b""))

    async def _open(
        self, session: aiohttp.ClientSession, operation: str
    ) -> aiohttp.ClientWebSocketResponse | None:
        """The connection, opened once for the calls that need it at the same moment."""
        if self._opening is None:
            self._opening = asyncio.create_task(self._connect(session, operation))
        opening = self._opening
        try:
            return await asyncio.shield(opening)
        finally:
            if opening.done() and self._opening is opening:
                self._opening = None

    async def _connect(
        self, session: aiohttp.ClientSession, operation: str
    ) -> aiohttp.ClientWebSocketResponse | None:
        try:
            ws = await session.ws_connect(self._url, autoping=True, max_msg_size=0)
        except aiohttp.WSServerHandshakeError as e:  # no socket here, or not for this token
            if e.status != _STOPPING:
                self.refused = True
            return None
        except (aiohttp.ClientError, TimeoutError) as e:
            raise self._unreachable(e, operation) from e
        self._ws = ws
        self._reader = asyncio.create_task(self._read(ws))
        return ws

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        """Settle each call as its answer arrives; once the connection ends, fail the calls
        still waiting."""
        why: BaseException | str = "the service closed the connection"
        try:
            async for message in ws:
                if message.type != aiohttp.WSMsgType.BINARY:
                    continue
                call_id, status, answer = decode_answer(message.data)
                waiting = self._pending.get(call_id)
                if waiting is not None:
                    if not waiting[0].done():
                        waiting[0].set_result((status, answer, True))
                elif (stream := self._streams.get(call_id)) is not None:
                    stream[0].put_nowait((status, answer, True))
            if ws.close_code is not None:
                why = f"the service closed the connection ({ws.close_code})"
        except (aiohttp.ClientError, ConnectionError, msgspec.DecodeError) as e:
            why = e
        finally:
            if self._ws is ws:
                self._ws = None
            self._fail_pending(why)

    def _fail_pending(self, why: BaseException | str) -> None:
        def error(name: str) -> TransientError:
            if isinstance(why, BaseException):
                return self._unreachable(why, name)
            return TransientError(f"{why} before the answer: the call's outcome is unknown "
                                  "(an exact retry is safe)", operation=name)  # fmt: skip

        for waiting, name, _ in list(self._pending.values()):
            if not waiting.done():
                waiting.set_exception(error(name))
        for call_id, (queue, name) in list(self._streams.items()):  # they resume elsewhere
            del self._streams[call_id]
            queue.put_nowait(error(name))

    async def close(self) -> None:
        """Close the connection; calls still waiting fail as transient."""
        ws, reader = self._ws, self._reader
        self._ws = None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if ws is not None:
            with contextlib.suppress(Exception):
                await ws.close()
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
