"""What every request of one store service shares: :class:`ServiceState`.

Its own module, below the rooms that use it (the store calls, the inspector, the
host runtime's actions), so each of them imports it and none imports another to
reach it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentledger.service.admission import Admission, OverloadLimits
from agentledger.service.auth import TokenTable
from agentledger.service.follow import BacklogBudget, Notifier
from agentledger.service.host_runtime import RuntimeHost
from agentledger.service.metrics import ServiceMetrics
from agentledger.service.wire import body_cap
from agentledger.storage.protocol import AdminStore
from agentledger.storage.validation import DEFAULT_LIMITS, SizeLimits

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = ["ServiceState"]


class ServiceState:
    """What every request of one service shares: the backend, tokens, metrics, followers,
    and what it is serving now against its overload limits (``admission``).

    ``stopping`` is set when a graceful shutdown begins: calls still arriving
    are refused as transient (the client retries elsewhere or later) and
    follow streams end, while calls already running finish.
    """

    def __init__(
        self,
        store: AdminStore,
        tokens: TokenTable,
        *,
        secure_cookies: str = "auto",
        host_runtime: RuntimeHost | None = None,
        overload: OverloadLimits | None = None,
    ) -> None:
        self.store = store
        self.host_runtime = host_runtime
        """What answers, forks and cancels runs for the inspector (None: it only records)."""
        self.secure_cookies = secure_cookies
        """When the inspector's login cookie is ``Secure``: auto (over HTTPS), always, never."""
        self.limits: SizeLimits = getattr(store, "limits", DEFAULT_LIMITS)
        self.tokens = tokens
        self.metrics = ServiceMetrics()
        self.usage_label = "tenant"
        """The session label ``/metrics`` totals usage by, one series per value ("": none)."""
        self.stopping = False
        self.overload = OverloadLimits() if overload is None else overload
        """What the service takes on at once (see :mod:`agentledger.service.admission`)."""
        self.admission = Admission(self.overload, body_cap(self.limits))
        self.admission.register(self.metrics.registry)
        self.notifier = Notifier(
            BacklogBudget(self.overload.max_backlog_bytes, on_cut=self._backlog_cut)
        )
        self.temporal: Client | None = None
        """A Temporal client the inspector asks whether a running run is paused (``serve
        --temporal``); None: the host runtime's, when it runs on Temporal."""

    def _backlog_cut(self, reason: str) -> None:
        """A follow stream's backlog was dropped: counted with what was shed (its client's
        slowness, not the service's load)."""
        self.admission.note_shed(reason, busy=False)
