"""A host runtime on Temporal for the inspector's pause test (``serve --host-runtime``).

``build`` connects to the server named by ``$AGENTLEDGER_TEST_TEMPORAL_HOST``
and runs the agents of :mod:`tests.engine.temporal.apps` on the task queue
``$AGENTLEDGER_TEST_TASK_QUEUE``; workers run the runs elsewhere.
"""

from __future__ import annotations

import os

from agentledger.engine.temporal import TemporalEngine, connect
from agentledger.runtime import Runtime
from agentledger.service import RuntimeClientHost
from agentledger.storage.protocol import AdminStore
from tests.engine.temporal import apps

TEMPORAL_ENV = "AGENTLEDGER_TEST_TEMPORAL_HOST"
QUEUE_ENV = "AGENTLEDGER_TEST_TASK_QUEUE"


async def build(store: AdminStore) -> RuntimeClientHost:
    """The service's host runtime: a Runtime whose engine is Temporal."""
    client = await connect(os.environ[TEMPORAL_ENV])
    runtime = Runtime(store, engine=TemporalEngine(client, task_queue=os.environ[QUEUE_ENV]))
    apps.setup(runtime)
    return RuntimeClientHost(runtime)
