"""`client_from_environment`: a real client when a key is set, None otherwise."""

from __future__ import annotations

from agentledger.providers import client_from_environment
from agentledger.providers.anthropic import AnthropicClient
from agentledger.providers.bedrock import BedrockClient
from agentledger.providers.openai import OpenAIResponsesClient


def test_no_key_means_no_client() -> None:
    assert client_from_environment({}) is None


async def test_each_key_picks_its_provider() -> None:
    chosen = client_from_environment({"ANTHROPIC_API_KEY": "k"})
    assert chosen is not None
    assert isinstance(chosen[1], AnthropicClient)
    await chosen[1].aclose()
    chosen = client_from_environment({"OPENAI_API_KEY": "k", "AGENTLEDGER_OPENAI_MODEL": "gpt-x"})
    assert chosen is not None
    assert chosen[0] == "gpt-x"
    assert isinstance(chosen[1], OpenAIResponsesClient)
    await chosen[1].aclose()
    chosen = client_from_environment({"AWS_ACCESS_KEY_ID": "k", "AWS_REGION": "eu-west-1"})
    assert chosen is not None
    assert isinstance(chosen[1], BedrockClient)
    await chosen[1].aclose()


def test_import_without_sdks_is_fine() -> None:
    """The adapters' pure functions import no SDK (they are imported lazily by the clients)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import agentledger.providers.openai, agentledger.providers.anthropic\n"
        "import agentledger.providers.bedrock\n"
        "assert not {'openai', 'anthropic', 'boto3'} & set(sys.modules), sys.modules.keys()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
