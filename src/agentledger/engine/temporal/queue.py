"""On Temporal, the session's queue is owned by Temporal: a queued turn starts when the
turn ahead of it ends, even when no process that queued messages is left.

When a root run of a session ends (completed, failed, canceled or suspended:
its ending is in the store), its workflow runs one more local activity,
:data:`~agentledger.engine.temporal.options.START_DUE`, on the worker that ran
it. The activity makes the same decision every runtime makes
(:func:`agentledger.runtime.busy.due_turn`: the session's first waiting
message, only once no turn of the session runs, by reference to the turn it
follows) and starts that turn's workflow on the run's task queue, with the
ended run's engine options and the worker runtime's claim. Its turn's
workflow, when it ends, starts the next one: the messages run in arrival order.

Most runs have nothing waiting behind them. The worker's
:data:`~agentledger.runtime.wire.COMPLETE_RUN` activity therefore looks, once the
run's ending is written, whether any message of the session waits
(:attr:`~agentledger.runtime.wire.CompleteRunOutput.waiting`), and the workflow
skips :data:`~agentledger.engine.temporal.options.START_DUE` when none does. The
look is exact: the store places a message behind a turn only in the transaction
that sees that turn running, so once the ending is written no message can come
to wait behind it (a later one starts at once, by its submitter). A look that
fails says nothing (None), and the workflow starts what is due as before; so
does a history recorded before the look existed (its results carry no answer),
which therefore replays unchanged.

Exactly once: the workflow id is the message's run id, so Temporal accepts
one start of it, whoever asks (this activity retried, another worker, the
runtime that submitted the message and still follows the turn ahead, or
repair); the store's claim refuses a second run of the message on any other
engine. A run whose workflow dies without ending (terminated, or its worker
gone for good) starts nothing: ``ensure_run_completion`` closes it and starts
what is due, as on every engine.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec
from temporalio import activity
from temporalio.client import Client

from agentledger.engine.temporal.engine import TemporalEngine
from agentledger.engine.temporal.options import StartDue, StartedTurns
from agentledger.runtime.busy import due_turn, start_turn
from agentledger.runtime.wire import CompleteRunInput, CompleteRunOutput

if TYPE_CHECKING:
    from agentledger.runtime.runtime import Runtime

__all__ = ["complete_and_look", "start_due_activity"]


def complete_and_look(
    runtime: Runtime, complete: Callable[[CompleteRunInput], Awaitable[CompleteRunOutput]]
) -> Callable[[CompleteRunInput], Awaitable[CompleteRunOutput]]:
    """``complete`` (the runtime's ``complete_run``), then, for a root run of a session,
    whether a message of the session waits (see the module docstring)."""

    async def complete_run(arg: CompleteRunInput) -> CompleteRunOutput:
        out = await complete(arg)
        if not arg.run.session_id or arg.run.parent_run_id:
            return out
        try:
            pending = await runtime.store.load_pending_messages(arg.run.session_id)
        except Exception:  # the ending is written: a failed look only leaves it unknown
            return out  # and the workflow starts what is due, as without the look
        return msgspec.structs.replace(out, waiting=bool(pending))

    return complete_run


def start_due_activity(
    runtime: Runtime, client: Client
) -> Callable[[StartDue], Awaitable[StartedTurns]]:
    """The :data:`~agentledger.engine.temporal.options.START_DUE` activity of a worker for
    ``runtime`` (its store and agents) that starts workflows with ``client``."""

    async def start_due(arg: StartDue) -> StartedTurns:
        due = await due_turn(runtime, arg.session_id, runtime._busy.claim)
        if due is None or due.start is None:
            return StartedTurns()  # nothing waits, the turn ahead runs, or another agent's
        options = arg.options
        engine = TemporalEngine(
            client,
            task_queue=arg.task_queue or activity.info().task_queue,
            retry_policy=options.retry,
            activity_timeout=options.activity_timeout,
            heartbeat_timeout=options.heartbeat_timeout,
            max_payload_bytes=options.max_payload_bytes,
        )
        if not await start_turn(engine, due.start):
            return StartedTurns()  # started already (a retry, or another starter won)
        return StartedTurns(run_ids=(due.start.run_id,))

    return start_due
