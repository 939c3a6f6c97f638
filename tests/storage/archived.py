"""An ended session worth archiving: every kind of run, record and checkpoint."""

from __future__ import annotations

from datetime import datetime

from agentledger.storage.conformance import World
from agentledger.storage.types import RunStatus

__all__ = ["ended_session"]


async def ended_session(world: World, name: str, *, ended_at: datetime | None = None) -> str:
    """A session with a finished root and child, a suspended run and a failed one, ended."""
    sid = await world.session(name, labels={"tenant": "acme", "tier": "gold"})
    root = await world.root(f"{name}-root", session=sid)
    await world.store.append_run_records(
        [
            world.note(root, "k1", b'{"text":"caf\\u00e9 \xe2\x98\x95","n":1.50}'),
            world.note(root, "k2", b'{"deep":[1,{"a":null}],"big":123456789012345678901}'),
        ]
    )
    child, _ = await world.child(f"{name}-child", parent=root)
    await world.store.append_run_record(world.note(child, "c1"))
    await world.finish(child)
    await world.finish(root)
    waiting = await world.root(f"{name}-waiting", session=sid)
    await world.store.append_run_record(world.note(waiting, "w1", b'{"ask":"confirm?"}'))
    await world.suspend(waiting, checkpoint_id=f"{name}-cp")
    failed = await world.root(f"{name}-failed", session=sid)
    await world.finish(failed, RunStatus.FAILED)
    await world.store.end_session(sid, ended_at=ended_at or world.now())
    return sid
