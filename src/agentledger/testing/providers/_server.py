"""The HTTP machinery the provider stubs share: a scripted server on 127.0.0.1.

A stub is a `ThreadingHTTPServer` in a background thread that answers each
POST with the next scripted `Reply`, after checking the request the way the
provider would (a refused request gets the provider's 400 and consumes no
reply). Every request is recorded, refused or not.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["RecordedRequest", "Reply", "Response", "StubServer"]


@dataclass(frozen=True)
class RecordedRequest:
    """One request the stub received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    """The parsed JSON body (None if there was none)."""


@dataclass(frozen=True)
class Reply:
    """One scripted answer.

    ``body`` is a provider response object (a message, a completion, a
    Converse response): the stub sends it as JSON, or as the provider's
    stream of events when the request asked to stream. ``events`` sends these
    exact stream events instead. ``status`` other than 200 sends ``body`` as
    an error. ``drop_after`` closes the connection after that many stream
    events (or before the body, for 0), mid-answer.
    """

    body: Any = None
    status: int = 200
    events: Sequence[Any] | None = None
    drop_after: int | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Response:
    """What the handler writes: a whole body, or a stream of chunks (maybe cut short)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    chunks: Iterator[bytes] | None = None
    drop_after: int | None = None


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    """A JSON response."""
    return Response(
        status=status,
        headers={"content-type": "application/json", **(headers or {})},
        body=json.dumps(body).encode("utf-8"),
    )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        request = RecordedRequest(
            method="POST",
            path=self.path,
            headers={key.lower(): value for key, value in self.headers.items()},
            body=body,
        )
        response = self.server.stub.dispatch(request)
        self._write(response)

    def _write(self, response: Response) -> None:
        self.send_response(response.status)
        for key, value in response.headers.items():
            self.send_header(key, value)
        if response.chunks is None:
            self.send_header("content-length", str(len(response.body)))
            self.end_headers()
            self.wfile.write(response.body)
            return
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for number, chunk in enumerate(response.chunks):
            if response.drop_after is not None and number >= response.drop_after:
                self._drop()
                return
            self.wfile.write(f"{len(chunk):x}\r\n".encode("ascii") + chunk + b"\r\n")
            self.wfile.flush()
        if response.drop_after is not None:
            self._drop()
            return
        self.wfile.write(b"0\r\n\r\n")

    def _drop(self) -> None:
        """Cut the connection mid-body, as a crashed server or proxy would."""
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(2)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    stub: StubServer


class StubServer:
    """A scripted provider API on ``127.0.0.1``; a context manager that starts and stops it.

    Subclasses implement `handle` (route, validate, render a reply).
    """

    def __init__(self) -> None:
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.stub = self
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> StubServer:
        """Serve in a background thread."""
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def script(self, *replies: Reply) -> None:
        """Queue answers, served in order."""
        with self._lock:
            self._replies.extend(replies)

    @property
    def pending(self) -> int:
        """How many scripted replies are still unused."""
        with self._lock:
            return len(self._replies)

    def next_reply(self) -> Reply | None:
        with self._lock:
            return self._replies.popleft() if self._replies else None

    def dispatch(self, request: RecordedRequest) -> Response:
        with self._lock:
            self.requests.append(request)
        return self.handle(request)

    def handle(self, request: RecordedRequest) -> Response:
        """Answer one request (subclasses)."""
        raise NotImplementedError


def stream_response(
    content_type: str,
    events: Sequence[Any],
    render: Callable[[Any], bytes],
    drop_after: int | None,
) -> Response:
    """A chunked response with one chunk per event."""
    return Response(
        status=200,
        headers={"content-type": content_type},
        chunks=(render(event) for event in events),
        drop_after=drop_after,
    )
