"""A session's top-level runs as one conversation, each turn's messages once.

The runs are taken in conversation order (:func:`~agentledger.views.tree.run_tree`:
each root followed by its continuations). A run holds the messages it added;
the first run's seeded history is shown too, a later run's seeded or
referenced history is the earlier turns, shown already. A run whose history
is a fork of another run is a branch: it leaves its source at the message
its reference cuts the source at, so it is labelled as a branch of its
source's turn, not as the next turn.

The conversation is a tree of paths: each run follows the run its history
references (a fork its source, cut at the branch's message). :meth:`SessionConversation.path`
is one path at a time: the main conversation, or the one through a branch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from agentledger.errors import CorruptRecordError, TranscriptError, ValidationError
from agentledger.runtime.busy import MESSAGE_CLAIMED
from agentledger.storage.payloads import TRANSCRIPT_REFERENCED, TRANSCRIPT_SEEDED
from agentledger.storage.replay import TRANSCRIPT_RECORD_TYPES
from agentledger.storage.transcript_chain import decode_reference
from agentledger.storage.types import Record, RunMeta
from agentledger.transcript import Message, decode_messages
from agentledger.views.tree import RunNode

__all__ = ["Branch", "SessionConversation", "conversation_order", "session_conversation"]


@dataclass(frozen=True)
class Branch:
    """A run whose history is a fork of ``source``, cut at its record ``through``.

    ``at`` is the number (from 1) of the source's last message before the cut
    in this conversation (0 if the conversation does not hold it); ``turn``
    the source's turn label.
    """

    run_id: str
    source: str
    through: str
    at: int
    turn: str


@dataclass(frozen=True)
class SessionConversation:
    """The messages of a session's top-level runs, where each is stored, and its turns.

    ``origins`` says where each message is stored: (run, record, place in the
    record). ``turns`` labels each run (``Turn 2``, ``Turn 2 (continued)``,
    ``Branch of turn 1``); ``branches`` are the forks, by run id. ``corrupt``
    is the damaged record the conversation stops at (None if none).
    """

    runs: tuple[RunMeta, ...]
    messages: tuple[Message, ...] = ()
    origins: tuple[tuple[str, str, int], ...] = ()
    turns: dict[str, str] = field(default_factory=dict)
    branches: dict[str, Branch] = field(default_factory=dict)
    corrupt: CorruptRecordError | None = None
    follows: dict[str, str] = field(default_factory=dict)
    """The run each run's history continues ("" for the first): the source of a fork or
    of a next turn, the suspended run a continuation resumes."""

    @property
    def sources(self) -> list[str]:
        """The run each message belongs to."""
        return [origin[0] for origin in self.origins]

    def _next(self, run_id: str) -> str:
        """The latest run continuing ``run_id`` that is not a branch ("" if none)."""
        found = [
            r.run_id
            for r in self.runs
            if self.follows.get(r.run_id) == run_id and r.run_id not in self.branches
        ]
        return found[-1] if found else ""

    def chain(self, branch: str = "") -> list[str]:
        """The runs of one path: from the first run to ``branch`` (a run of this
        conversation; "" for the main conversation), then on through the latest
        run continuing each, branches left out.

        Raises:
            ValidationError: ``branch`` is not a run of this conversation.
        """
        ids = [r.run_id for r in self.runs]
        if branch and branch not in ids:
            raise ValidationError(
                field="branch", expected="a top-level run of this session", got=branch
            )
        start = branch or (ids[0] if ids else "")
        runs: list[str] = []
        at = start
        while at and at not in runs:  # back to the first run (a cycle stops it)
            runs.insert(0, at)
            at = self.follows.get(at, "")
        at = self._next(start) if start else ""
        while at and at not in runs:
            runs.append(at)
            at = self._next(at)
        return runs

    def leaves_at(self, branch: str) -> int:
        """The number (from 1) on ``branch``'s own path (:meth:`path`) of the message it
        leaves its source after, as that path numbers its messages (0 if not held).

        Raises:
            ValidationError: ``branch`` is not a run of this conversation.
        """
        fork = self.branches.get(branch)
        shown = self.path(branch)
        if fork is None or not fork.at or fork.at - 1 not in shown:
            return 0
        return shown.index(fork.at - 1) + 1

    def path(self, branch: str = "") -> list[int]:
        """The places (from 0) in :attr:`messages` of the messages on one path (see
        :meth:`chain`): each run's messages, a branch's source only up to where it leaves.
        With no branches, every message.

        Raises:
            ValidationError: ``branch`` is not a run of this conversation.
        """
        if not self.branches:
            return list(range(len(self.messages)))
        runs = self.chain(branch)
        cuts: dict[str, int] = {}
        for before, after in pairwise(runs):
            fork = self.branches.get(after)
            if fork is not None and fork.source == before:
                cuts[before] = fork.at
        kept = set(runs)
        return [
            n
            for n, (owner, _, _) in enumerate(self.origins)
            if owner in kept and (owner not in cuts or n < cuts[owner])
        ]


def conversation_order(tree: Iterable[RunNode]) -> list[RunMeta]:
    """The session's top-level runs (no child runs) in conversation order."""
    return [node.run for node in tree if not node.run.parent_run_id or node.continues]


def _references(records: Iterable[Record], wanted: set[str]) -> dict[str, tuple[str, str, str]]:
    """Each wanted run's history reference: (kind, source run, through). A turn started for
    a session's message follows the turn ahead of it: a next turn, even when that turn did
    not complete and the reference cuts it (stored as a fork), never a branch."""
    found: dict[str, tuple[str, str, str]] = {}
    claimed: set[str] = set()
    for record in records:
        if record.type == TRANSCRIPT_REFERENCED and record.run_id in wanted:
            ref = decode_reference(record)
            found.setdefault(record.run_id, (ref.kind, ref.run_id, ref.through))
        elif record.type == MESSAGE_CLAIMED:
            claimed.add(record.run_id)
    for run_id in claimed & found.keys():
        kind, source, through = found[run_id]
        if kind == "fork":
            found[run_id] = ("next_turn", source, through)
    return found


def _labels(
    order: Sequence[RunMeta],
    follows: dict[str, str],
    continues: dict[str, str],
    sources: dict[str, str],
) -> dict[str, str]:
    """Each top-level run's turn label: its number on its own path (the turn it follows,
    plus one), ``(continued)`` for a continuation, ``Branch of turn N`` for a fork."""
    numbers: dict[str, int] = {}
    labels: dict[str, str] = {}
    for run in order:
        run_id = run.run_id
        before = numbers.get(follows.get(run_id, ""), 0)
        if run_id in continues:
            numbers[run_id] = before
            labels[run_id] = f"Turn {before} (continued)"
        elif run_id in sources:
            numbers[run_id] = before + 1
            source = numbers.get(sources[run_id])
            labels[run_id] = f"Branch of turn {source}" if source else "Branch"
        else:
            numbers[run_id] = before + 1
            labels[run_id] = f"Turn {before + 1}"
    return labels


def session_conversation(tree: Sequence[RunNode], records: Sequence[Record]) -> SessionConversation:
    """The conversation of the session whose run tree is ``tree`` and log ``records``
    (in commit order); a damaged transcript record ends it, named in ``corrupt``.

    Raises:
        CorruptRecordError: a history reference is damaged.
    """
    order = conversation_order(tree)
    first = order[0].run_id if order else ""
    wanted = {run.run_id for run in order}
    messages: list[Message] = []
    stored: list[tuple[str, str, int]] = []
    corrupt: CorruptRecordError | None = None
    for record in records:
        if record.run_id not in wanted or record.type not in TRANSCRIPT_RECORD_TYPES:
            continue
        if record.type == TRANSCRIPT_SEEDED and record.run_id != first:
            continue  # a later turn's history: the earlier turns, shown already
        try:
            found = decode_messages(record.payload)
        except TranscriptError as e:
            corrupt = CorruptRecordError(
                run_id=record.run_id, record_id=record.id, reason=f"{record.type}: {e}"
            )
            break
        messages += found
        stored += [(record.run_id, record.id, n) for n in range(len(found))]
    # Records come in commit order; a session's turns are in run order (each run whole).
    rank = {run.run_id: i for i, run in enumerate(order)}
    pairs = sorted(zip(messages, stored, strict=True), key=lambda p: rank[p[1][0]])
    origins = tuple(o for _, o in pairs)
    references = _references(records, wanted)
    continues = {node.run.run_id: node.continues for node in tree if node.continues}
    sources = {
        run_id: ref[1]
        for run_id, ref in references.items()
        if ref[0] == "fork" and run_id not in continues
    }
    follows: dict[str, str] = {}
    main = ""
    for run in order:
        linked = references.get(run.run_id)
        if run.run_id in continues:
            follows[run.run_id] = continues[run.run_id]
        elif linked is not None and linked[1] in wanted:
            follows[run.run_id] = linked[1]
        else:  # a turn with its history copied (or none): after the main conversation's last
            follows[run.run_id] = main
        if run.run_id not in sources:
            main = run.run_id
    labels = _labels(order, follows, continues, sources)
    branches: dict[str, Branch] = {}
    for run_id, source in sources.items():
        ref = references[run_id]
        at = 0
        through = int(ref[2]) if ref[2].isdigit() else 0
        for n, (owner, record_id, _) in enumerate(origins, start=1):
            if owner == source and record_id.isdigit() and int(record_id) <= through:
                at = n
        branches[run_id] = Branch(run_id, source, ref[2], at, labels.get(source, ""))
    return SessionConversation(
        runs=tuple(order),
        follows=follows,
        messages=tuple(m for m, _ in pairs),
        origins=origins,
        turns=labels,
        branches=branches,
        corrupt=corrupt,
    )
