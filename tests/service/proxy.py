"""A real TCP proxy on loopback that can lose a reply, answer 502, or stall [S3]."""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from urllib.parse import urlsplit

__all__ = ["Proxy"]


class Proxy:
    """Forwards connections to ``upstream`` (``http://host:port``) byte for byte.

    ``drop_next_reply()`` makes the next reply from upstream vanish: the
    request reached the service (and committed), the client's connection is
    then closed without an answer. ``mode`` may also be ``"bad_gateway"``
    (answer 502 without forwarding), ``"stall"`` (accept, never answer) or
    ``"swallow"`` (connections open go on forwarding requests, and their replies vanish
    while it lasts: the connection stays open and silent).
    """

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.mode = "pass"
        self.dropped = 0
        self._drop = False
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.url = ""

    def drop_next_reply(self) -> None:
        self._drop = True

    async def __aenter__(self) -> Proxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            if self.mode == "bad_gateway":
                await client_r.read(65536)
                client_w.write(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 7\r\n\r\nno way\n")
                await client_w.drain()
                return
            if self.mode == "stall":
                await client_r.read(65536)
                await asyncio.sleep(3600)
            up_r, up_w = await asyncio.open_connection(*self.upstream)
            try:
                await asyncio.gather(
                    self._pump(client_r, up_w, replies=False),
                    self._pump(up_r, client_w, replies=True),
                )
            finally:
                up_w.close()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            client_w.close()
            self._tasks.discard(task)

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, replies: bool
    ) -> None:
        while chunk := await source.read(65536):
            if replies and self.mode == "swallow":
                continue
            if replies and self._drop:
                self._drop = False
                self.dropped += 1
                sink.transport.abort()  # the reply is lost: reset, no bytes
                raise ConnectionResetError("reply dropped by the proxy")
            sink.write(chunk)
            with contextlib.suppress(ConnectionError):
                await sink.drain()
        with contextlib.suppress(OSError, RuntimeError):
            sink.write_eof()
