"""The clients the docs name import from ``agentledger.providers``, lazily."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import agentledger.providers
from agentledger.providers import anthropic, bedrock, openai

SDKS = ("openai", "anthropic", "boto3", "botocore")

_PROBE = """
import json, sys

def loaded():
    return sorted(
        name for name in sys.modules
        if name.split(".")[0] in {sdks!r} or name.startswith("agentledger.providers.")
    )

import agentledger.providers
after_import = loaded()
from agentledger.providers import (
    AnthropicClient, BedrockClient, OpenAIChatClient, OpenAIResponsesClient,
)
after_names = loaded()
OpenAIChatClient(api_key="key", base_url="http://127.0.0.1:9/v1")
after_build = loaded()
print(json.dumps([after_import, after_names, after_build]))
"""


def test_clients_are_the_adapter_classes() -> None:
    assert agentledger.providers.OpenAIChatClient is openai.OpenAIChatClient
    assert agentledger.providers.OpenAIResponsesClient is openai.OpenAIResponsesClient
    assert agentledger.providers.AnthropicClient is anthropic.AnthropicClient
    assert agentledger.providers.BedrockClient is bedrock.BedrockClient
    assert {"AnthropicClient", "OpenAIChatClient"} <= set(dir(agentledger.providers))


def test_importing_providers_imports_no_sdk() -> None:
    """No SDK (and no adapter module) loads until a client is used; building one loads its SDK."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(sdks=SDKS)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    after_import, after_names, after_build = json.loads(done.stdout)
    adapters = {f"agentledger.providers.{name}" for name in ("openai", "anthropic", "bedrock")}
    assert not [n for n in after_import if n in adapters or n.split(".")[0] in SDKS], after_import
    assert not any(name.split(".")[0] in SDKS for name in after_names), after_names
    assert "agentledger.providers.bedrock" in after_names
    assert "openai" in after_build
    assert not any(name.split(".")[0] in ("anthropic", "boto3") for name in after_build)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="GeminiClient"):
        agentledger.providers.GeminiClient  # type: ignore[attr-defined]  # noqa: B018
