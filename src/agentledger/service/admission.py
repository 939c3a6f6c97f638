"""Admission: how much the service takes on at once, and the typed refusal of the rest.

Every request but the probes (``/healthz``, ``/readyz``, ``/metrics``) passes
:meth:`Admission.admit` before any of its work begins (before its body is read,
its token checked or the store touched). A request takes one of two kinds of
slot, held until its answer is sent:

- a *call* (a store call, a group of calls, an inspector page): at most
  :attr:`OverloadLimits.max_calls` at once, :attr:`~OverloadLimits.max_calls_per_token`
  of them for one ``Authorization`` value, and their bodies together at most
  :attr:`~OverloadLimits.max_body_bytes` (a body is counted at its declared
  ``Content-Length``, or at the service's body cap when it declares none);
- a *stream* (a follow stream, the inspector's live updates): at most
  :attr:`~OverloadLimits.max_streams`, :attr:`~OverloadLimits.max_streams_per_token`
  of them for one ``Authorization`` value.

Past a limit the request is *shed*: answered at once with HTTP 503, a
``Retry-After`` header and an :class:`~agentledger.errors.OverloadedError`
(nothing of it was done, so the same call may be sent again; ``StoreClient``
waits and does so itself). While the service sheds, and for
:attr:`~OverloadLimits.retry_after` seconds after, ``/readyz`` says so (503,
``overloaded``), so a load balancer sends new work elsewhere.

What a connection may hold before it is a request (its open sockets, slow
headers and bodies, a stream its client does not read) is bounded in
:mod:`agentledger.service.connections`, with the same limits.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agentledger.errors import OverloadedError, ValidationError
from agentledger.service.error_codec import encode_error

__all__ = ["Admission", "OverloadLimits", "Ticket", "overloaded_answer", "send_overloaded"]

Scope = MutableMapping[str, Any]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_PROBES = frozenset({"/healthz", "/readyz", "/metrics"})


@dataclass(frozen=True)
class OverloadLimits:
    """What one service takes on at once; the rest is shed with a retryable 503.

    The defaults fit a service given about 2 GiB of memory; see docs/service.md for
    what each one costs and how to size them.
    """

    max_connections: int = 16_384
    """Open connections (each follow stream is one); a connection past it is answered 503
    and closed before its request is read."""
    max_calls: int = 512
    """Calls being served at once (the store's writer queues them; past its capacity
    they wait there, so this bounds their wait and memory)."""
    max_calls_per_token: int = 256
    """Calls being served at once for one token, so one caller cannot take every slot."""
    max_streams: int = 12_000
    """Follow streams (and inspector live updates) open at once."""
    max_streams_per_token: int = 12_000
    """Follow streams open at once for one token."""
    max_body_bytes: int = 256 * 1024 * 1024
    """Request body bytes held at once by the calls being served."""
    max_backlog_bytes: int = 256 * 1024 * 1024
    """Bytes of records waiting, in all, for follow streams whose clients read slower than
    their logs grow; past it the stream with the most waiting is cut loose (what waited for
    it is dropped, and it reads on from its last event sent at its client's pace)."""
    header_timeout: float = 10.0
    """Seconds a request's headers may take to arrive, counted from the connection's
    opening or the request's first byte; then 408 and the connection closed."""
    body_timeout: float = 60.0
    """Seconds a request's body may take to arrive after its headers; then 408 and closed."""
    max_header_bytes: int = 64 * 1024
    """Bytes of one request's line and headers; past it 431 and the connection closed."""
    send_timeout: float = 30.0
    """Seconds an answer or stream may stay stalled because its client reads nothing; then
    the connection is closed (a follower resumes from its cursor)."""
    retry_after: float = 1.0
    """Seconds a shed caller is asked to wait (the ``Retry-After`` header)."""

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            if not (isinstance(value, int | float) and value > 0):
                raise ValidationError(field=name, expected="a positive number", got=repr(value))


class Ticket:
    """One admitted request's slot; :meth:`release` it once its answer is sent."""

    __slots__ = ("admission", "body", "key", "kind", "released")

    def __init__(self, admission: Admission, kind: str, key: str, body: int) -> None:
        self.admission = admission
        self.kind = kind
        self.key = key
        self.body = body
        self.released = False

    def release(self) -> None:
        """Give the slot back (a second release is a no-op)."""
        if not self.released:
            self.released = True
            self.admission._release(self)


_FREE = Ticket.__new__(Ticket)
"""The ticket of a probe: nothing held."""
_FREE.released = True


class Admission:
    """The counts of what one service is serving now, checked against its limits."""

    def __init__(self, limits: OverloadLimits, body_cap: int) -> None:
        self.limits = limits
        self.body_cap = body_cap
        self.calls = 0
        self.streams = 0
        self.body_bytes = 0
        self._per_token: dict[tuple[str, str], int] = {}
        self.shed: dict[str, int] = {}
        """Requests shed so far, by the limit that was reached."""
        self._last_shed = -1e9

    def admit(self, scope: Scope) -> Ticket | OverloadedError:
        """The slot of the request ``scope`` describes, or the refusal to answer it with."""
        path: str = scope.get("path", "")
        if path in _PROBES:
            return _FREE
        method = scope.get("method", "GET")
        authorization, accept, declared = "", "", -1
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                authorization = value.decode("latin-1")
            elif name == b"accept":
                accept = value.decode("latin-1")
            elif name == b"content-length" and value.isdigit():
                declared = int(value)
        if method == "GET" and (path.endswith("/records") or "text/event-stream" in accept):
            return self.admit_stream(path, authorization)
        body = 0 if method in ("GET", "HEAD") else min(declared, self.body_cap)
        if body < 0:
            body = self.body_cap  # no length declared: it may be as large as the cap
        return self.admit_call(path, authorization, body)

    def admit_stream(self, path: str, authorization: str) -> Ticket | OverloadedError:
        """The slot of a follow stream (or of a client's WebSocket, held while it is open)."""
        limits = self.limits
        if self.streams >= limits.max_streams:
            return self._refuse(path, "streams", f"{limits.max_streams} follow streams open")
        if self._per_token.get(("stream", authorization), 0) >= limits.max_streams_per_token:
            return self._refuse(
                path, "streams_per_token",
                f"{limits.max_streams_per_token} follow streams open for this token",
            )  # fmt: skip
        self.streams += 1
        return self._hold("stream", authorization, 0)

    def admit_call(self, path: str, authorization: str, body: int) -> Ticket | OverloadedError:
        """The slot of one call holding ``body`` bytes, over HTTP or on a WebSocket."""
        limits = self.limits
        if self.calls >= limits.max_calls:
            return self._refuse(path, "calls", f"{limits.max_calls} calls being served")
        if self._per_token.get(("call", authorization), 0) >= limits.max_calls_per_token:
            return self._refuse(
                path, "calls_per_token",
                f"{limits.max_calls_per_token} calls being served for this token",
            )  # fmt: skip
        if body and self.body_bytes + body > limits.max_body_bytes:
            return self._refuse(
                path, "body_bytes", f"{limits.max_body_bytes} bytes of request bodies held"
            )
        self.calls += 1
        self.body_bytes += body
        return self._hold("call", authorization, body)

    def _hold(self, kind: str, authorization: str, body: int) -> Ticket:
        key = (kind, authorization)
        self._per_token[key] = self._per_token.get(key, 0) + 1
        return Ticket(self, kind, authorization, body)

    def _release(self, ticket: Ticket) -> None:
        key = (ticket.kind, ticket.key)
        left = self._per_token[key] - 1
        if left:
            self._per_token[key] = left
        else:
            del self._per_token[key]
        if ticket.kind == "stream":
            self.streams -= 1
        else:
            self.calls -= 1
            self.body_bytes -= ticket.body

    def _refuse(self, path: str, limit: str, reason: str) -> OverloadedError:
        self.note_shed(limit)
        operation = path.removeprefix("/v1/") if path.count("/") == 2 else path
        return OverloadedError(reason, operation=operation, retry_after=self.limits.retry_after)

    def note_shed(self, limit: str, *, busy: bool = True) -> None:
        """Count one request shed at ``limit``; ``busy``: the service reports overload for a
        while (not for one client's slowness, which says nothing of the service's load)."""
        self.shed[limit] = self.shed.get(limit, 0) + 1
        if busy:
            self._last_shed = time.monotonic()

    def register(self, registry: CollectorRegistry) -> None:
        """Report the shed counts and the slots taken in ``registry`` (``/metrics``)."""
        registry.register(_Collector(self))

    def overloaded(self) -> str:
        """Why the service is overloaded now (it shed a request within the last
        ``retry_after`` seconds, or every call slot is taken); "" when it is not."""
        if self.calls >= self.limits.max_calls:
            return f"all {self.limits.max_calls} call slots taken"
        if time.monotonic() - self._last_shed < max(self.limits.retry_after, 1.0):
            return "shedding requests"
        return ""


class _Collector(Collector):
    """The registry's view of one :class:`Admission`."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    def collect(self) -> Iterator[Metric]:
        found = self.admission
        shed = CounterMetricFamily(
            "agentledger_shed", "Requests refused as overloaded, by the limit reached.",
            labels=("limit",),
        )  # fmt: skip
        for limit, count in found.shed.items():
            shed.add_metric((limit,), count)
        yield shed
        held = GaugeMetricFamily(
            "agentledger_admitted", "Calls and streams being served now.", labels=("kind",)
        )
        held.add_metric(("call",), found.calls)
        held.add_metric(("stream",), found.streams)
        yield held


def overloaded_answer(error: OverloadedError) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """(headers, body) of a 503 that refuses a request as ``error``."""
    body = encode_error(error)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"retry-after", b"%d" % max(1, round(error.retry_after))),
    ]
    return headers, body


async def send_overloaded(send: Send, error: OverloadedError) -> None:
    """Answer a request with 503, ``Retry-After`` and ``error``."""
    headers, body = overloaded_answer(error)
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})
