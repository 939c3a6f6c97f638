"""Host-side store calls from code that is not async: scripts, WSGI handlers, notebooks.

:class:`SyncStore` wraps any async store (``SQLiteStore``, ``PostgresStore``,
``MemoryStore``...) and runs each call on a private event loop in a thread of
its own, blocking until the answer arrives. Every method delegates to the
store's async method of the same name (signature, result and typed errors are
the async ones): there is no second copy of any logic::

    from datetime import UTC, datetime
    from agentledger import sync

    with sync.open_sqlite("ledger.db") as store:
        store.create_session("chat-1", created_at=datetime.now(UTC).replace(microsecond=0))
        print(store.list_sessions().sessions)

A ``SyncStore`` may be shared by threads; calls from an ``async`` function
would block its event loop, so async code should use the store directly.
Encryption at rest [A2] is the async store's: ``open_sqlite(path,
encryption=Encryption(keyring, vault))``, then ``erase_session_keys`` and
``rotate_keys`` block like every other call.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

from agentledger.errors import StoreClosedError, ValidationError
from agentledger.storage.protocol import SessionAdmin, Store
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.transcript import Message

if TYPE_CHECKING:
    from agentledger.storage.archive import ArchiveManifest
    from agentledger.storage.encryption import Encryption

__all__ = ["SyncStore", "open_postgres", "open_sqlite"]

P = ParamSpec("P")
T = TypeVar("T")


class _LoopThread:
    """One event loop running forever in a daemon thread; coroutines are submitted to it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="agentledger-sync", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (or its exception)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a SyncStore call made from its own event loop would deadlock")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        try:  # join the worker threads of asyncio.to_thread calls: close leaves none running
            self.run(self.loop.shutdown_default_executor())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join()
            self.loop.close()


class _Blocking(Generic[P, T]):
    """A method of :class:`SyncStore` that calls the async method of the same name.

    Typed from the protocol method it mirrors, so the blocking signature and
    result follow the async ones wherever they change.
    """

    def __init__(self, method: Callable[Concatenate[Any, P], Awaitable[T]]) -> None:
        self.__doc__ = method.__doc__
        self._name = method.__name__

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, obj: SyncStore, owner: type[Any]) -> Callable[P, T]: ...

    def __get__(self, obj: SyncStore | None, owner: type[Any]) -> Self | Callable[P, T]:
        if obj is None:
            return self
        name = self._name

        def call(*args: P.args, **kwargs: P.kwargs) -> T:
            method: Callable[P, Awaitable[T]] = getattr(obj.store, name)
            return obj.run(method(*args, **kwargs))

        call.__name__ = name
        call.__doc__ = self.__doc__
        return call


class SyncStore:
    """A blocking view of an async store, for host code that is not async."""

    def __init__(self, store: Any, *, _loop: _LoopThread | None = None) -> None:
        """Wrap ``store``, whose async methods run on this facade's own loop thread.

        A store bound to an event loop (connection pools are) must have been
        opened on that same loop: use :meth:`open`, :func:`open_sqlite` or
        :func:`open_postgres`, which do so.
        """
        self.store = store
        """The async store every call is delegated to."""
        self._loop = _loop or _LoopThread()

    @classmethod
    def open(cls, opener: Callable[P, Any], /, *args: P.args, **kwargs: P.kwargs) -> SyncStore:
        """Open a store with ``opener(*args, **kwargs)`` (awaited if it is awaitable).

        ``SyncStore.open(SQLiteStore.open, "ledger.db")``, ``SyncStore.open(MemoryStore)``.
        """
        loop = _LoopThread()
        try:
            store = loop.run(_opened(opener, *args, **kwargs))
        except BaseException:
            loop.stop()
            raise
        return cls(store, _loop=loop)

    def run(self, awaitable: Awaitable[T]) -> T:
        """Run any awaitable on this store's loop (for calls this facade does not name).

        Raises:
            StoreClosedError: the facade is closed (as the store it wraps would say).
        """
        if self._loop.loop.is_closed():
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            raise StoreClosedError(backend=_backend(self.store))
        return self._loop.run(_awaited(awaitable))

    def close(self) -> None:
        """Close the store (if it has an async ``close``) and stop the loop; idempotent."""
        if self._loop.loop.is_closed():
            return
        close = getattr(self.store, "close", None)
        try:
            if close is not None and inspect.iscoroutinefunction(close):
                self.run(close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------ sessions (host)
    create_session = _Blocking(SessionAdmin.create_session)
    load_session = _Blocking(SessionAdmin.load_session)
    end_session = _Blocking(SessionAdmin.end_session)
    purge_session = _Blocking(SessionAdmin.purge_session)
    list_sessions = _Blocking(SessionAdmin.list_sessions)
    list_runs_by_session = _Blocking(SessionAdmin.list_runs_by_session)
    usage_by_label = _Blocking(SessionAdmin.usage_by_label)
    list_derived_copies = _Blocking(SessionAdmin.list_derived_copies)

    # ------------------------------------------------------------ reads
    load_session_status = _Blocking(Store.load_session_status)
    load_run = _Blocking(Store.load_run)
    load_run_suspension = _Blocking(Store.load_run_suspension)
    list_run_records = _Blocking(Store.list_run_records)
    load_transcript_chain = _Blocking(Store.load_transcript_chain)
    list_session_run_records = _Blocking(Store.list_session_run_records)
    load_session_usage = _Blocking(Store.load_session_usage)
    load_run_usage = _Blocking(Store.load_run_usage)
    search = _Blocking(Store.search)

    def transcript(self, run_id: str, *, full: bool = False) -> list[Message]:
        """[R2] The run's transcript, replayed from its record log: what its model is sent
        now, or with ``full`` the whole conversation [V5]."""
        return self.run(build_messages_from_run_log(self.store, run_id, full=full))

    # ------------------------------------------------------------ archives [A1]

    def archive_session(self, session_id: str, path: str | os.PathLike[str]) -> ArchiveManifest:
        """Write the ended session to one archive file (see ``storage.archive.archive_session``)."""
        from agentledger.storage.archive import archive_session

        return self.run(archive_session(self.store, session_id, path))

    def restore_archive(self, path: str | os.PathLike[str]) -> ArchiveManifest:
        """Recreate an archived session (see ``storage.archive.restore_archive``)."""
        from agentledger.storage.archive import restore_archive

        return self.run(restore_archive(self.store, path))

    # ------------------------------------------------------------ encryption at rest [A2]

    def erase_session_keys(self, session_id: str, /) -> bool:
        """Destroy the session's data key (crypto-erasure); False if it was erased before."""
        erased: bool = self.run(self._encrypted("erase_session_keys")(session_id))
        return erased

    def rotate_keys(self) -> int:
        """Rewrap every data key under the keyring's current key; how many were rewrapped."""
        rewrapped: int = self.run(self._encrypted("rotate_keys")())
        return rewrapped

    def _encrypted(self, name: str) -> Callable[..., Awaitable[Any]]:
        method: Callable[..., Awaitable[Any]] | None = getattr(self.store, name, None)
        if method is None:  # a store that cannot encrypt at all (MemoryStore, a StoreClient)
            raise ValidationError(
                field="encryption",
                expected="a store opened with encryption",
                got=type(self.store).__name__,
            )
        return method


async def _opened(opener: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    store = opener(*args, **kwargs)
    return await store if inspect.isawaitable(store) else store


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


def open_sqlite(
    path: str | os.PathLike[str], *, encryption: Encryption | None = None, **options: Any
) -> SyncStore:
    """Open a ``SQLiteStore`` (``options`` as for ``SQLiteStore.open``) for blocking calls.

    ``encryption`` seals payloads and checkpoints at rest [A2], as for the async store.
    """
    from agentledger.storage.sqlite import SQLiteStore

    return SyncStore.open(SQLiteStore.open, path, encryption=encryption, **options)


def open_postgres(dsn: str, *, encryption: Encryption | None = None, **options: Any) -> SyncStore:
    """Open a ``PostgresStore`` (``options`` as for ``PostgresStore.open``) for blocking calls.

    ``encryption`` seals payloads and checkpoints at rest [A2], as for the async store.
    """
    from agentledger.storage.postgres import PostgresStore

    return SyncStore.open(PostgresStore.open, dsn, encryption=encryption, **options)


def _backend(store: object) -> str:
    """The ``backend`` a ``StoreClosedError`` names for ``store``."""
    names = {
        "MemoryStore": "memory",
        "SQLiteStore": "sqlite",
        "PostgresStore": "postgres",
        "StoreClient": "service",
    }
    return names.get(type(store).__name__, type(store).__name__)
