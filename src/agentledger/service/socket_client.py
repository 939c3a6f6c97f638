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
import functools
import ssl
from collections.abc import Callable

import aiohttp
import msgspec
from yarl import URL

from agentledger.errors import TransientError
from agentledger.service.call_batches import Answer
from agentledger.service.socket_transport import HandshakeRefused, SocketTransport
from agentledger.service.socket_wire import CANCEL, decode_answer, encode_call

__all__ = ["MAX_SOCKET_BODY", "CallSocket"]


def _host_header(url: URL, port: int) -> str:
    """The ``Host`` of a request to ``url``: its host, and its port when the URL names one."""
    host = url.raw_host or "127.0.0.1"
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return host if url.explicit_port is None else f"{host}:{port}"


@functools.cache
def _tls() -> ssl.SSLContext:
    """The TLS settings of a service at an ``https`` URL (the system's trusted CAs)."""
    return ssl.create_default_context()


MAX_SOCKET_BODY = 1024 * 1024
"""Requests larger than this go over HTTP: they would hold up the calls behind them,
and stay within what any server takes in one WebSocket message."""

_STOPPING = 503
"""The status of an upgrade refused because the service is stopping: try again later."""

_CONNECT_TIMEOUT = 10.0
"""Seconds the connection and its upgrade may take (at most the calls' timeout)."""
_NOT_AN_ANSWER = 1003
"""The close code of a message from the service that is not an answer."""

Unreachable = Callable[[BaseException, str], TransientError]
"""The error of a call that got no answer, from the transport's error and the operation."""


class CallSocket:
    """One WebSocket to ``url`` of the ``session`` it is opened with; :meth:`call` sends a
    call on it. ``refused`` once the service refused the upgrade: use HTTP instead."""

    def __init__(self, url: URL, timeout: float, unreachable: Unreachable) -> None:
        self._url = url
        self._timeout = timeout
        self._unreachable = unreachable
        self._ws: SocketTransport | None = None
        self._opening: asyncio.Task[SocketTransport | None] | None = None
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
            await ws.send(encode_call(call_id, name, body))
            return await answer
        except ConnectionError as e:  # the connection went meanwhile
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
            await ws.send(encode_call(call_id, name, body))
        except ConnectionError as e:
            self._streams.pop(call_id, None)
            raise self._unreachable(e, name) from e
        return call_id, queue

    async def unsubscribe(self, call_id: int) -> None:
        """End the follow ``call_id`` started (the service stops streaming it)."""
        if self._streams.pop(call_id, None) is None:
            return
        ws = self._ws
        if ws is not None and not ws.closed:
            with contextlib.suppress(ConnectionError):
                await ws.send(encode_call(call_id, CANCEL, b""))

    async def _open(self, session: aiohttp.ClientSession, operation: str) -> SocketTransport | None:
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
    ) -> SocketTransport | None:
        url = self._url
        if any("\r" in f"{k}{v}" or "\n" in f"{k}{v}" for k, v in session.headers.items()):
            self.refused = True  # not a header: HTTP's client refuses it as it does
            return None
        secure = url.scheme == "https"
        host = url.host or "127.0.0.1"
        port = url.port or (443 if secure else 80)
        ws = SocketTransport(
            _host_header(url, port),
            url.raw_path_qs,
            session.headers,
            self._message,
            lambda error, code: self._closed(ws, error, code),
        )
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(min(self._timeout, _CONNECT_TIMEOUT)):
                transport, _ = await loop.create_connection(
                    lambda: ws, host, port, ssl=_tls() if secure else None
                )
                try:
                    await ws.opened
                except BaseException:
                    transport.close()
                    raise
        except HandshakeRefused as e:  # no socket here, or not for this token
            if e.status != _STOPPING:
                self.refused = True
            return None
        except (OSError, TimeoutError) as e:
            raise self._unreachable(e, operation) from e
        self._ws = ws
        return ws

    def _message(self, message: bytes | memoryview) -> None:
        """Settle the call an answer is for, as it arrives; a message that is not an
        answer ends the connection (the calls waiting fail as transient)."""
        try:
            call_id, status, answer = decode_answer(message)
        except msgspec.DecodeError:
            if self._ws is not None:
                self._ws.close(_NOT_AN_ANSWER)
            return
        waiting = self._pending.get(call_id)
        if waiting is not None:
            if not waiting[0].done():
                waiting[0].set_result((status, answer, True))
        elif (stream := self._streams.get(call_id)) is not None:
            stream[0].put_nowait((status, answer, True))

    def _closed(self, ws: SocketTransport, error: BaseException | None, code: int | None) -> None:
        """The connection ``ws`` ended: fail the calls still waiting on it."""
        if self._ws is not ws and self._ws is not None:
            return  # an earlier connection: its calls failed when it went
        self._ws = None
        if error is not None:
            self._fail_pending(error)
        elif code is not None:
            self._fail_pending(f"the service closed the connection ({code})")
        else:
            self._fail_pending("the service closed the connection")

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
        ws = self._ws
        self._ws = None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if ws is not None:
            ws.close()
            self._closed(ws, None, None)
