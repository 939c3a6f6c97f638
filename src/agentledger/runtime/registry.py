"""What a runtime knows by name: agents, toolsets and model clients.

Registration is open until the first run and closed from then on
(:class:`~agentledger.errors.RegistrationClosedError`): runs in flight, and
a durable engine replaying them, must see the same agents and tools they
started with. Closing resolves every agent's tools once.
"""

from __future__ import annotations

from agentledger.errors import RegistrationClosedError, ValidationError
from agentledger.providers.model import ModelClient, ToolDefinition
from agentledger.runtime.agent import Agent
from agentledger.runtime.planner import PromptRenderer
from agentledger.runtime.tools import AgentTool, Tool, Toolset

__all__ = ["Registry", "ResolvedAgent"]


class ResolvedAgent:
    """An agent with its tools resolved: callable tools, agent tools and definitions."""

    def __init__(
        self,
        agent: Agent,
        tools: dict[str, Tool],
        agent_tools: dict[str, str],
        definitions: tuple[ToolDefinition, ...],
    ) -> None:
        self.agent = agent
        self.tools = tools
        self.agent_tools = agent_tools
        """Tool name -> id of the agent that a call runs as a child run."""
        self.definitions = definitions
        self.effects = {n: t.effect for n, t in tools.items() if t.effect != "retry"}
        """Tool name -> effect class, for the tools whose effect is not ``retry``."""
        self.confirm_tools = frozenset(n for n, t in tools.items() if t.confirm)
        """Names of the tools whose calls need approval."""
        self.renders_prompt = isinstance(agent.planner, PromptRenderer)
        """Whether its planner renders a prompt (checked once: the check is not cheap)."""


class Registry:
    """Agents, toolsets and models by id; frozen by :meth:`close`."""

    def __init__(self) -> None:
        self._agents: dict[str, Agent] = {}
        self._toolsets: dict[str, Toolset] = {}
        self._models: dict[str, ModelClient] = {}
        self._resolved: dict[str, ResolvedAgent] | None = None

    @property
    def closed(self) -> bool:
        """Whether registration has closed (the first run started)."""
        return self._resolved is not None

    def _check_open(self, name: str) -> None:
        if self._resolved is not None:
            raise RegistrationClosedError(name=name)

    def add_agent(self, agent: Agent) -> None:
        """Register ``agent`` under its id."""
        self._check_open(getattr(agent, "id", repr(agent)))
        if not isinstance(agent, Agent):
            raise ValidationError(field="agent", expected="an Agent", got=type(agent).__name__)
        if agent.id in self._agents:
            raise ValidationError(
                field="agent.id", expected="an id not yet registered", got=agent.id
            )
        for source in agent.tools:
            if not isinstance(source, (str, Tool, Toolset, AgentTool)):
                name = getattr(source, "__name__", type(source).__name__)
                raise ValidationError(
                    field=f"agent {agent.id}.tools",
                    expected="a toolset name, Tool, Toolset or agent_tool "
                    "(decorate an async function with @tool to make it a Tool)",
                    got=name,
                )
        self._agents[agent.id] = agent

    def add_toolset(self, toolset: Toolset) -> None:
        """Register ``toolset`` under its name."""
        self._check_open(getattr(toolset, "name", repr(toolset)))
        if not isinstance(toolset, Toolset):
            raise ValidationError(field="toolset", expected="a Toolset", got=type(toolset).__name__)
        if toolset.name in self._toolsets:
            raise ValidationError(
                field="toolset.name", expected="a name not yet registered", got=toolset.name
            )
        self._toolsets[toolset.name] = toolset

    def add_model(self, model_id: str, client: ModelClient) -> None:
        """Register a model client under ``model_id``."""
        self._check_open(model_id)
        if not isinstance(model_id, str) or not model_id:
            raise ValidationError(field="model_id", expected="a non-empty string", got=model_id)
        if not hasattr(client, "complete"):
            raise ValidationError(
                field=f"model {model_id}", expected="a ModelClient", got=type(client).__name__
            )
        if model_id in self._models:
            raise ValidationError(
                field="model_id", expected="an id not yet registered", got=model_id
            )
        self._models[model_id] = client

    def check(self, agent_id: str) -> None:
        """Check that ``agent_id`` is registered and every agent's tools resolve.

        Registration stays open (or closed) as it was.

        Raises:
            ValidationError: no such agent, or an unknown toolset or agent.
        """
        agents = self._resolved if self._resolved is not None else self._agents
        if agent_id not in agents:
            raise ValidationError(
                field="agent_id",
                expected=f"a registered agent ({sorted(agents)})",
                got=agent_id,
            )
        if self._resolved is None:
            for agent in self._agents.values():
                self._resolve(agent)

    def has_agent(self, agent_id: str) -> bool:
        """Whether ``agent_id`` is registered."""
        return agent_id in self._agents

    def if_busy(self, agent_id: str) -> str:
        """The agent's default policy for a message while its session is busy."""
        return self._agents[agent_id].if_busy

    def close(self) -> None:
        """Resolve every agent's tools and refuse further registration (idempotent).

        Raises:
            ValidationError: an unknown toolset or agent, or two tools with one name.
        """
        if self._resolved is not None:
            return
        self._resolved = {a.id: self._resolve(a) for a in self._agents.values()}

    def _resolve(self, agent: Agent) -> ResolvedAgent:
        tools: dict[str, Tool] = {}
        agent_tools: dict[str, str] = {}
        definitions: list[ToolDefinition] = []

        def add(name: str, definition: ToolDefinition) -> None:
            if name in tools or name in agent_tools:
                raise ValidationError(
                    field=f"agent {agent.id}.tools", expected="unique tool names", got=name
                )
            definitions.append(definition)

        for source in agent.tools:
            if isinstance(source, str):
                if source not in self._toolsets:
                    raise ValidationError(
                        field=f"agent {agent.id}.tools",
                        expected=f"a registered toolset ({sorted(self._toolsets)})",
                        got=source,
                    )
                source = self._toolsets[source]
            if isinstance(source, Toolset):
                for item in source.tools:
                    add(item.name, item.definition())
                    tools[item.name] = item
            elif isinstance(source, Tool):
                add(source.name, source.definition())
                tools[source.name] = source
            elif isinstance(source, AgentTool):
                child = self._agents.get(source.agent_id)
                if child is None:
                    raise ValidationError(
                        field=f"agent {agent.id}.agents",
                        expected=f"a registered agent ({sorted(self._agents)})",
                        got=source.agent_id,
                    )
                if child.id == agent.id:
                    raise ValidationError(
                        field=f"agent {agent.id}.agents", expected="another agent", got=child.id
                    )
                add(source.tool_name, source.definition(child.description))
                agent_tools[source.tool_name] = child.id
            else:
                raise ValidationError(
                    field=f"agent {agent.id}.tools",
                    expected="a toolset name, Tool, Toolset or agent_tool",
                    got=source,
                )
        return ResolvedAgent(agent, tools, agent_tools, tuple(definitions))

    def agent(self, agent_id: str) -> ResolvedAgent:
        """The resolved agent ``agent_id``.

        Raises:
            ValidationError: no such agent (or registration is still open).
        """
        if self._resolved is None:
            raise ValidationError(field="registry", expected="closed registration", got="open")
        resolved = self._resolved.get(agent_id)
        if resolved is None:
            raise ValidationError(
                field="agent_id",
                expected=f"a registered agent ({sorted(self._resolved)})",
                got=agent_id,
            )
        return resolved

    def model(self, model_id: str) -> ModelClient:
        """The model client registered as ``model_id``.

        Raises:
            ValidationError: no such model.
        """
        client = self._models.get(model_id)
        if client is None:
            raise ValidationError(
                field="model_id",
                expected=f"a registered model ({sorted(self._models)})",
                got=model_id,
            )
        return client
