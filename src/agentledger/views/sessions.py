"""A session's runs as a page or a command shows them: the run tree, each run at a glance
(why a failed one failed, the fate of the message each was started for), and the messages
still waiting for their turn."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentledger.storage.protocol import Store
from agentledger.storage.run_failure import load_run_failures
from agentledger.storage.types import Record, RunMeta
from agentledger.views.messages import WaitingMessage, message_fates
from agentledger.views.runs import RunView, summarize
from agentledger.views.tree import RunNode, run_tree

__all__ = ["SessionRuns", "session_runs"]


@dataclass(frozen=True)
class SessionRuns:
    """A session's run tree, a view of each run by id, and the messages still waiting."""

    tree: list[RunNode]
    summaries: dict[str, RunView]
    waiting: list[WaitingMessage]


async def session_runs(
    store: Store, session_id: str, runs: Sequence[RunMeta], records: Sequence[Record]
) -> SessionRuns:
    """The runs of ``session_id`` (``runs``, its log ``records``) as :class:`SessionRuns`.

    Raises:
        CorruptRecordError: a record the figures read, or a failed run's ending, is damaged.
    """
    summaries = summarize(runs, records)
    for run_id, failure in (await load_run_failures(store, list(runs))).items():
        summaries[run_id] = summaries[run_id].having(failure=failure)
    fates, waiting = await message_fates(store, session_id)
    for run_id, fate in fates.items():
        if run_id in summaries:
            summaries[run_id] = summaries[run_id].having(message=fate)
    return SessionRuns(run_tree(runs), summaries, waiting)
