"""Why a run is paused by a crash loop, as its checkpoint says: read in this one place.

A planner turn or tool call that was started ``max_turn_attempts`` times
without finishing (its worker kept dying) pauses its run: the run suspends
with a ``crash_loop`` checkpoint naming the activity and how many times it
was started (:class:`~agentledger.runtime.checkpoint.CrashLoop`). The run's
row says only ``suspended``, so the CLI (``agentledger runs``) and the web
inspector read the pause here, from the run's own checkpoint, and say it in
the same words.
"""

from __future__ import annotations

from collections.abc import Iterable

from agentledger.errors import CorruptRecordError, ValidationError
from agentledger.runtime.checkpoint import CrashLoop, RunCheckpoint, checkpoint_id
from agentledger.storage.protocol import Store
from agentledger.storage.types import RunMeta, RunStatus

__all__ = ["describe_crash_loop", "load_crash_loop", "load_crash_loops"]


def describe_crash_loop(loop: CrashLoop) -> str:
    """The pause in words: ``ACTIVITY started N times``."""
    return f"{loop.activity} started {loop.attempts} times"


async def load_crash_loop(store: Store, run_id: str) -> CrashLoop | None:
    """What paused suspended run ``run_id`` if its own work kept dying, else None (it waits
    for something else, or for a child run, or it was suspended by another writer than
    the runtime, whose checkpoint bytes are private to it).

    Raises:
        NotFoundError: the run holds no suspension checkpoint.
        CorruptRecordError: the runtime's checkpoint cannot be read.
    """
    stored = await store.load_run_suspension(run_id)
    if stored.id != checkpoint_id(run_id):
        return None
    try:
        checkpoint = RunCheckpoint.decode(stored.data)
    except ValidationError as e:
        raise CorruptRecordError(run_id=run_id, record_id="", reason=f"checkpoint: {e}") from e
    return checkpoint.crash_loop


async def load_crash_loops(store: Store, runs: Iterable[RunMeta]) -> dict[str, CrashLoop]:
    """The suspended runs among ``runs`` paused by a crash loop, by run id.

    Raises:
        CorruptRecordError: a suspended run's checkpoint cannot be read.
    """
    found: dict[str, CrashLoop] = {}
    for run in runs:
        if run.status is not RunStatus.SUSPENDED:
            continue
        loop = await load_crash_loop(store, run.run_id)
        if loop is not None:
            found[run.run_id] = loop
    return found
