"""``agentledger worker``: a Temporal worker process for agentledger runs (its options are
parsed by the click command in :mod:`agentledger.cli.worker`).

::

    agentledger worker --temporal 127.0.0.1:7233 --db ledger.db --task-queue agentledger \\
        --app myapp.agents:setup

``--app MODULE:FUNCTION`` names a function that registers the agents,
toolsets and models on the runtime (``setup(runtime)``, may be async); the
default is the ``adder`` example (:mod:`agentledger.engine.temporal.example`).
``--db`` is a SQLite file (a path, or ``sqlite:///path``) or a PostgreSQL
DSN (``postgresql://...``); every worker of a task queue must share it.
``--store http://...`` reaches the store through ``agentledger serve``
instead (the bearer token comes from ``$AGENTLEDGER_TOKEN``).

The worker prints one ``agentledger worker: polling ...`` line once it
polls, and stops on SIGINT or SIGTERM: it finishes (or, after
``--grace`` seconds, cancels) the activities in flight, closes the store
and exits 0. Temporal retries whatever did not finish on another worker.
The process ends with ``os._exit`` after flushing its output, because the
Temporal client's native threads can abort the interpreter during its
teardown (temporalio/sdk-python#300).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import os
import signal
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from agentledger.errors import ValidationError
from agentledger.observability import tracing
from agentledger.target import Target

if TYPE_CHECKING:
    from agentledger.runtime.runtime import Runtime

# Everything Temporal is imported inside the functions: importing temporalio takes seconds.

__all__ = ["DEFAULT_APP", "exit_now", "load_app", "serve"]

DEFAULT_APP = "agentledger.engine.temporal.example:setup"


def load_app(spec: str) -> Callable[[Runtime], Any]:
    """The ``setup(runtime)`` function named ``MODULE:FUNCTION``.

    Raises:
        ValidationError: the spec is malformed or names nothing callable.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValidationError(field="app", expected="MODULE:FUNCTION", got=spec)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValidationError(field="app", expected="an importable module", got=spec) from e
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValidationError(field="app", expected="a setup(runtime) function", got=spec)
    setup: Callable[[Runtime], Any] = fn
    return setup


async def serve(
    *,
    temporal: str,
    db: str | Target,
    task_queue: str,
    app: str = DEFAULT_APP,
    namespace: str = "default",
    grace: float = 10.0,
    max_concurrent_activities: int | None = None,
    sticky_timeout: float | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """Run a worker until ``stop`` is set (or SIGINT/SIGTERM arrives); return 0.

    ``db`` is the store every worker of the queue shares; a SQLite file is
    created and an older database migrated, as the runs it serves need.

    Raises:
        ValidationError: an empty ``db``, a bad ``app``, or what the store refuses.
        TransientError: the store or Temporal cannot be reached.
    """
    from agentledger.engine.temporal.client import connect
    from agentledger.engine.temporal.engine import TemporalEngine
    from agentledger.engine.temporal.worker import create_worker
    from agentledger.runtime.runtime import Runtime

    target = db if isinstance(db, Target) else Target.parse(db, default=False)
    setup = load_app(app)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop.set)
    store = await target.open()
    try:
        client = await connect(temporal, namespace=namespace)
        # Runs take their activity options from the host that starts them; this
        # engine only lets the worker's runtime register (it starts no runs).
        engine = TemporalEngine(client, task_queue=task_queue)
        runtime = Runtime(store, engine=engine)
        done = setup(runtime)
        if inspect.isawaitable(done):
            await done
        options: dict[str, Any] = {"graceful_shutdown_timeout": timedelta(seconds=grace)}
        if max_concurrent_activities:
            options["max_concurrent_activities"] = max_concurrent_activities
        if sticky_timeout:
            options["sticky_queue_schedule_to_start_timeout"] = timedelta(seconds=sticky_timeout)
        worker = create_worker(runtime, client, task_queue, **options)
        async with worker:
            print(
                f"agentledger worker: polling {task_queue!r} on {temporal} "
                f"(namespace {namespace}, store {target}, pid {os.getpid()})",
                flush=True,
            )
            await stop.wait()
            print("agentledger worker: stopping", flush=True)
    finally:
        await store.close()
    print("agentledger worker: stopped", flush=True)
    return 0


def exit_now(code: int) -> NoReturn:
    """Flush stdout and stderr and end the process without interpreter teardown.

    The Temporal client's native threads can abort a finalizing interpreter
    (temporalio/sdk-python#300); skipping the teardown avoids it. Call it only
    at the very end of a command-line process.
    """
    tracing.flush()  # the spans still queued, which atexit would have exported
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
