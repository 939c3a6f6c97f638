"""Stub provider servers on 127.0.0.1 for testing real SDK clients without the network.

Each stub speaks one provider's HTTP API (JSON and streamed answers), checks
incoming requests the way the provider does, and answers with scripted
`Reply`\\ s. One module per provider holds the stub and its reply builders:
`agentledger.testing.providers.openai`, ``.anthropic``, ``.bedrock``.

Example:
    >>> from agentledger.testing.providers import AnthropicStub
    >>> from agentledger.testing.providers.anthropic import message_reply, text_block
    >>> with AnthropicStub() as stub:  # doctest: +SKIP
    ...     stub.script(message_reply(text_block("hi")))
    ...     client = AnthropicClient(api_key="test", base_url=stub.url)
"""

from agentledger.testing.providers._server import RecordedRequest, Reply, StubServer
from agentledger.testing.providers.anthropic import AnthropicStub
from agentledger.testing.providers.bedrock import BedrockStub
from agentledger.testing.providers.openai import OpenAIStub

__all__ = ["AnthropicStub", "BedrockStub", "OpenAIStub", "RecordedRequest", "Reply", "StubServer"]
