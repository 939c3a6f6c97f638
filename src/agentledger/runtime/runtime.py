"""Runtime: the store, the engine and everything registered, in one object.

A host builds one ``Runtime`` per process, registers agents, toolsets and
models, then runs agents through ``agent_client(...)``. Registration closes
at the first run. The engine is whatever was given (``InProcessEngine`` by
default); the runtime talks to it only through the ``Engine`` protocol.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from agentledger.engine.base import Activity, Engine
from agentledger.engine.inprocess import InProcessEngine
from agentledger.errors import RunNotActiveError, ValidationError
from agentledger.memory.types import ProductMemory
from agentledger.observability.models import traced_model
from agentledger.observability.store import traced_store
from agentledger.providers.model import ModelClient
from agentledger.runtime.activities import Activities
from agentledger.runtime.agent import Agent
from agentledger.runtime.busy import BusyTurns
from agentledger.runtime.client import AgentClient
from agentledger.runtime.completion import Completion, ensure_run_completion
from agentledger.runtime.registry import Registry
from agentledger.runtime.stream import StreamSink
from agentledger.runtime.tools import Toolset
from agentledger.runtime.workflow import run_workflow
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.protocol import Store
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.storage.types import RunStart, RunStatus, SessionStatus
from agentledger.transcript import Message

__all__ = ["Runtime"]


def _now_ms() -> datetime:
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


class Runtime:
    """Agents, their tools and models, run on an engine over one store.

    Args:
        store: the runtime store every write goes through.
        engine: runs the workflows (default: a new ``InProcessEngine``).
        memory: product memory to feed with each run's transcript events.
        stream: where run events go (required by ``ensure_run_completion``
            for runs of active sessions).
    """

    def __init__(
        self,
        store: Store,
        engine: Engine | None = None,
        memory: ProductMemory | None = None,
        stream: StreamSink | None = None,
    ) -> None:
        self.store = store
        self.engine: Engine = engine if engine is not None else InProcessEngine()
        self.memory = memory
        self.stream = stream
        self._registry = Registry()
        self._activities = Activities(traced_store(store), self._registry, stream, memory)
        self._busy = BusyTurns(self)

    # ------------------------------------------------------------ registration

    def register_agent(self, agent: Agent) -> None:
        """Register an agent.

        Raises:
            ValidationError: not an Agent, a duplicate id, or a tool that is not a
                toolset name, ``Tool``, ``Toolset`` or ``agent_tool``.
            RegistrationClosedError: a run has already started.
        """
        self._registry.add_agent(agent)

    def register_toolset(self, toolset: Toolset) -> None:
        """Register a toolset agents can name in ``tools=``."""
        self._registry.add_toolset(toolset)

    def register_model(self, model_id: str, client: ModelClient) -> None:
        """Register a model client under ``model_id`` (what ``ModelPlanner(model_id)`` uses)."""
        self._registry.add_model(model_id, traced_model(client, model_id))

    def _close_registration(self) -> None:
        if not self._registry.closed:
            self._registry.close()
            ending = isinstance(self.engine, InProcessEngine)  # nothing else to do at an end
            self.engine.bind(run_workflow, self._activities.table(ending=ending))

    def activity_table(self) -> Mapping[str, Activity]:
        """Close registration and return every activity by name: what a worker runs.

        A worker process (e.g. a Temporal worker) registers these without
        starting a run; the runtime's first run would close registration too.

        Raises:
            ValidationError: the registration does not resolve.
        """
        self._close_registration()
        return self._activities.table()

    # ------------------------------------------------------------------- runs

    def agent_client(self, agent_id: str) -> AgentClient:
        """A client for runs of ``agent_id``.

        Raises:
            ValidationError: no agent ``agent_id`` is registered, or the
                registration does not resolve (an unknown toolset or agent).
        """
        if not isinstance(agent_id, str) or not agent_id:
            raise ValidationError(field="agent_id", expected="a non-empty string", got=agent_id)
        self._registry.check(agent_id)
        return AgentClient(self, agent_id)

    async def cancel_run(self, run_id: str, reason: str) -> None:
        """[C1] record the cancellation intent, then ask the engine to cancel the run.

        The run stops at its next safe point; its terminal record repeats
        ``reason``. Asking again with the same reason is a no-op, also once
        the run has ended canceled with it.

        Raises:
            ValidationError: ``reason`` is empty or reserved (``session_ended``,
                ``engine_canceled``); nothing is recorded and nothing canceled.
            RunNotActiveError: the run already ended.
            RunCancellationConflictError: another reason was recorded first.
        """
        reserved = payloads.RESERVED_REASONS  # the runtime writes these itself
        if not isinstance(reason, str) or not reason or reason in reserved:
            raise ValidationError(
                field="reason",
                expected="a non-empty reason other than the reserved "
                f"{sorted(reserved)} (an explicit cancel records the caller's reason)",
                got=reason,
            )
        meta = await self.store.load_run(run_id)
        if meta.status is RunStatus.CANCELED and meta.cancellation_reason == reason:
            return  # asked again after the first request already ended the run
        if meta.status is not RunStatus.RUNNING:
            raise RunNotActiveError(run_id=run_id, expected="running", got=meta.status.value)
        if meta.cancellation_reason != reason:
            cmd = RecordBuilder(RunStart.of(meta)).cancellation(reason, at=_now_ms())
            await self._activities.store.record_run_cancellation(cmd)  # traced
            await self._activities.publish([cmd.record])
        await self.engine.cancel(run_id)

    async def load_session_status(self, session_id: str) -> SessionStatus:
        """Whether the session still accepts new work."""
        return await self.store.load_session_status(session_id)

    async def ensure_run_completion(self, run_id: str) -> Completion:
        """[E2] close a run whose workflow is gone; redeliver a closed run's final event.

        Raises:
            ValidationError: the session is active and the runtime has no stream.
            CorruptRecordError: stored data contradicts the contract.
        """
        completion = await ensure_run_completion(self.store, self.engine, self.stream, run_id)
        meta = await self.store.load_run(run_id)
        if meta.session_id and not meta.parent_run_id:  # what waited for it may start now
            await self.start_queued(meta.session_id)
        return completion

    async def start_queued(self, session_id: str) -> list[str]:
        """Start the session's first waiting message if the turn ahead of it has ended
        (else follow that turn and start it then): what a runtime does when it opens a
        session after another process queued messages and stopped. Returns the run ids
        started here.

        Raises:
            SessionNotFoundError, SessionPurgedError: no such session.
        """
        return await self._busy.start_due(session_id)

    async def transcript(self, run_id: str, *, full: bool = False) -> list[Message]:
        """The run's transcript, rebuilt from its records [R2]: what its model is sent now
        (its agent's history policy applied [V5]), or with ``full`` the whole conversation."""
        return await build_messages_from_run_log(self.store, run_id, full=full)

    async def close(self) -> None:
        """Cancel runs still going in this runtime's engine, wait for them, close the stream."""
        await self._busy.close()
        await self.engine.close()
        if self.stream is not None:
            await self.stream.close()
