"""``agentledger serve``: one process owns the database and serves it over HTTP [S1].

A SQLite file is served by one process: ``serve`` holds an exclusive lock on
``<file>.serve.lock`` for as long as it runs, and a second ``serve`` on the
same file is refused with a clear error. Several replicas may serve one
PostgreSQL database. On SIGINT or SIGTERM the service stops accepting
connections, refuses calls still arriving as transient, lets calls in flight
finish (up to ``grace`` seconds), ends follow streams and closes the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import signal
import socket
import sys
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import uvicorn

from agentledger.errors import AgentledgerError, ValidationError
from agentledger.service.admission import OverloadLimits
from agentledger.service.app import ServiceState, create_app
from agentledger.service.auth import TokenTable
from agentledger.service.connections import guarded_protocol
from agentledger.service.host_runtime import (
    HostRuntimeFactory,
    RuntimeHost,
    build_host_runtime,
    load_host_runtime,
)
from agentledger.service.inspector.login import SECURE_COOKIES
from agentledger.service.socket_route import SocketCalls
from agentledger.storage.encryption.config import configured_encryption
from agentledger.storage.file_mode import create_private, file_mode
from agentledger.storage.validation import (
    DEFAULT_LIMITS,
    DEFAULT_MAX_CHECKPOINT_BYTES,
    DEFAULT_MAX_PAYLOAD_BYTES,
    SizeLimits,
)
from agentledger.target import Target

if TYPE_CHECKING:
    from agentledger.storage.encryption import Encryption
    from agentledger.storage.protocol import AdminStore

__all__ = ["DEFAULT_LISTEN", "bind_listen", "open_backend", "parse_listen", "run_serve", "serve"]

DEFAULT_LISTEN = "127.0.0.1:8470"


async def open_backend(
    target: Target,
    encryption: Encryption | None = None,
    limits: SizeLimits = DEFAULT_LIMITS,
    durability: Literal["full", "normal"] = "full",
) -> AdminStore:
    """Open the database ``target`` names (created or migrated as needed) to serve it.

    ``limits``: the payload and checkpoint caps the backend enforces on writes.
    ``durability``: a SQLite file's (``"full"`` or ``"normal"``, see ``SQLiteStore``);
    a PostgreSQL database's is its server's ``synchronous_commit``.

    Raises:
        ValidationError: a service URL (a service serves a database, not another
            service), ``"normal"`` for PostgreSQL, or what the backend refuses.
        TransientError: the database cannot be reached.
    """
    if target.kind == "service":
        raise ValidationError(
            field="db", expected="a SQLite path or a PostgreSQL DSN", got=str(target)
        )
    return await target.open(encryption=encryption, limits=limits, durability=durability)


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` as (host, port); port 0 picks a free one.

    Raises:
        ValidationError: not ``HOST:PORT``.
    """
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise ValidationError(field="listen", expected="HOST:PORT", got=listen)
    return host.strip("[]"), int(port)


_BIND_TROUBLE = {
    errno.EADDRINUSE: "the address is in use (another process listens there; "
    "choose another port with --listen HOST:PORT)",
    errno.EADDRNOTAVAIL: "this machine has no such address (listen on 127.0.0.1, "
    "0.0.0.0 or one of its own addresses)",
    errno.EACCES: "permission denied (ports below 1024 need privileges)",
}


def bind_listen(listen: str) -> list[socket.socket]:
    """Sockets bound to every address ``HOST:PORT`` names (not yet listening).

    Bound before anything else starts, so that an address the service cannot
    use is refused in one line, the database untouched.

    Raises:
        ValidationError: ``field="listen"``: not ``HOST:PORT``, an unknown host,
            or an address this process cannot bind (in use, not this machine's).
    """
    host, port = parse_listen(listen)

    def refused(why: str) -> ValidationError:
        return ValidationError(
            field="listen", expected="an address this process can listen on", got=listen,
            message=f"cannot listen on {listen}: {why}",
        )  # fmt: skip

    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as e:
        raise refused(f"unknown host {host!r} ({e.strerror})") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port:
                address = (address[0], port, *address[2:])
            try:
                sock.bind(address)
            except OSError as e:
                why = _BIND_TROUBLE.get(e.errno or 0, e.strerror or str(e))
                raise refused(why) from None
            port = port or sock.getsockname()[1]  # port 0: every address on the one picked
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


@contextlib.contextmanager
def _sole_server(target: Target) -> Iterator[None]:
    """Hold ``<file>.serve.lock`` while serving a SQLite file; refuse if another holds it."""
    if target.kind != "sqlite":
        yield
        return
    lock = Path(target.path).resolve().with_name(Path(target.path).name + ".serve.lock")
    while True:
        create_private(lock)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, file_mode())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ValidationError(
                field="db",
                expected="a SQLite file no other `agentledger serve` is serving",
                got=target.path,
                message=f"{target.path} is already served by another `agentledger serve` "
                f"(pid {holder}, lock {lock}); a SQLite file is served by one process",
            ) from None
        if _same_file(fd, lock):
            break
        os.close(fd)  # a server stopping removed the file we locked: lock the new one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()  # still holding the lock: a clean stop leaves no file behind
        os.close(fd)  # releases the lock


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


class _Server(uvicorn.Server):
    """uvicorn's server, telling the app when a graceful shutdown begins."""

    def __init__(self, config: uvicorn.Config, state: ServiceState) -> None:
        super().__init__(config)
        self.agentledger = state
        self.announced = False
        """Whether the service said it was listening."""
        self.interrupted = False
        """Whether a Ctrl-C stopped it before that."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn closes a WebSocket at once: calls in flight on one answer first.
        calls: SocketCalls | None = getattr(self.config.app, "socket", None)
        if calls is not None and not self.force_exit:
            await calls.settle(self.config.timeout_graceful_shutdown or 0)
        await super().shutdown(sockets)

    def handle_exit(self, sig: int, frame: Any) -> None:
        # Like uvicorn's, minus re-raising the signal once stopped: the store
        # must still be closed, and the process exit 0 (130 for a Ctrl-C
        # that came before the service said it was listening).
        if not self.announced and sig == signal.SIGINT:
            self.interrupted = True
        self.agentledger.stopping = True
        with contextlib.suppress(RuntimeError):  # wake follow streams, so they end now
            asyncio.get_running_loop().call_soon_threadsafe(self.agentledger.notifier.stop)
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


async def serve(
    db: str | Target,
    listen: str,
    tokens: str | os.PathLike[str],
    *,
    grace: int = 30,
    on_ready: Callable[[str], None] | None = None,
    encryption: Encryption | None = None,
    limits: SizeLimits = DEFAULT_LIMITS,
    durability: Literal["full", "normal"] = "full",
    secure_cookies: str = "auto",
    host_runtime: str | None = None,
    temporal: str | None = None,
    namespace: str = "default",
    overload: OverloadLimits | None = None,
) -> None:
    """Serve ``db`` on ``listen`` until SIGINT or SIGTERM; ``on_ready(url)`` once listening.

    ``limits``: the payload and checkpoint caps the service enforces on writes.
    ``durability``: a SQLite file's commit durability (see :func:`open_backend`).
    ``secure_cookies``: when the inspector's login cookie is ``Secure`` (``auto``:
    over HTTPS; ``always`` behind a TLS proxy on another host; ``never``).
    ``host_runtime``: ``module:factory``, called with the opened store, building the
    :class:`~agentledger.service.host_runtime.RuntimeHost` that lets the inspector
    answer, fork and cancel runs (closed when the service stops).
    ``temporal``: ``HOST:PORT`` of the Temporal server running the runs (in
    ``namespace``), which the inspector asks whether a running run is paused.
    ``overload``: what the service takes on at once (connections, calls, streams, body
    bytes, slow clients); the rest is refused with a retryable 503 (see
    :mod:`agentledger.service.admission`).

    Raises:
        ValidationError: a bad ``listen``, token file, ``db`` or ``host_runtime``, or
            a SQLite file another ``serve`` is serving.
        TransientError: the database cannot be reached.
    """
    target = db if isinstance(db, Target) else Target.parse(db, default=False)
    host, _ = parse_listen(listen)
    if secure_cookies not in SECURE_COOKIES:
        raise ValidationError(
            field="secure_cookies", expected=f"one of {', '.join(SECURE_COOKIES)}",
            got=secure_cookies,
        )  # fmt: skip
    table = TokenTable.load(tokens)
    factory = load_host_runtime(host_runtime) if host_runtime else None
    sockets = bind_listen(listen)
    try:
        with _sole_server(target):
            await _serve_store(
                target, sockets, host, table, factory, grace=grace, on_ready=on_ready,
                encryption=encryption, limits=limits, durability=durability,
                secure_cookies=secure_cookies, temporal=temporal, namespace=namespace,
                overload=overload or OverloadLimits(),
            )  # fmt: skip
    finally:
        for sock in sockets:
            sock.close()


async def _serve_store(
    target: Target,
    sockets: list[socket.socket],
    host: str,
    table: TokenTable,
    factory: HostRuntimeFactory | None,
    *,
    grace: int,
    on_ready: Callable[[str], None] | None,
    encryption: Encryption | None,
    limits: SizeLimits,
    durability: Literal["full", "normal"],
    secure_cookies: str,
    temporal: str | None,
    namespace: str,
    overload: OverloadLimits,
) -> None:
    """:func:`serve` once its address is bound and its SQLite file locked."""
    store = await open_backend(target, encryption, limits, durability)
    runtime_host: RuntimeHost | None = None
    try:
        if factory is not None:
            runtime_host = await build_host_runtime(factory, store)
        state = ServiceState(store, table, secure_cookies=secure_cookies,
                             host_runtime=runtime_host, overload=overload)  # fmt: skip
        if temporal:
            from agentledger.engine.temporal.client import connect

            state.temporal = await connect(temporal, namespace=namespace)
        config = uvicorn.Config(
            create_app(state=state),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=max(1, grace),
            # Longer than StoreClient's, so the client closes an idle connection first.
            timeout_keep_alive=75,
            server_header=False,
            # Connections, slow headers and bodies, unread answers: bounded (see .connections).
            http=guarded_protocol(overload, state.admission),
            # Its frames of calls take a short way (see .socket_protocol).
            ws=_ws_protocol(),
            backlog=4096,
        )
        server = _Server(config, state)
        task = asyncio.create_task(server.serve(sockets=sockets))
        while not server.started and not task.done():  # noqa: ASYNC110 (a flag, no event)
            await asyncio.sleep(0.01)
        if server.started and not state.stopping:
            server.announced = True
            if on_ready is not None:
                port = sockets[0].getsockname()[1]
                on_ready(f"http://{host if ':' not in host else f'[{host}]'}:{port}")
        await task
        if server.interrupted:
            raise KeyboardInterrupt
    finally:
        try:
            if runtime_host is not None:
                await runtime_host.close()
        finally:
            await store.close()


_UVICORN_TESTED_BELOW = (0, 56)
"""The first uvicorn release :mod:`.socket_protocol` has not been tested against: it reads
attributes of uvicorn's own protocol, which a later release may rename."""


def _ws_protocol(uvicorn_version: str | None = None) -> type[asyncio.Protocol] | Literal["auto"]:
    """The WebSocket protocol: :mod:`.socket_protocol`'s, on uvicorn's sans-I/O protocol of
    the ``websockets`` library, for the uvicorn releases it was tested with; otherwise (an
    older or a newer uvicorn, no ``websockets``) uvicorn's choice, which reads every frame
    the ASGI way, slower but the same answers (or has no WebSocket: then StoreClient calls
    over HTTP)."""
    try:
        import uvicorn

        from agentledger.service.socket_protocol import SocketProtocol
    except ImportError:
        return "auto"
    release = uvicorn_version if uvicorn_version is not None else uvicorn.__version__
    try:
        major_minor = tuple(int(part) for part in release.split(".")[:2])
    except ValueError:
        return "auto"
    if major_minor >= _UVICORN_TESTED_BELOW:
        return "auto"
    return SocketProtocol


def _event_loop_runner() -> Callable[[Coroutine[Any, Any, None]], None]:
    """uvloop's runner when it is installed (the ``service`` extra), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    runner: Callable[[Coroutine[Any, Any, None]], None] = uvloop.run
    return runner


def run_serve(
    db: str,
    listen: str,
    tokens: str,
    keyring: str | None = None,
    vault: str | None = None,
    *,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    max_checkpoint_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES,
    durability: Literal["full", "normal"] = "full",
    secure_cookies: str = "auto",
    host_runtime: str | None = None,
    temporal: str | None = None,
    namespace: str = "default",
    overload: dict[str, float | None] | None = None,
) -> int:
    """The ``agentledger serve`` command: serve until stopped; the exit status.

    ``overload``: :class:`OverloadLimits` fields to set (the rest keep their defaults).
    """
    target = Target.parse(db, default=False) if db else None

    def ready(url: str) -> None:
        print(
            f"agentledger serve: listening on {url} (store {target}, pid {os.getpid()}); "
            f"web inspector: {url}/ui",
            flush=True,
        )

    try:
        if target is None:
            raise ValidationError(field="db", expected="a SQLite path or a PostgreSQL DSN", got="")
        encryption = configured_encryption(keyring, vault)
        limits = SizeLimits(
            max_payload_bytes=max_payload_bytes, max_checkpoint_bytes=max_checkpoint_bytes
        )
        given = {name: value for name, value in (overload or {}).items() if value is not None}
        if "max_calls" in given and "max_calls_per_token" not in given:
            given["max_calls_per_token"] = max(1, int(given["max_calls"]) // 2)
        if "max_streams" in given and "max_streams_per_token" not in given:
            given["max_streams_per_token"] = given["max_streams"]
        overload_limits = OverloadLimits(**cast(dict[str, Any], given))
        _event_loop_runner()(
            serve(
                target,
                listen,
                tokens,
                on_ready=ready,
                encryption=encryption,
                limits=limits,
                durability=durability,
                secure_cookies=secure_cookies,
                host_runtime=host_runtime,
                temporal=temporal,
                namespace=namespace,
                overload=overload_limits,
            )
        )
    except AgentledgerError as e:
        print(f"agentledger serve: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("agentledger serve: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    print("agentledger serve: stopped", flush=True)
    return 0
