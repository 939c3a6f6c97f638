"""Test doubles that ship with agentledger: run agents without a provider or network.

``ScriptedModel`` is a ``ModelClient`` that replays scripted responses and
records the requests it got; ``reply`` and ``tool_calls`` build responses.
"""

from agentledger.testing.scripted import ScriptedModel, ScriptExhaustedError, reply, tool_calls

__all__ = ["ScriptExhaustedError", "ScriptedModel", "reply", "tool_calls"]
