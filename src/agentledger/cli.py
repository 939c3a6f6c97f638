"""The ``agentledger`` command line."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from agentledger import __version__


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentledger",
        description="Durable memory, sessions and runs for AI agents.",
    )
    parser.add_argument("--version", action="version", version=f"agentledger {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("demo", help="run the main job: a transcript built, validated and printed")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit status."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        from agentledger.demo import run_demo

        return run_demo()
    parser.print_help()
    return 0
