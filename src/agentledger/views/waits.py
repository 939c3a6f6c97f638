"""What suspended runs wait for, and what the tool calls shown in a conversation point at.

A suspended run's checkpoint names the kind of input it waits for; a run a
crash loop paused says which activity kept dying and how many times it
started. A tool call may have started a child run (``child_run_linked``) or be
in doubt (a ``once`` call started with no outcome recorded).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agentledger.errors import AgentledgerError
from agentledger.runtime.checkpoint import InDoubtToolCall, RunCheckpoint
from agentledger.runtime.crash_loops import describe_crash_loop, load_crash_loop
from agentledger.runtime.records import decode_payload
from agentledger.storage.payloads import CHILD_RUN_LINKED, ChildRunLinked
from agentledger.storage.protocol import Store
from agentledger.storage.types import Record, RunMeta, RunStatus

__all__ = ["WAITS", "Exchanges", "exchanges", "waiting_kind", "waiting_text"]

WAITS = {
    "confirmation": "waits for approval",
    "clarification": "waits for a clarification",
    "external_tools": "waits for results from outside",
    "child": "waits for its child run's question to be answered",
    "in_doubt": "waits for a decision on a tool call in doubt",
    "crash_loop": "is paused: a planner turn or tool call kept killing its worker",
}
"""What a suspended run waits for, by the kind its checkpoint names."""


async def waiting_kind(store: Store, run: RunMeta) -> str:
    """The kind of input a suspended run waits for ("" if its checkpoint cannot be read:
    the page then says it waits for outside input)."""
    try:
        stored = await store.load_run_suspension(run.run_id)
        return RunCheckpoint.decode(stored.data).kind
    except AgentledgerError:
        return ""


async def waiting_text(store: Store, run: RunMeta, kind: str) -> str:
    """What a suspended run waiting for ``kind`` waits for, in words; a crash loop says
    which activity kept dying and how many times it started."""
    if kind == "crash_loop":
        try:
            loop = await load_crash_loop(store, run.run_id)
        except AgentledgerError:
            loop = None
        if loop is not None:
            said = describe_crash_loop(loop)
            return f"is paused: {said} without finishing (its worker kept dying)"
    return WAITS.get(kind, "waits for outside input")


@dataclass(frozen=True)
class Exchanges:
    """What the tool calls of some runs' messages point at.

    ``children``: the child run each call started, by call id; ``waits``: what
    each suspended run waits for, in words; ``statuses``: the runs, by id;
    ``doubts``: the calls in doubt in the suspended runs no continuation took.
    """

    children: dict[str, str]
    waits: dict[str, str]
    statuses: dict[str, RunMeta]
    doubts: dict[str, InDoubtToolCall]


async def _doubts(store: Store, runs: Iterable[RunMeta]) -> dict[str, InDoubtToolCall]:
    doubts: dict[str, InDoubtToolCall] = {}
    for run in runs:
        if run.status is not RunStatus.SUSPENDED or run.successor_run_id:
            continue
        try:
            stored = await store.load_run_suspension(run.run_id)
            checkpoint = RunCheckpoint.decode(stored.data)
        except AgentledgerError:
            continue
        doubts.update((d.tool_call_id, d) for d in checkpoint.in_doubt)
    return doubts


async def exchanges(store: Store, records: Iterable[Record], runs: Sequence[RunMeta]) -> Exchanges:
    """What the tool calls of ``runs`` (whose logs are among ``records``) point at.

    Raises:
        CorruptRecordError: a ``child_run_linked`` record is damaged.
    """
    children: dict[str, str] = {}
    for record in records:
        if record.type == CHILD_RUN_LINKED:
            link = decode_payload(record, ChildRunLinked)
            children.setdefault(link.tool_call_id, link.child_run_id)
    waits = {
        run.run_id: await waiting_text(store, run, await waiting_kind(store, run))
        for run in runs
        if run.status is RunStatus.SUSPENDED
    }
    return Exchanges(children, waits, {r.run_id: r for r in runs}, await _doubts(store, runs))
