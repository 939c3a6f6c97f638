"""The Temporal server a command talks to: ``--temporal`` and ``--namespace``, parsed once.

``agentledger worker`` needs the server; ``check`` and ``runs`` take it to
show runs paused on Temporal (a workflow task that keeps failing, e.g. a bug
in the run loop, waiting for fixed code). Temporal is imported only when a
command uses it. A process that connected a Temporal client ends through
:func:`finish`, without the interpreter teardown that its native threads can
abort (temporalio/sdk-python#300).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

if TYPE_CHECKING:
    from agentledger.engine.temporal.paused import Pause
    from agentledger.storage.protocol import AdminStore

__all__ = ["finish", "paused_runs", "temporal_options"]

F = TypeVar("F", bound=Callable[..., Any])

PAUSED_HELP = (
    "A paused run is one whose workflow task keeps failing on Temporal (a bug in the run "
    "loop, or a run of a retired workflow type): it stays running in the store and waits. "
    "Deploy workers with fixed code; the run continues by itself from where it was."
)


def temporal_options(*, required: bool, help: str) -> Callable[[F], F]:
    """Add ``--temporal HOST:PORT`` (``help`` says what for) and ``--namespace`` to a command."""

    def add(command: F) -> F:
        command = click.option(
            "--namespace", default="default", show_default=True, help="the Temporal namespace"
        )(command)
        return click.option(
            "--temporal", required=required, default=None, metavar="HOST:PORT", help=help
        )(command)

    return add


async def paused_runs(
    temporal: str, namespace: str, run_ids: Iterable[str], *, store: AdminStore | None = None
) -> dict[str, Pause]:
    """The runs among ``run_ids`` paused on the Temporal server ``temporal``, by run id; with
    ``store``, also each run of it whose workflow is still open (a bug may hold a workflow
    open after the run's ending was written).

    Raises:
        TransientError: the server cannot be reached.
    """
    from agentledger.engine.temporal.client import connect
    from agentledger.engine.temporal.paused import find_pauses, open_runs
    from agentledger.errors import RunNotFoundError

    client = await connect(temporal, namespace=namespace)  # a wrong address is refused
    asked = list(dict.fromkeys(run_ids))
    if store is not None:
        for run_id in await open_runs(client):
            if run_id in asked:
                continue
            try:
                await store.load_run(run_id)
            except RunNotFoundError:  # another store's run on the same namespace
                continue
            asked.append(run_id)
    return await find_pauses(client, asked)


def finish(body: Callable[[], int], *, json: bool) -> NoReturn:
    """Run a command's ``body`` that connects to Temporal, report a refusal, end the process.

    The Temporal client's native threads can abort a finalizing interpreter, so
    the process ends here with the body's exit status (1 after a refusal).
    """
    from agentledger.cli.refusal import missing_extra, report
    from agentledger.engine.temporal.cli import exit_now
    from agentledger.errors import AgentledgerError

    code = 1
    try:
        code = body()
    except AgentledgerError as e:
        report(e, json=json)
    except ImportError as e:
        missing = missing_extra(e)
        if missing is None:
            raise
        report(missing, json=json)
    exit_now(code)
