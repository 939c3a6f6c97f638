"""The read model: typed views of runs and sessions, built on the store and the runtime's
record vocabulary, shared by the inspector and the CLI.

- :mod:`.runs`: :class:`RunView` (a run at a glance) and :class:`RunDigest`, which
  folds a log once and then only its tail.
- :mod:`.conversation`: :class:`SessionConversation`, a session's top-level runs as
  one conversation, a fork shown as a branch leaving its source at a message.
- :mod:`.timeline`: :class:`Timeline`, where a run's time went.
- :mod:`.usage`: :class:`Usage`, tokens by model, run and turn, and their cost.
- :mod:`.transcript`: the history links and window marks of a transcript chain.
- :mod:`.model_view`: :class:`~.model_view.ModelTurnView`, a planner turn as the model saw it:
  its request, its answer and what changed since the previous request.
- :mod:`.waits`: what suspended runs wait for, and what tool calls point at.
- :mod:`.tree`: a session's runs as a tree; :mod:`.sessions`: the tree with a view of each
  run and the messages still waiting (:mod:`.messages`: what became of each message).
"""

from agentledger.views.conversation import Branch, SessionConversation, session_conversation
from agentledger.views.runs import (
    HistorySource,
    RunDigest,
    RunView,
    read_run_start,
    read_run_view,
    summarize,
)
from agentledger.views.timeline import Row, Timeline, timeline
from agentledger.views.usage import Price, PriceTable, Tokens, Usage, usage_of

__all__ = [
    "Branch",
    "HistorySource",
    "Price",
    "PriceTable",
    "Row",
    "RunDigest",
    "RunView",
    "SessionConversation",
    "Timeline",
    "Tokens",
    "Usage",
    "read_run_start",
    "read_run_view",
    "session_conversation",
    "summarize",
    "timeline",
    "usage_of",
]
