"""Adapters that bring agentledger to other agent frameworks (DESIGN section 13).

Each adapter is its own module with its own extra, imported on its own, so
``import agentledger`` never needs those frameworks:

* ``agentledger.contrib.openai_agents`` (``pip install 'agentledger[openai-agents]'``):
  an OpenAI Agents SDK ``Session`` on product memory.
* ``agentledger.contrib.pydantic_ai`` (``pip install 'agentledger[pydantic-ai]'``):
  lossless conversion between transcripts and pydantic-ai message history.
"""

__all__: list[str] = []
