"""Shell completion of session and run ids, read from the store ``--db`` names.

Completion must never fail a shell: any error (no database, a damaged one,
an unreachable server) completes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import click
from click.shell_completion import CompletionItem

if TYPE_CHECKING:
    from agentledger.storage.protocol import AdminStore
    from agentledger.target import Target

__all__ = ["run_ids", "session_ids"]

_MOST = 2000
"""Ids offered at most (a shell does not want more)."""


def _target(ctx: click.Context) -> Target:
    from agentledger.target import Target

    for context in (ctx, ctx.find_root()):
        value = context.params.get("target")
        if isinstance(value, str) and value:
            return Target.parse(value)
    return Target.parse(None)


def _ids(ctx: click.Context, find: Callable[[AdminStore], Awaitable[list[str]]]) -> list[str]:
    import asyncio

    from agentledger.cli.target import opened

    async def read() -> list[str]:
        async with opened(_target(ctx), read_only=True) as store:
            return await find(store)

    try:
        return asyncio.run(read())
    except Exception:  # completion offers what it can, and never a traceback
        return []


async def _session_ids(store: AdminStore) -> list[str]:
    from agentledger.cli.sessions import list_all_sessions

    found, _ = await list_all_sessions(store, limit=_MOST)
    return [s.id for s in found]


async def _run_ids(store: AdminStore) -> list[str]:
    from agentledger.cli.sessions import list_all_sessions

    found: list[str] = []
    sessions, _ = await list_all_sessions(store)
    for session in sessions:
        found.extend(r.run_id for r in await store.list_runs_by_session(session.id))
        if len(found) >= _MOST:
            break
    return found[:_MOST]


def session_ids(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The stored session ids that start with ``incomplete``."""
    return [CompletionItem(i) for i in _ids(ctx, _session_ids) if i.startswith(incomplete)]


def run_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The stored run ids (of every session) that start with ``incomplete``."""
    return [CompletionItem(i) for i in _ids(ctx, _run_ids) if i.startswith(incomplete)]
