"""``agentledger worker``: the Temporal worker, defined in :mod:`agentledger.engine.temporal.cli`.

That module builds the command's argparse parser; this click command hands
it every argument unchanged (``--help`` included), so the worker's options
live in one place.
"""

from __future__ import annotations

import click

__all__ = ["worker"]


@click.command(
    short_help="run a Temporal worker for agentledger runs",
    add_help_option=False,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def worker(args: tuple[str, ...]) -> int:
    """Run a Temporal worker for agentledger runs (see agentledger worker --help)."""
    import argparse

    from agentledger.engine.temporal.cli import add_worker_command

    parser = argparse.ArgumentParser(prog="agentledger")
    add_worker_command(parser.add_subparsers(dest="command", required=True))
    try:
        parsed = parser.parse_args(["worker", *args])
    except SystemExit as e:  # --help (0) or a usage error (2): argparse has printed it
        raise click.exceptions.Exit(e.code if isinstance(e.code, int) else 2) from None
    return int(parsed.handler(parsed))
