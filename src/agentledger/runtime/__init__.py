"""The runtime: agents that plan, call tools and other agents, wait, get canceled, recover.

Every step of a run is a record in the store (DESIGN sections 4-5), so a run
can be rebuilt, inspected and continued from its log. Build a ``Runtime``
over a store, register agents, and run them through ``agent_client(...)``.
"""

from agentledger.runtime import events
from agentledger.runtime.agent import Agent
from agentledger.runtime.checkpoint import InDoubtToolCall
from agentledger.runtime.client import AgentClient, RunHandle
from agentledger.runtime.completion import Completion
from agentledger.runtime.history import (
    Compaction,
    HistoryContext,
    HistoryCut,
    HistoryPolicy,
    LastTurns,
    TokenBudget,
    estimate_tokens,
)
from agentledger.runtime.model_planner import ModelPlanner
from agentledger.runtime.planner import (
    Answer,
    AwaitClarification,
    AwaitConfirmation,
    AwaitExternalTools,
    ModelUsage,
    Note,
    PlanInput,
    Planner,
    PlanResult,
    PlanResumeInput,
    RenderedPrompt,
    RunContext,
    ToolCall,
    ToolDecision,
    ToolFailed,
    ToolHappened,
    ToolOutcome,
    ToolRetry,
)
from agentledger.runtime.prompts import PromptUse, PromptVersion, prompt_versions
from agentledger.runtime.records import Phase
from agentledger.runtime.runtime import Runtime
from agentledger.runtime.stream import QueueSink, StreamSink
from agentledger.runtime.tools import (
    AgentTool,
    Tool,
    ToolContext,
    Toolset,
    agent_tool,
    idempotency_key,
    tool,
)
from agentledger.runtime.wire import Awaiting, RunOutput
from agentledger.transcript import Message, TextPart

__all__ = [
    "Agent",
    "AgentClient",
    "AgentTool",
    "Answer",
    "AwaitClarification",
    "AwaitConfirmation",
    "AwaitExternalTools",
    "Awaiting",
    "Compaction",
    "Completion",
    "HistoryContext",
    "HistoryCut",
    "HistoryPolicy",
    "InDoubtToolCall",
    "LastTurns",
    "ModelPlanner",
    "ModelUsage",
    "Note",
    "Phase",
    "PlanInput",
    "PlanResult",
    "PlanResumeInput",
    "Planner",
    "PromptUse",
    "PromptVersion",
    "QueueSink",
    "RenderedPrompt",
    "RunContext",
    "RunHandle",
    "RunOutput",
    "Runtime",
    "StreamSink",
    "TokenBudget",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDecision",
    "ToolFailed",
    "ToolHappened",
    "ToolOutcome",
    "ToolRetry",
    "Toolset",
    "agent_tool",
    "estimate_tokens",
    "events",
    "idempotency_key",
    "prompt_versions",
    "tool",
    "user_message",
]


def user_message(text: str) -> Message:
    """A user message of plain text: the usual new input of a run."""
    return Message(role="user", parts=(TextPart(text=text),))
