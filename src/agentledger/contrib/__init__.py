"""Adapters that bring agentledger to other agent frameworks (DESIGN section 13).

Each adapter is its own module with its own extra, imported on its own, so
``import agentledger`` never needs those frameworks:

* ``agentledger.contrib.openai_agents`` (agentledger's ``[openai-agents]`` extra):
  an OpenAI Agents SDK ``Session`` on product memory.
* ``agentledger.contrib.pydantic_ai`` (agentledger's ``[pydantic-ai]`` extra):
  lossless conversion between transcripts and pydantic-ai message history.
"""

__all__: list[str] = []
