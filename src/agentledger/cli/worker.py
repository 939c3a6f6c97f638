"""``agentledger worker``: a Temporal worker process for agentledger runs.

The options are parsed here like every other command's; the worker itself
(:func:`agentledger.engine.temporal.cli.serve`) and Temporal are imported
only when it runs.
"""

from __future__ import annotations

from typing import Any

import click

from agentledger.cli.temporal import finish, temporal_options

__all__ = ["worker"]

_DEFAULT_APP = "agentledger.engine.temporal.example:setup"
"""``agentledger.engine.temporal.cli.DEFAULT_APP``, repeated so that --help imports no engine."""

_RECOVERY = (
    "Recovery after a worker dies: a run whose workflow task was on it moves to another "
    "worker after --sticky-timeout (default 10 s); an activity in flight on it is retried "
    "elsewhere after the heartbeat timeout, which the host sets for the runs it starts "
    "(TemporalEngine(heartbeat_timeout=...), default 30 s), not the worker. Runs recover "
    "within the larger of the two."
)


def _moved_to_host(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """``--heartbeat-timeout``: refused with where the setting lives now."""
    if value is not None:
        raise click.BadParameter(
            "a run's heartbeat timeout is set by the host that starts it, "
            "TemporalEngine(heartbeat_timeout=SECONDS); a worker cannot change it",
            ctx=ctx,
            param=param,
        )


@click.command(short_help="run a Temporal worker for agentledger runs", epilog=_RECOVERY)
@temporal_options(required=True, help="the Temporal frontend")
@click.option(
    "--db", "--store", "target", metavar="TARGET",
    help="the store every worker of the task queue shares: a SQLite file, a postgresql:// "
    "DSN, or an http(s):// service URL (token in $AGENTLEDGER_TOKEN)",
)  # fmt: skip
@click.option("--task-queue", default="agentledger", show_default=True, help="the queue to poll")
@click.option(
    "--app", default=_DEFAULT_APP, show_default=True, metavar="MODULE:FUNCTION",
    help="setup(runtime), registering the agents, tools and models",
)  # fmt: skip
@click.option(
    "--grace", type=float, default=10.0, show_default=True, metavar="SECONDS",
    help="on shutdown, how long activities in flight may finish",
)  # fmt: skip
@click.option(
    "--max-concurrent-activities", type=click.IntRange(min=1), default=None, metavar="N",
    help="activities (planner turns, tool calls, store writes) this worker runs at once "
    "(default: Temporal's, 100)",
)  # fmt: skip
@click.option(
    "--sticky-timeout", type=click.FloatRange(min=0, min_open=True), default=None,
    metavar="SECONDS",
    help="how long a run's next workflow task waits for this worker before any worker may "
    "take it: the delay before a dead worker's runs move on (default: Temporal's, 10)",
)  # fmt: skip
@click.option(
    "--heartbeat-timeout", hidden=True, expose_value=False, callback=_moved_to_host,
    is_eager=True,
)  # fmt: skip
def worker(
    temporal: str,
    target: str | None,
    task_queue: str,
    app: str,
    namespace: str,
    grace: float,
    max_concurrent_activities: int | None,
    sticky_timeout: float | None,
) -> None:
    """Run a Temporal worker for agentledger runs until SIGINT or SIGTERM.

    It prints one line once it polls; on SIGINT or SIGTERM it finishes (or, after
    --grace seconds, cancels) the activities in flight, closes the store and exits 0.
    Temporal retries what did not finish on another worker.
    """
    from agentledger.cli.app import Given
    from agentledger.target import Target

    root = click.get_current_context().find_root().obj
    target = target or (root.target if isinstance(root, Given) else None)
    as_json = isinstance(root, Given) and root.json  # `agentledger --json worker ...`
    if not target:
        raise click.UsageError("Missing option '--db' / '--store': the store to work on")
    import asyncio

    from agentledger.engine.temporal.cli import serve

    def body() -> int:
        return asyncio.run(
            serve(
                temporal=temporal,
                db=Target.parse(target),
                task_queue=task_queue,
                app=app,
                namespace=namespace,
                grace=grace,
                max_concurrent_activities=max_concurrent_activities,
                sticky_timeout=sticky_timeout,
            )
        )

    finish(body, json=as_json)  # Temporal's native threads must not see the teardown
