"""Lossless conversion between agentledger transcripts and pydantic-ai message history.

``to_pydantic_ai(messages)`` and ``from_pydantic_ai(model_messages)`` map part
for part, in order (DESIGN section 13):

==========================================  ==============================================
agentledger                                 pydantic-ai
==========================================  ==============================================
system ``TextPart``                         ``SystemPromptPart``
user ``TextPart``/``ImagePart``/            ``UserPromptPart`` content: ``str``,
``DocumentPart`` (data or uri)/             ``BinaryContent``/``ImageUrl``/``DocumentUrl``,
``CacheCheckpointPart``                     ``CachePoint``
user ``ToolResultPart``                     ``ToolReturnPart`` (``is_error`` = failed or retried)
user ``TextPart`` (the text the model saw)  ``RetryFeedbackPart`` (a retry prompt)
assistant ``TextPart``                      ``TextPart``
assistant ``ThinkingPart``                  ``ThinkingPart`` (text, signature)
assistant ``ToolUsePart``                   ``ToolCallPart`` (same id)
assistant ``ImagePart`` (data)              ``FilePart``
==========================================  ==============================================

What only pydantic-ai has (timestamps, usage, model names, provider ids, a
retried outcome, instructions...) rides in ``Message.meta["pydantic_ai"]``; what
only agentledger has (a thinking block's provider ``index`` when it is not the
part's position, an unfinished block, a Gemini ``thought_signature``) rides in
the pydantic-ai part's ``provider_details["agentledger"]``; other ``meta`` rides
in the pydantic-ai message's ``metadata["agentledger_meta"]``. The times
``to_pydantic_ai`` stamps on parts the transcript gave none are named in the
message's ``metadata["agentledger_stamped"]``, so ``from_pydantic_ai`` does
not take them for pydantic-ai's own. So both directions are exact, and a
part one side has no place for at all (a redacted thinking block, citations,
a text document, audio, a native tool call...) is a
`~agentledger.errors.TranscriptError` naming it, never a silent drop.

`PydanticAIHistory` keeps a pydantic-ai conversation in an agentledger store,
one run per turn, each referencing the turn before.

Needs pydantic-ai: agentledger's ``[pydantic-ai]`` extra.
"""

from __future__ import annotations

try:
    import pydantic_ai  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    from agentledger._extras import needs_extra

    raise needs_extra("agentledger.contrib.pydantic_ai", "pydantic-ai", e) from e

from agentledger.contrib.pydantic_ai.decoding import from_pydantic_ai
from agentledger.contrib.pydantic_ai.encoding import to_pydantic_ai
from agentledger.contrib.pydantic_ai.history import PydanticAIHistory

__all__ = ["PydanticAIHistory", "from_pydantic_ai", "to_pydantic_ai"]
