"""A session's runs as a tree: child runs under their parent, continuations after their run.

A child names its parent (``parent_run_id``); a suspended run names its
continuation (``successor_run_id``), which is shown right after it, at the
same depth, as the next link of one chain of work.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from agentledger.storage.types import RunMeta

__all__ = ["RunNode", "run_tree"]


@dataclass
class RunNode:
    """One run in the tree, its children, and the run it continues (if any)."""

    run: RunMeta
    continues: str = ""
    children: list[RunNode] = field(default_factory=list)


def run_tree(runs: Iterable[RunMeta]) -> list[RunNode]:
    """The roots of the tree (in start order), each followed by its continuations.

    A run whose parent or predecessor is not among ``runs`` is shown as a root,
    so nothing listed is ever hidden.
    """
    ordered = sorted(runs, key=lambda r: (r.started_at, r.run_id))
    nodes = {r.run_id: RunNode(r) for r in ordered}
    predecessor = {r.successor_run_id: r.run_id for r in ordered if r.successor_run_id in nodes}
    for node in nodes.values():
        node.continues = predecessor.get(node.run.run_id, "")
    roots: list[RunNode] = []
    placed: set[str] = set()

    def chain(node: RunNode, into: list[RunNode]) -> None:
        """Add ``node`` and the continuations after it, once each."""
        while node.run.run_id not in placed:
            placed.add(node.run.run_id)
            into.append(node)
            nxt = nodes.get(node.run.successor_run_id)
            if nxt is None:
                return
            node = nxt

    for node in nodes.values():  # children first, under their parents, in start order
        parent = nodes.get(node.run.parent_run_id)
        if parent is not None and not node.continues and node.run.run_id != parent.run.run_id:
            chain(node, parent.children)
    for node in nodes.values():
        if node.run.run_id not in placed and not node.continues:
            chain(node, roots)
    for node in nodes.values():  # a cycle or a dangling chain: still shown
        if node.run.run_id not in placed:
            chain(node, roots)
    return roots
