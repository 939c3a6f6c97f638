"""A host runtime given to the store service, so the inspector can act on runs that need agents.

The store service runs no agents. Answering a suspended run, forking a
conversation from one of its messages and reaching the engine that runs a
run are a runtime's work: a process embedding the service passes a
:class:`RuntimeHost` to :func:`agentledger.service.create_app`, and
``agentledger serve --host-runtime module:factory`` builds one with the
factory named (called with the opened store). :class:`RuntimeClientHost` is
that protocol over an :class:`agentledger.runtime.Runtime`: each action is the
runtime's own client call, so it creates the usual runs and records [K1] [V2] [C1].
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from agentledger.errors import ValidationError
from agentledger.runtime.planner import Answer
from agentledger.storage.protocol import AdminStore

if TYPE_CHECKING:
    from temporalio.client import Client

    from agentledger.runtime.runtime import Runtime

__all__ = [
    "ChatHost",
    "HostRuntimeFactory",
    "RuntimeClientHost",
    "RuntimeHost",
    "build_host_runtime",
    "load_host_runtime",
    "request_cancellation",
]


@runtime_checkable
class RuntimeHost(Protocol):
    """What the service asks of a host runtime; every method raises the store's typed errors."""

    async def resume(self, run_id: str, answer: Answer) -> str:
        """Start the continuation of the suspended run ``run_id`` with ``answer``; its run id."""
        ...

    async def fork(
        self, source_run_id: str, message: str, through: str, session_id: str | None = None
    ) -> str:
        """Start a branch of ``source_run_id``'s conversation cut after its record
        ``through``, with the user's ``message`` next; the new run's id."""
        ...

    async def cancel(self, run_id: str, reason: str) -> bool:
        """Record the cancellation request and ask the engine to stop the run; whether
        the engine knew the run (False: it ends when the host running it acts)."""
        ...

    def temporal_client(self) -> Client | None:
        """The Temporal client of the engine its runs run on, which the inspector asks
        whether a run is paused; None when they run elsewhere."""
        ...

    async def close(self) -> None:
        """Stop what the host started (called once, when the service stops)."""
        ...


@runtime_checkable
class ChatHost(Protocol):
    """A host runtime that also takes new messages: the inspector's message box and its
    "new session" (optional: a :class:`RuntimeHost` without these only answers, forks and
    cancels)."""

    def agents(self) -> list[str]:
        """The agents a new session may be started with."""
        ...

    async def send(
        self,
        session_id: str,
        message: str,
        *,
        agent_id: str,
        if_busy: str = "queue",
        after: str = "",
    ) -> str:
        """Submit the user's ``message`` to ``session_id`` as its next turn by ``agent_id``,
        following the turn ``after`` by reference ("": the store picks the session's latest
        turn; ``if_busy`` says what it does while a turn runs); the run id of its turn."""
        ...


HostRuntimeFactory: TypeAlias = Callable[[Any], "RuntimeHost | Awaitable[RuntimeHost]"]
"""Builds a host runtime over the service's opened store (sync or async)."""


class RuntimeClientHost:
    """:class:`RuntimeHost` over a :class:`~agentledger.runtime.Runtime` and its agent clients.

    Runs started here run in the runtime's engine (in this process for the
    in-process engine), writing to the runtime's store. ``close`` closes the
    runtime unless ``owns_runtime`` is False.
    """

    def __init__(
        self, runtime: Runtime, *, owns_runtime: bool = True, agents: Sequence[str] = ()
    ) -> None:
        self.runtime = runtime
        self.owns_runtime = owns_runtime
        self.offered = list(agents)
        """The agents offered for a new session (:meth:`agents`)."""

    def agents(self) -> list[str]:
        """The agents named when it was built, for a new session."""
        return list(self.offered)

    async def send(
        self,
        session_id: str,
        message: str,
        *,
        agent_id: str,
        if_busy: str = "queue",
        after: str = "",
    ) -> str:
        """The message's turn by ``AgentClient.start(..., if_busy=..., after=...)``: its
        history is the turn ``after`` (or the store's choice of the latest), by reference.

        Raises:
            ValidationError: an unknown agent, an empty message or an unknown ``if_busy``.
            SessionBusyError: ``if_busy="reject"`` while a turn runs.
        """
        if not message.strip():
            raise ValidationError(field="message", expected="the user's message", got=message)
        client = self.runtime.agent_client(agent_id)
        handle = await client.start(session_id, message, if_busy=if_busy, after=after or None)
        return handle.run_id

    async def resume(self, run_id: str, answer: Answer) -> str:
        """[K1] the continuation, by the suspended run's own agent, in its session."""
        meta = await self.runtime.store.load_run(run_id)
        client = self.runtime.agent_client(meta.agent_id)
        handle = await client.start_resume(meta.session_id, run_id, answer)
        return handle.run_id

    async def fork(
        self, source_run_id: str, message: str, through: str, session_id: str | None = None
    ) -> str:
        """[V2] a fork by the source run's agent (in its session unless ``session_id``)."""
        meta = await self.runtime.store.load_run(source_run_id)
        client = self.runtime.agent_client(meta.agent_id)
        handle = await client.start_fork(source_run_id, message, through or None, session_id)
        return handle.run_id

    async def cancel(self, run_id: str, reason: str) -> bool:
        """[C1] ``Runtime.cancel_run``: the intent recorded, then the engine asked."""
        await self.runtime.cancel_run(run_id, reason)
        return await self.runtime.engine.describe(run_id) is not None

    def temporal_client(self) -> Client | None:
        """The client of the runtime's engine when it is a ``TemporalEngine``."""
        if "agentledger.engine.temporal.engine" not in sys.modules:
            return None  # never imported: the runtime's engine is not a TemporalEngine
        from agentledger.engine.temporal.engine import TemporalEngine

        engine = self.runtime.engine
        return engine.client if isinstance(engine, TemporalEngine) else None

    async def close(self) -> None:
        if self.owns_runtime:
            await self.runtime.close()


async def request_cancellation(store: AdminStore, run_id: str, reason: str) -> None:
    """[C1] ``Runtime.cancel_run`` where no runtime runs the run: the request is recorded
    (the reason in the run's metadata and a ``runtime.cancellation_intent`` record), and
    the run ends canceled once the host running it acts on it.

    Raises:
        the store's typed errors, as ``Runtime.cancel_run`` (an empty or reserved
        reason, a run that already ended, another reason recorded first).
    """
    from agentledger.runtime.runtime import Runtime

    runtime = Runtime(store)  # its engine runs nothing: only the intent is recorded
    try:
        await runtime.cancel_run(run_id, reason)
    finally:
        await runtime.close()


def load_host_runtime(spec: str) -> HostRuntimeFactory:
    """The factory ``spec`` names (``package.module:function``), imported.

    The current folder is searched first (as uvicorn does for its app), so a
    module beside where ``serve`` runs is found by the console script too; it is
    searched only while the module is imported (``sys.path`` is left as it was).

    Raises:
        ValidationError: not ``module:function``, a module that does not import,
            or a name that is not a callable in it.
    """
    module_name, colon, name = spec.partition(":")
    if not colon or not module_name.strip() or not name.strip():
        raise ValidationError(field="host_runtime", expected="package.module:factory", got=spec)
    here = os.getcwd()
    searched = here not in sys.path
    if searched:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name.strip())
    except ImportError as e:
        raise ValidationError(
            field="host_runtime",
            expected="a module this Python can import",
            got=f"{module_name} ({e})",
        ) from None
    finally:
        if searched and here in sys.path:
            sys.path.remove(here)
    factory = getattr(module, name.strip(), None)
    if not callable(factory):
        raise ValidationError(
            field="host_runtime", expected=f"a callable named {name!r} in {module_name}", got=spec
        )
    return factory  # type: ignore[no-any-return]


async def build_host_runtime(factory: HostRuntimeFactory, store: AdminStore) -> RuntimeHost:
    """Call ``factory(store)`` (awaiting it if it is async) and check what it built.

    Raises:
        ValidationError: the factory built something that is not a RuntimeHost.
    """
    built = factory(store)
    if inspect.isawaitable(built):
        built = await built
    if not isinstance(built, RuntimeHost):
        raise ValidationError(
            field="host_runtime",
            expected="a RuntimeHost (resume, fork, cancel, temporal_client, close), "
            "e.g. RuntimeClientHost(runtime)",
            got=type(built).__name__,
        )
    return built
