"""StoreClient: ``Store`` and ``SessionAdmin`` over HTTP, for workers and hosts elsewhere [S2].

Each method is one message on the client's one persistent WebSocket to the
service, many calls in flight at once (see :mod:`.socket_client`). Against a
service without it (an older version), each is one ``POST`` with pooled keep-alive
connections (aiohttp's client: it costs about a quarter of httpx's client CPU per
call, measured in ``bench/service.py``), and calls that concurrent callers make at the
same moment share one ``POST /v1/calls`` (see :mod:`.call_batches`), each still
answered on its own. Results and typed errors are those of the backend
behind the service, class and fields alike. Transport failures (refused,
reset, timeout, a 5xx without a typed error) are
:class:`~agentledger.errors.TransientError` [S3]: an exact retry is safe,
because the store answers it with the original ids [X1].
"""

from __future__ import annotations

import asyncio
import io
import os
import random
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from enum import Enum
from types import TracebackType
from typing import TypeVar, cast
from urllib.parse import quote

import aiohttp
import msgspec
from yarl import URL

from agentledger.errors import (
    AccessDeniedError,
    AgentledgerError,
    OverloadedError,
    StoreClosedError,
    TransientError,
    ValidationError,
)
from agentledger.observability.propagation import trace_headers
from agentledger.service import wire
from agentledger.service.call_batches import Answer, Call, CallBatches, Member
from agentledger.service.carriage import check_carriable
from agentledger.service.error_codec import decode_error
from agentledger.service.socket_client import MAX_SOCKET_BODY, CallSocket
from agentledger.service.socket_wire import ENDED, SOCKET_ROUTE, STREAMED, FollowRequest
from agentledger.storage import lifecycle
from agentledger.storage.archive import ArchiveManifest
from agentledger.storage.operations import AdminOperations, Operation
from agentledger.storage.types import Record
from agentledger.storage.validation import SizeLimits
from agentledger.target import masked

__all__ = ["FollowedRecord", "StoreClient"]

Req = TypeVar("Req")
Resp = TypeVar("Resp")

_ENCODER = msgspec.json.Encoder()
_TOKEN_ENV = "AGENTLEDGER_TOKEN"
_KEEPALIVE = 60.0
"""Seconds an idle pooled connection is kept: under the service's own keep-alive, so the
client always closes an idle connection first and never sends on one being closed."""
_TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError)
_MSGPACK = "application/msgpack"
_OVERLOAD_RETRIES = 50
"""Times a call the service shed is sent again (within the call's timeout) before its
``OverloadedError`` is raised."""
_MAX_OVERLOAD_WAIT = 10.0
"""The longest ``Retry-After`` honoured, in seconds."""
_STREAMED = 1024 * 1024
"""Bodies past this size are sent from a buffer in chunks, not written in one piece."""


class FollowedRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A record seen while following, and the cursor that resumes just after it."""

    record: Record
    cursor: str


def _plain(request: Req) -> Req:
    """A request's arguments as the wire carries them: any mapping as a dict, any other
    iterable (a status filter) as a list of values; anything else as given, for the
    store to refuse."""
    struct = cast(msgspec.Struct, request)
    changes: dict[str, object] = {}
    for field in struct.__struct_fields__:
        value = getattr(request, field)
        if isinstance(value, Mapping):
            if not isinstance(value, dict):
                changes[field] = dict(value)
        elif isinstance(value, Iterable) and not isinstance(value, str | bytes | list):
            changes[field] = [v.value if isinstance(v, Enum) else v for v in value]
    return cast(Req, msgspec.structs.replace(struct, **changes)) if changes else request


_UNBOUNDED = SizeLimits(max_payload_bytes=sys.maxsize, max_checkpoint_bytes=sys.maxsize)
"""No caps: a client that does not know the service's leaves sizes to the service."""


class StoreClient(AdminOperations):
    """A ``Store`` and ``SessionAdmin`` served by ``agentledger serve`` at ``url``.

    Args:
        url: the service, e.g. ``http://127.0.0.1:8470``.
        token: the bearer token; defaults to ``$AGENTLEDGER_TOKEN``.
        timeout: seconds a call may take before it is a ``TransientError``.
        max_connections: connections kept in the pool (keep-alive).
        limits: the service's payload and checkpoint caps, if known: a write
            over them is refused here, before sending, as the service would
            refuse it (without them, the service refuses).
        socket: send calls on one persistent WebSocket (the default; a service
            without one is called over HTTP anyway); False: every call over HTTP,
            e.g. through a proxy that does not carry WebSockets.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 60.0,
        max_connections: int = 64,
        limits: SizeLimits | None = None,
        socket: bool = True,
    ) -> None:
        token = os.environ.get(_TOKEN_ENV, "") if token is None else token
        # Results as MessagePack: bytes as they are, not base64 (see service.calls).
        headers = {"content-type": "application/json", "accept": _MSGPACK}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self.url = url.rstrip("/")
        self.limits = limits
        self._check_limits = _UNBOUNDED if limits is None else limits
        self._headers = headers
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=min(timeout, 10.0))
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._routes: dict[str, URL] = {}
        self._closed = False
        self._batches: CallBatches | None = CallBatches(self._send_group)
        self._socket: CallSocket | None = None
        if socket:
            self._socket = CallSocket(
                self._route(SOCKET_ROUTE), timeout, lambda e, op: _unreachable(e, op, self.url)
            )

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 60.0,  # noqa: ASYNC109 (each later call's, not this one's)
        max_connections: int = 64,
        limits: SizeLimits | None = None,
        socket: bool = True,
    ) -> StoreClient:
        """A client of the service at ``url``, opened as every store is (the arguments are
        the constructor's); connections are made on the first call. Encryption and the
        caps are the service's store's: ``limits`` only lets a write over them be refused
        before it is sent.

        Raises:
            ValidationError: ``url`` is not an ``http://`` or ``https://`` URL.
        """
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValidationError(
                field="url", expected="the service's http:// or https:// URL", got=url
            )
        return cls(
            url, token=token, timeout=timeout, max_connections=max_connections, limits=limits,
            socket=socket,
        )  # fmt: skip

    def _http(self) -> aiohttp.ClientSession:
        """The pooled session, made on first use (inside the caller's event loop)."""
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections, keepalive_timeout=_KEEPALIVE, ttl_dns_cache=300
            )
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                timeout=self._timeout,
                connector=connector,
                skip_auto_headers=("User-Agent",),
                cookie_jar=aiohttp.DummyCookieJar(),  # the service sets no cookies on /v1
            )
        return self._session

    def _route(self, path: str) -> URL:
        """The URL of ``path``, parsed once."""
        url = self._routes.get(path)
        if url is None:
            url = self._routes[path] = URL(self.url + path)
        return url

    async def close(self) -> None:
        """Close the pooled connections; closing twice is a no-op, later calls fail with
        ``StoreClosedError`` as on every backend."""
        self._closed = True
        if self._socket is not None:
            await self._socket.close()
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> StoreClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _call(self, method: wire.Method[Req, Resp], request: Req) -> Resp:
        if self._closed:
            raise StoreClosedError(backend="service", operation=method.name)
        check_carriable(request, method.request, method.prefix)
        try:
            body = _ENCODER.encode(request)
        except (TypeError, msgspec.EncodeError) as e:
            raise ValidationError(
                field=method.name,
                expected="a call the wire can carry (plain JSON values)",
                got=str(e),
                message=f"{method.name}: the call cannot be encoded: {e}",
            ) from e
        status, content, packed = await self._answer(method, body)
        if status != 200:
            raise _refusal(method.name, status, content)
        try:
            if packed:
                return method.response_msgpack_decoder.decode(content)
            return method.response_decoder.decode(content)
        except msgspec.DecodeError as e:  # not an agentledger service of this version
            raise self._unexpected(method.name, str(e)) from e

    async def _answer(self, method: wire.Method[Req, Resp], body: bytes) -> Answer:
        """The service's answer to one call: on the client's WebSocket, else (a service
        without it, a large request) in a group of calls made at the same moment, or alone
        (when tracing, each call is a ``POST`` carrying its own trace context)."""
        traced = trace_headers()
        if traced:
            return await self._post(method.route, body, method.name, traced)
        socket = self._socket
        if socket is not None and len(body) <= MAX_SOCKET_BODY:
            answer = await self._socket_answer(socket, method.name, body)
            if answer is not None:
                return answer
            if socket.refused:  # a service without the socket, or not for this token
                self._socket = None
        if self._batches is not None:
            answer = await self._batches.call(method.name, body)
            if answer is not None:
                return answer
        return await self._post(method.route, body, method.name, traced)

    async def _socket_answer(self, socket: CallSocket, name: str, body: bytes) -> Answer | None:
        """The answer of one call on the socket (None: send it over HTTP). A call the service
        shed (503 with an ``OverloadedError``: it did none of it) is sent again, exactly,
        after the wait the error asks for, while the call's timeout allows, as over HTTP."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self._timeout.total or 60.0)
        for attempt in range(_OVERLOAD_RETRIES + 1):
            answer = await socket.call(self._http(), name, body)
            if answer is None or answer[0] != 503 or attempt == _OVERLOAD_RETRIES:
                return answer
            shed = _refusal(name, answer[0], answer[1])
            if not isinstance(shed, OverloadedError):
                return answer
            wait = min(shed.retry_after, _MAX_OVERLOAD_WAIT) * (1 + random.random() / 2)
            if loop.time() + wait > deadline:
                return answer
            await asyncio.sleep(wait)
        return None  # not reached: the last attempt returns its answer

    async def _post(
        self, path: str, body: bytes, operation: str, headers: dict[str, str] | None = None
    ) -> Answer:
        """(status, body, is MessagePack) of one ``POST``; a transport failure is a
        ``TransientError``. A call the service shed (503 with ``Retry-After``: it did none
        of it) is sent again, exactly, after the wait it asks for, while the call's
        timeout allows; then its ``OverloadedError`` is the answer."""
        deadline = asyncio.get_running_loop().time() + (self._timeout.total or 60.0)
        for attempt in range(_OVERLOAD_RETRIES + 1):
            try:
                data = body if len(body) <= _STREAMED else io.BytesIO(body)
                async with self._http().post(
                    self._route(path),
                    data=data,
                    headers=headers or None,
                    allow_redirects=False,  # a redirect is refused, never followed with the token
                ) as response:
                    answer = response.status, await response.read()
                    packed = response.content_type == _MSGPACK
                    wait = _shed_wait(response.status, response.headers.get("retry-after"))
            except _TRANSPORT_ERRORS as e:  # refused, reset, timed out, cut short
                raise _unreachable(e, operation, self.url) from e
            wait *= 1 + random.random() / 2  # spread out the callers shed together
            if wait < 0 or attempt == _OVERLOAD_RETRIES:
                break
            if asyncio.get_running_loop().time() + wait > deadline:
                break
            await asyncio.sleep(wait)
        return *answer, packed

    async def _send_group(self, group: list[Member[Call, Answer | None]], shed: int = 0) -> None:
        """One ``POST /v1/calls`` of ``group``; each member is answered as its own answer
        arrives (a stream of frames: see :mod:`agentledger.service.batch`).

        A group the service shed (``shed`` times so far) is sent again whole after the wait
        it asks for. A refusal of the whole request leaves each member to go alone, for its
        own answer or typed error; a service that does not take groups is sent none any
        more. A connection lost before a member's answer is that member's ``TransientError``.
        """
        body = wire.encode_group(m.item for m in group)
        try:
            async with self._http().post(
                self._route(wire.CALLS_ROUTE),
                data=body,
                headers=_FRAMES_ACCEPTED,
                allow_redirects=False,
            ) as response:
                if response.status != 200 or response.content_type != wire.FRAMES:
                    if response.status in (404, 405):  # a service of a version without groups
                        self._batches = None
                    wait = _shed_wait(response.status, response.headers.get("retry-after"))
                    if wait >= 0 and shed < _OVERLOAD_RETRIES:  # shed: the group again, later
                        await response.read()  # the connection goes back to the pool
                        await asyncio.sleep(wait * (1 + random.random() / 2))
                        return await self._send_group(group, shed + 1)
                    return  # every member goes alone
                for _ in group:
                    header = await response.content.readexactly(wire.FRAME_HEADER)
                    frame = await response.content.readexactly(wire.frame_size(header))
                    index, status, answer = wire.decode_frame(frame)
                    if not 0 <= index < len(group):
                        raise msgspec.DecodeError(f"an answer to call {index} of {len(group)}")
                    _settle(group[index], answer=(status, answer, True))
        except (*_TRANSPORT_ERRORS, asyncio.IncompleteReadError) as e:  # outcomes unknown
            for member in group:
                _settle(member, error=_unreachable(e, member.item.name, self.url))
        except msgspec.DecodeError as e:
            for member in group:
                _settle(member, error=self._unexpected(member.item.name, str(e)))

    async def _socket_follow(
        self, operation: str, scope_id: str, after: str
    ) -> AsyncGenerator[bytes, None] | None:
        """The pieces of a follow's server-sent events on the client's WebSocket, once the
        service took it; None to follow over HTTP (no socket, or tracing is on).

        Raises:
            AgentledgerError: the follow is refused; ``TransientError``: no connection.
        """
        socket = self._socket
        if socket is None or trace_headers():
            return None
        request = _ENCODER.encode(FollowRequest(id=scope_id, after=after))
        opened = await socket.subscribe(self._http(), operation, request)
        if opened is None:
            if socket.refused:
                self._socket = None
            return None
        call_id, queue = opened
        try:
            first = await _piece(queue, operation)
        except BaseException:
            await socket.unsubscribe(call_id)
            raise

        async def pieces() -> AsyncGenerator[bytes, None]:
            try:
                piece = first
                while piece is not None:
                    yield piece
                    piece = await _piece(queue, operation)
            finally:
                await socket.unsubscribe(call_id)

        return pieces()

    def _unexpected(self, operation: str, error: str) -> ValidationError:
        """The error of an answer this client cannot read: not this version's service."""
        return ValidationError(
            field=f"{operation} answer",
            expected=f"an answer of this agentledger version from {self.url}",
            got=str(error),
            message=f"{operation}: unexpected answer from {self.url}: {error}",
        )

    async def perform(self, op: Operation[Req, Resp], request: Req, /) -> Resp:
        """Send one store operation: one ``POST``, or one call of a group sent together.

        A command is sent as given (over this client's ``limits``, if known, it is
        refused here); loose arguments are first checked as the store checks them
        before reading anything (so what the wire could not carry as given is refused
        as the store refuses it), then sent as the wire carries them.
        """
        if self._closed:
            raise StoreClosedError(backend="service", operation=op.name)
        if op.positional is None:
            if self.limits is not None and op.writes:
                lifecycle.check_sizes(request, self.limits)
        else:
            op.check(request, self._check_limits)
            request = _plain(request)
        return await self._call(wire.STORE_METHODS[op], request)

    # --------------------------------------------------------- archives

    async def export_archive(self, session_id: str, /) -> bytes:
        """[A1] The ended session's archive file, built by the service (sealed there [A2])."""
        answer = await self._call(wire.EXPORT_ARCHIVE, wire.SessionRef(session_id=session_id))
        return answer.data

    async def import_archive(self, data: bytes, /) -> ArchiveManifest:
        """[A1] Restore an archive file's bytes; the service verifies and opens it."""
        return await self._call(wire.IMPORT_ARCHIVE, wire.ArchiveFile(data=data))

    # ----------------------------------------------------------- follow

    def follow_run_records(self, run_id: str, /, after: str = "") -> AsyncIterator[FollowedRecord]:
        """[S5] A run's records from ``after`` on, as they commit; resumes after a disconnect."""
        path = f"/v1/runs/{quote(run_id, safe='')}/records"
        return self._follow(path, "follow_run_records", run_id, after)

    def follow_session_run_records(
        self, session_id: str, /, after: str = ""
    ) -> AsyncIterator[FollowedRecord]:
        """[S5] A session's records from ``after`` on, as they commit; resumes likewise."""
        path = f"/v1/sessions/{quote(session_id, safe='')}/records"
        return self._follow(path, "follow_session_records", session_id, after)

    async def _follow(
        self, path: str, operation: str, scope_id: str, after: str, *, attempts: int = 30
    ) -> AsyncIterator[FollowedRecord]:
        """Server-sent events of one log, on the client's WebSocket or as a ``GET``;
        reconnects from the last cursor seen.

        A stream the service ends (it is stopping) or a lost connection is
        resumed; ``TransientError`` after ``attempts`` failed reconnections in
        a row (about 25 seconds).
        """
        failures = 0
        endless = aiohttp.ClientTimeout(total=None, connect=10.0, sock_read=None)
        while True:
            try:
                pieces = await self._socket_follow(operation, scope_id, after)
                if pieces is not None:
                    failures = 0
                    try:
                        async for cursor, data in _events(_lines(pieces)):
                            after = cursor
                            yield FollowedRecord(record=_RECORD.decode(data), cursor=cursor)
                    finally:
                        await pieces.aclose()
                    continue
                headers = {"last-event-id": after} if after else {}
                async with self._http().get(
                    self._route(path),
                    headers={**headers, **trace_headers()},
                    timeout=endless,
                    allow_redirects=False,
                ) as response:
                    if response.status != 200:
                        raise _refusal(operation, response.status, await response.read())
                    failures = 0
                    async for cursor, data in _events(_lines(response.content.iter_any())):
                        after = cursor
                        yield FollowedRecord(record=_RECORD.decode(data), cursor=cursor)
            except (*_TRANSPORT_ERRORS, TransientError) as e:
                failures += 1
                if failures > attempts:
                    if isinstance(e, TransientError):
                        raise
                    raise _unreachable(e, operation, self.url) from e
                wait = min(0.05 * 2**failures, 1.0)
                if isinstance(e, OverloadedError):  # shed: wait as long as the service asks
                    wait = min(e.retry_after, _MAX_OVERLOAD_WAIT) * (1 + random.random() / 2)
                await asyncio.sleep(wait)


_RECORD = msgspec.json.Decoder(Record)


async def _piece(queue: asyncio.Queue[Answer | TransientError], operation: str) -> bytes | None:
    """The next piece of a follow's stream on the socket; None once the service ended it.

    Raises:
        AgentledgerError: the follow was refused; ``TransientError``: the connection dropped.
    """
    item = await queue.get()
    if isinstance(item, TransientError):
        raise item
    status, answer, _ = item
    if status == STREAMED:
        return answer
    if status == ENDED:
        return None
    raise _refusal(operation, status, answer)


_FRAMES_ACCEPTED = {"accept": wire.FRAMES}


def _settle(
    member: Member[Call, Answer | None],
    *,
    answer: Answer | None = None,
    error: BaseException | None = None,
) -> None:
    """Give ``member`` its answer or error, unless it gave up waiting (cancelled)."""
    if member.answer.done():
        return
    if error is not None:
        member.answer.set_exception(error)
    else:
        member.answer.set_result(answer)


async def _lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The lines of a byte stream (LF or CRLF), however long each one is."""
    parts: list[bytes] = []  # of the line not yet ended, joined once it ends
    async for chunk in chunks:
        parts.append(chunk)
        if b"\n" not in chunk:
            continue
        *complete, rest = b"".join(parts).split(b"\n")
        parts = [rest]
        for line in complete:
            yield line.removesuffix(b"\r").decode()


async def _events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, bytes]]:
    """(id, data) of each ``record`` event of a server-sent event stream."""
    event_id, kind, data = "", "", ""
    async for line in lines:
        if not line:
            if kind == "record" and data:
                yield event_id, data.encode()
            kind, data = "", ""
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "id":
            event_id = value
        elif field == "event":
            kind = value
        elif field == "data":
            data = f"{data}\n{value}" if data else value


def _shed_wait(status: int, retry_after: str | None) -> float:
    """Seconds to wait before sending a call the service shed again; -1: it was not shed
    (a 503 without ``Retry-After`` is trouble, not shedding: its error is the answer)."""
    if status != 503 or retry_after is None:
        return -1.0
    try:
        seconds = float(retry_after)
    except ValueError:  # an HTTP date: not what this service sends
        return -1.0
    return min(max(seconds, 0.05), _MAX_OVERLOAD_WAIT)


def _unreachable(error: BaseException, operation: str, url: str) -> TransientError:
    """The error of a call that got no answer: a service not listening at ``url`` is
    named as such (the transport's own words otherwise)."""
    # (a refused connection of the socket's own transport is the same news)
    os_error = error.os_error if isinstance(error, aiohttp.ClientConnectorError) else error
    if isinstance(os_error, OSError) and isinstance(
        error, aiohttp.ClientConnectorError | ConnectionRefusedError
    ):
        code = os_error.errno
        why = os.strerror(code).lower() if code else str(os_error)
        return TransientError(
            f"the store service is not reachable at {masked(url)} ({why}): is it running? "
            f"`agentledger serve` starts one",
            operation=operation,
        )
    return TransientError(f"{type(error).__name__}: {error}", operation=operation)


def _refusal(operation: str, status: int, content: bytes) -> AgentledgerError:
    """The typed error a non-200 answer carries, or what its status means."""
    error = decode_error(content)
    if isinstance(error, AccessDeniedError) and error.status == 401:
        return AccessDeniedError(
            operation=error.operation, status=401,
            reason=f"{error.reason} (send a token the service knows: ${_TOKEN_ENV}, or "
            f"StoreClient(token=...); `agentledger token new` makes one)",
        )  # fmt: skip
    if error is not None:
        return error
    text = content[:300].decode(errors="replace")
    if status >= 500:
        return TransientError(f"HTTP {status}: {text}", operation=operation)
    return ValidationError(  # no typed error in the body: not an agentledger service
        field="url",
        expected=f"an agentledger store service answering {operation}",
        got=f"HTTP {status}",
        message=f"{operation}: HTTP {status}: {text}",
    )
