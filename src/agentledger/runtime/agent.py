"""Agents: an id, a planner and the tools it may call.

An agent is configuration; the runtime resolves its tools (toolsets by name,
other agents as tools) when registration closes, so a typo fails before the
first run instead of in the middle of one.
"""

from __future__ import annotations

from collections.abc import Iterable

from agentledger.errors import ValidationError
from agentledger.runtime.history import HistoryPolicy
from agentledger.runtime.planner import Planner
from agentledger.runtime.tools import AgentTool, Tool, Toolset, agent_tool

__all__ = ["Agent", "ToolSource"]

ToolSource = str | Tool | Toolset | AgentTool
"""A toolset name, a tool, a toolset, or an agent offered as a tool."""


class Agent:
    """A named agent.

    Args:
        id: the agent id (also its tool name when another agent calls it).
        planner: decides each step (e.g. a :class:`~agentledger.runtime.ModelPlanner`).
        tools: toolset names registered with the runtime, :class:`Tool` or
            :class:`Toolset` objects, and :func:`agent_tool` specs.
        agents: ids of registered agents this agent may call as tools; each
            call runs a child run [L2]/[L4].
        description: what the agent does (shown to a parent agent's model).
        max_turns: planner turns a run may take before it fails.
        history: how much of the conversation each turn sends the model
            (:class:`~agentledger.runtime.LastTurns`, :class:`~agentledger.runtime.TokenBudget`,
            :class:`~agentledger.runtime.Compaction`); None sends it all.
        max_turn_attempts: how many times one planner turn or one tool call
            may be started without finishing (its worker killed, out of
            memory, timed out) before the run pauses, suspended with the
            reason ``crash_loop``, instead of starting it again; the host then
            resumes the run (the turn's unfinished work runs again) or cancels
            it. Attempts that end with a TransientError do not count (they
            follow the engine's retry policy). Only Temporal runs can meet this:
            in process, a crash ends the process and its runs with it.
    """

    def __init__(
        self,
        id: str,
        planner: Planner,
        *,
        tools: Iterable[ToolSource] = (),
        agents: Iterable[str] = (),
        description: str = "",
        max_turns: int = 16,
        history: HistoryPolicy | None = None,
        max_turn_attempts: int = 3,
        if_busy: str = "reject",
    ) -> None:
        if not isinstance(id, str) or not id:
            raise ValidationError(field="agent.id", expected="a non-empty string", got=id)
        if not hasattr(planner, "plan_start") or not hasattr(planner, "plan_resume"):
            raise ValidationError(
                field=f"agent {id}.planner", expected="a Planner", got=type(planner).__name__
            )
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValidationError(field=f"agent {id}.max_turns", expected=">= 1", got=max_turns)
        if (
            not isinstance(max_turn_attempts, int)
            or isinstance(max_turn_attempts, bool)
            or max_turn_attempts < 1
        ):
            raise ValidationError(
                field=f"agent {id}.max_turn_attempts", expected=">= 1", got=max_turn_attempts
            )
        if history is not None and not isinstance(history, HistoryPolicy):
            raise ValidationError(
                field=f"agent {id}.history",
                expected="a history policy (LastTurns, TokenBudget, Compaction or your own)",
                got=type(history).__name__,
            )
        from agentledger.runtime.busy import check_policy

        self.if_busy = check_policy(if_busy, f"agent {id}.if_busy").value
        self.id = id
        self.history = history
        self.planner = planner
        self.tools: tuple[ToolSource, ...] = (*tools, *(agent_tool(a) for a in agents))
        self.description = description
        self.max_turns = max_turns
        self.max_turn_attempts = max_turn_attempts

    def __repr__(self) -> str:
        return f"<Agent {self.id}>"
