"""The Temporal engine: durable, distributed runs on a Temporal server.

Needs agentledger's ``[temporal]`` extra (the SDK and the
``temporal`` CLI, whose ``temporal server start-dev`` is a complete local
server). A host starts runs through :class:`TemporalEngine`; workers made by
:func:`create_worker`, in any number of processes sharing one store, run them::

    client = await connect("127.0.0.1:7233")
    runtime = Runtime(store, engine=TemporalEngine(client, task_queue="agentledger"))
    ...register agents, toolsets, models...
    worker = create_worker(runtime, client, "agentledger")
    async with worker:
        out = await runtime.agent_client("chat").run(session_id, messages)

Design:

* One workflow per run (roots, children, continuations), workflow id = run
  id. ``TemporalEngine.start`` only has Temporal accept the workflow; its
  first activity starts the run in the store [O1]. Temporal holds the
  workflow state and retries; the store holds the run state and records.
* Store writes, planner turns and tool calls are activities: the runtime's
  own activities, registered on the worker. A
  :class:`~agentledger.errors.ContractError` is a non-retryable
  ``ApplicationError``; a :class:`~agentledger.errors.TransientError` is
  retried by Temporal with the runtime's :class:`~agentledger.engine.RetryPolicy`
  (same fields). Record timestamps come from ``workflow.now()`` (ms) and event
  keys from the run's step, so a retried or replayed activity is an exact
  retry [X1].
* An agent used as a tool is a child workflow with parent close policy
  TERMINATE; a child whose parent closed first is closed by
  ``runtime.ensure_run_completion`` with a [C3] ``engine_canceled`` ending.
* Cancellation: ``RunHandle.cancel(reason)`` / ``runtime.cancel_run`` records
  the reason [C1] and then cancels the workflow through Temporal; a cancel
  sent straight to Temporal (``temporal workflow cancel``) has no recorded
  reason and ends the run ``engine_canceled`` [C3]. Either way the run loop
  writes its own canceled ending. Cancellation reaches a running planner turn
  or tool call with its next heartbeat (at most about a second).
* Suspension ends the workflow with the checkpoint stored [L6]; ``resume``
  starts a new workflow for the continuation run [K1].

Payload discipline and limits (Temporal server defaults):

* A payload set (one workflow input, one activity input or result) above
  2 MiB is refused by the server (``limit.blobSize.error``). We guard at
  ``max_payload_bytes`` (default 1 MiB): a run input over it is refused by
  ``TemporalEngine.start`` with a ValidationError; an activity input or
  result over it fails that activity for good (``PayloadTooLargeError``),
  so a tool result that is too big becomes an error tool result and a plan
  that is too big fails the run, instead of a workflow task failing forever.
* Workflows carry ids and small commands: the run input (the new message
  and any history the host passes in, which cannot be stored before [O1]),
  one plan, one batch of tool calls or results, one batch of records at a
  time. The transcript itself is read from the store by the planner
  activity, never carried by the workflow.
* History: Temporal ends a workflow at 51,200 events or 50 MiB of history
  (warnings from 10,240 events / 10 MiB). A run is one bounded workflow
  (``Agent.max_turns``, default 16), so it never needs continue-as-new.
  Measured on the dev server (``tests/engine/temporal/test_limits.py``,
  constants in :mod:`~agentledger.engine.temporal.options`): a run that
  answers at once, or after one tool turn of one call, costs 13 events (a
  local activity marker to begin, the planner's activity, which runs a
  lone call and the planner turn after it too, a marker to end, and their
  workflow tasks; 3 more when a message of its session waits behind it,
  for the step that starts that message's turn); each further planner
  turn with one tool call adds 6 (the call's activity, which runs the
  next planner turn too, and the workflow task that follows it; 6 more
  when the call or that turn is handed back after a lost attempt or a
  TransientError), a turn of parallel calls 12 and 3 to 6 per extra call.
  That is 8,531 one-call tool turns before the event limit (1,705 before
  the warning); with 4 parallel calls per turn, 1,706.
  By size, a turn without large payloads adds about 2 KB; a tool's output
  is copied into the history about once (the result its activity carries
  back; the next planner turn's input is made in that activity), so turns
  that each return 100 KB reach the 50 MiB limit after about 480 turns
  and the 10 MiB warning after about 95.
* Failures of the run loop's own code (a bug, a sandbox violation) fail
  the workflow *task*, which Temporal retries until a fixed worker is
  deployed; the run stays as the store has it meanwhile (paused), also when
  the bug strikes right after the task wrote to the store: the run's clock
  comes from its history (see :mod:`.workflows`), so a retry repeats those
  writes exactly and nothing is written twice.
  :mod:`~agentledger.engine.temporal.paused` finds paused runs and their
  errors (``agentledger check --temporal``, ``runs --temporal``, the inspector).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentledger.engine.temporal.client import check_client, connect
    from agentledger.engine.temporal.converter import data_converter
    from agentledger.engine.temporal.engine import TemporalEngine
    from agentledger.engine.temporal.options import EngineOptions
    from agentledger.engine.temporal.worker import create_replayer, create_worker
    from agentledger.engine.temporal.workflows import WORKFLOW_NAME, AgentRunWorkflow

__all__ = [
    "WORKFLOW_NAME",
    "AgentRunWorkflow",
    "EngineOptions",
    "TemporalEngine",
    "check_client",
    "connect",
    "create_replayer",
    "create_worker",
    "data_converter",
]

_HOMES = {
    "WORKFLOW_NAME": "workflows",
    "AgentRunWorkflow": "workflows",
    "EngineOptions": "options",
    "TemporalEngine": "engine",
    "check_client": "client",
    "connect": "client",
    "create_replayer": "worker",
    "create_worker": "worker",
    "data_converter": "converter",
}


def __getattr__(name: str) -> Any:
    # Lazy: importing temporalio takes seconds, and ``agentledger`` commands
    # other than ``worker`` must not pay for it.
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(f"{__name__}.{home}")
    except ImportError as e:
        if e.name is None or e.name.startswith("agentledger"):
            raise
        from agentledger._extras import needs_extra

        raise needs_extra("the Temporal engine", "temporal", e) from e
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
