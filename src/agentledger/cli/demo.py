"""``agentledger demo``: run the demo session into a SQLite database."""

from __future__ import annotations

import click

from agentledger.cli.app import SQLITE_HELP, Settings, run, settings_options

__all__ = ["demo"]


@click.command(short_help="record a demo session (an offline model unless an API key is set)")
@settings_options(target_help=SQLITE_HELP)
def demo(settings: Settings) -> int:
    """Run a four-turn travel-concierge session into the SQLite file --db (created if
    missing): parallel tool calls, a child run, a suspension resumed, a cancellation.
    The model is an offline, deterministic demo model, unless ANTHROPIC_API_KEY,
    OPENAI_API_KEY or AWS credentials are set: then that provider's real model.

    With --json the narration goes to stderr and stdout gets
    {"db", "session", "runs"} describing what was recorded.
    """
    from agentledger.errors import ValidationError

    if settings.target.kind != "sqlite":
        raise ValidationError(
            field="--db",
            expected="a SQLite file",
            got=str(settings.target),
            message=f"the demo writes a SQLite file, not {settings.target}",
        )
    path = settings.target.path
    if not settings.json:
        from agentledger.demo import run_demo

        return run_demo(path)
    return run(_demo_json(path))


async def _demo_json(path: str) -> int:
    """The demo with its narration on stderr, then what it recorded as JSON on stdout."""
    import asyncio
    import contextlib
    import os
    import sys

    from agentledger.cli.output import echo_json, jsonable
    from agentledger.cli.runs import predecessor
    from agentledger.cli.sessions import list_all_sessions
    from agentledger.cli.target import opened
    from agentledger.demo import run_demo
    from agentledger.target import Target

    target = Target(path, "sqlite")
    before: set[str] = set()
    if await asyncio.to_thread(os.path.exists, path):
        async with opened(target, read_only=True) as store:
            before = {s.id for s in (await list_all_sessions(store))[0]}
    with contextlib.redirect_stdout(sys.stderr):
        code = await asyncio.to_thread(run_demo, path)
    async with opened(target, read_only=True) as store:
        (session,) = [s for s in (await list_all_sessions(store))[0] if s.id not in before]
        metas = await store.list_runs_by_session(session.id)
        rows = [
            {**jsonable(r), "predecessor_run_id": await predecessor(store, r.run_id)} for r in metas
        ]
    echo_json({"db": path, "session": session, "runs": rows})
    return code
