"""Pick a real model client from the environment, for demos and quick starts."""

from __future__ import annotations

import os
from collections.abc import Mapping

from agentledger.providers.model import ModelClient

__all__ = ["client_from_environment"]

_AWS = ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_BEARER_TOKEN_BEDROCK")


def client_from_environment(
    environ: Mapping[str, str] | None = None,
) -> tuple[str, ModelClient] | None:
    """``(model, client)`` for the first provider with credentials, or None.

    Checked in order: ``ANTHROPIC_API_KEY`` (model ``AGENTLEDGER_ANTHROPIC_MODEL``,
    default ``claude-sonnet-4-5``), ``OPENAI_API_KEY`` (Responses API, model
    ``AGENTLEDGER_OPENAI_MODEL``, default ``gpt-5-mini``), then AWS credentials
    (``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE`` or ``AWS_BEARER_TOKEN_BEDROCK``;
    model ``AGENTLEDGER_BEDROCK_MODEL``, default
    ``us.anthropic.claude-sonnet-4-5-20250929-v1:0``; region ``AWS_REGION``,
    default ``us-east-1``). SDKs are imported only for the provider chosen.

    Raises:
        ImportError: a key is set but that provider's SDK is not installed.
    """
    env = os.environ if environ is None else environ
    if env.get("ANTHROPIC_API_KEY"):
        from agentledger.providers.anthropic import AnthropicClient

        model = env.get("AGENTLEDGER_ANTHROPIC_MODEL", "claude-sonnet-4-5")
        return model, AnthropicClient(api_key=env["ANTHROPIC_API_KEY"])
    if env.get("OPENAI_API_KEY"):
        from agentledger.providers.openai import OpenAIResponsesClient

        model = env.get("AGENTLEDGER_OPENAI_MODEL", "gpt-5-mini")
        return model, OpenAIResponsesClient(api_key=env["OPENAI_API_KEY"])
    if any(env.get(name) for name in _AWS):
        from agentledger.providers.bedrock import BedrockClient

        model = env.get("AGENTLEDGER_BEDROCK_MODEL", "us.anthropic.claude-sonnet-4-5-20250929-v1:0")
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
        return model, BedrockClient(region_name=region)
    return None
