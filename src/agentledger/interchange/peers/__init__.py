"""Importers from other frameworks' session stores [G4]: OpenAI Agents, Google ADK, LangGraph.

:func:`import_peer` reads a peer's store with plain SQL (the peer's package is not
needed, but for the OpenAI Agents items' conversion, which the ``openai-agents``
extra's adapter does), turns each conversation into an ended session of turns
that follow each other by reference, and imports each in one transaction. Ids
are derived from the peer's, so importing again changes nothing. What could not
be carried is listed in the :class:`PeerReport`, with why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec

from agentledger.errors import ContractError, ValidationError
from agentledger.interchange.jsonl import ImportOutcome, import_image
from agentledger.interchange.peers.conversation import Conversation, conversation_image
from agentledger.interchange.peers.sources import shown

if TYPE_CHECKING:
    from agentledger.storage.protocol import AdminStore

__all__ = ["PEERS", "PeerReport", "import_peer", "read_peer"]

PEERS = ("openai-agents", "adk", "langgraph")
"""The stores :func:`import_peer` reads."""

Reader = Callable[[str, str], Awaitable[tuple[list[Conversation], list[str]]]]


class PeerReport(msgspec.Struct, frozen=True, kw_only=True):
    """What an import from a peer did."""

    peer: str
    """The peer read (``openai-agents``, ``adk``, ``langgraph``)."""
    source: str
    """Its store, as given."""
    sessions: list[ImportOutcome]
    """One per conversation: imported now, or held already, unchanged."""
    not_carried: list[str]
    """What was left behind, each with why (an item the transcript has no part for...)."""


def _reader(peer: str) -> Reader:
    if peer == "openai-agents":
        from agentledger.interchange.peers.openai_agents import read_openai_agents

        return read_openai_agents
    if peer == "adk":
        from agentledger.interchange.peers.adk import read_adk

        return read_adk
    if peer == "langgraph":
        from agentledger.interchange.peers.langgraph import read_langgraph

        return read_langgraph
    raise ValidationError(field="peer", expected=f"one of {', '.join(PEERS)}", got=peer)


async def read_peer(peer: str, source: str, only: str = "") -> tuple[list[Conversation], list[str]]:
    """The conversations of ``peer``'s store at ``source`` (``only``: one session or thread),
    and what could not be carried."""
    return await _reader(peer)(source, only)


async def import_peer(store: AdminStore, peer: str, source: str, only: str = "") -> PeerReport:
    """Import every conversation of ``peer``'s store at ``source``, each in one transaction.

    A conversation the store refuses (one imported before that has grown since, whose
    session now differs; one too large for the store's limits) is listed in
    ``not_carried`` with the refusal, and the others are imported.

    Raises:
        ValidationError: ``source`` is not that peer's store, or cannot be read.
    """
    conversations, gaps = await read_peer(peer, source, only)
    outcomes = []
    for conversation in conversations:
        try:
            image = await conversation_image(conversation)
            outcomes.append(await import_image(store, image))
        except ContractError as e:
            gaps.append(f"session {conversation.session_id}: not imported: {e}")
    return PeerReport(peer=peer, source=shown(source), sessions=outcomes, not_carried=gaps)
