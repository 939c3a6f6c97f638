"""``agentledger repair RUN_ID``: ``ensure_run_completion`` [E2] from the command line.

What the CLI can honestly do without the run's engine:

* A closed run (completed, failed, canceled, suspended): check its stored
  lifecycle and print its final record. Nothing is written.
* A running run: only the engine knows whether its workflow is still going,
  and the CLI has no engine. So it refuses, unless the operator states that
  the workflow is gone (``--workflow-gone``: its process died, Temporal shows
  it closed). Then the run is closed exactly as ``ensure_run_completion``
  closes a run its engine does not know: tool calls left open get error
  results, and the final record is ``failed`` (``workflow_lost``), or
  ``canceled`` when a cancellation had been requested, timed at the run's
  last record, so running it again (or the application's own
  ``ensure_run_completion``) writes nothing new.
* Delivery: the CLI has no application stream. It prints the final event
  instead; the application delivers it by calling
  ``Runtime.ensure_run_completion(run_id)``, which finds the record stored and
  redelivers it without writing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from agentledger.cli.app import CommandError, Settings, run, settings_options, with_store
from agentledger.cli.complete import run_ids

if TYPE_CHECKING:
    from agentledger.storage.protocol import AdminStore

__all__ = ["repair"]


@click.command(short_help="close a run whose workflow is gone; check a closed run")
@click.argument("run_id", shell_complete=run_ids)
@click.option(
    "--workflow-gone",
    is_flag=True,
    help="the run's workflow is known to be gone: close the run if it is still running",
)
@settings_options
def repair(settings: Settings, run_id: str, workflow_gone: bool) -> None:
    """Make sure RUN_ID has its ending (ensure_run_completion), without its engine.

    A closed run: its stored lifecycle is checked and its final record printed
    (nothing is written). A running run: refused, because the CLI cannot ask the
    engine whether the workflow is alive, unless --workflow-gone says it is gone;
    then open tool calls get error results and the run ends failed (workflow_lost),
    or canceled if a cancellation was requested. The final event is printed, not
    delivered: Runtime.ensure_run_completion(RUN_ID) in the application delivers it.
    """
    run(
        with_store(
            settings, lambda store: _repair(store, settings, run_id, workflow_gone), read_only=False
        )
    )


async def _repair(store: AdminStore, settings: Settings, run_id: str, workflow_gone: bool) -> None:
    from agentledger.cli.output import echo, echo_json, jsonable, when
    from agentledger.cli.records import record_json
    from agentledger.engine.inprocess import InProcessEngine
    from agentledger.runtime.completion import ensure_run_completion
    from agentledger.runtime.stream import QueueSink
    from agentledger.storage.types import RunStatus

    before = await store.load_run(run_id)
    if before.status is RunStatus.RUNNING and not workflow_gone:
        raise CommandError(
            f"run {run_id!r} is running in the store, and the CLI cannot ask its engine "
            "whether its workflow is still going; if it is gone, run again with --workflow-gone",
            subject=f"run {run_id}",
        )
    # A new in-process engine knows no workflow: exactly the "workflow gone" case of [E2].
    engine = InProcessEngine()
    sink = QueueSink()
    try:
        done = await ensure_run_completion(store, engine, sink, run_id)
    finally:
        await engine.close()
    if settings.json:
        echo_json(
            {
                "run_id": done.run_id,
                "status": done.status,
                "repaired": done.repaired,
                "record": None if done.record is None else record_json(done.record),
                "event": jsonable(sink.events[-1]) if sink.events else None,
            }
        )
        return
    record = done.record
    if done.repaired:
        echo(f"run {run_id} was running; closed it as {done.status}")
    else:
        echo(f"run {run_id} is {done.status}; its lifecycle checks out, nothing written")
    if record is not None:
        echo(f"final record {record.id}  {record.type}  {when(record.timestamp)}")
        echo(f"payload {record.payload.decode('utf-8', 'replace')}")
    echo("not delivered to any stream: Runtime.ensure_run_completion(run_id) delivers it")
