"""Stub servers and real SDK clients pointed at them (loopback only)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from agentledger.providers.anthropic import AnthropicClient
from agentledger.providers.bedrock import BedrockClient
from agentledger.providers.openai import OpenAIChatClient, OpenAIResponsesClient
from agentledger.testing.providers import AnthropicStub, BedrockStub, OpenAIStub


@pytest.fixture
def anthropic_stub() -> Iterator[AnthropicStub]:
    with AnthropicStub() as stub:
        yield stub


@pytest.fixture
def openai_stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as stub:
        yield stub


@pytest.fixture
def bedrock_stub() -> Iterator[BedrockStub]:
    with BedrockStub() as stub:
        yield stub


def anthropic_client(stub: AnthropicStub) -> AnthropicClient:
    return AnthropicClient(api_key="test-key", base_url=stub.url, max_retries=0, timeout=10)


def chat_client(stub: OpenAIStub) -> OpenAIChatClient:
    return OpenAIChatClient(
        api_key="test-key", base_url=stub.url + "/v1", max_retries=0, timeout=10
    )


def responses_client(stub: OpenAIStub) -> OpenAIResponsesClient:
    return OpenAIResponsesClient(
        api_key="test-key", base_url=stub.url + "/v1", max_retries=0, timeout=10
    )


def bedrock_client(stub: BedrockStub) -> BedrockClient:
    return BedrockClient(
        region_name="us-east-1",
        endpoint_url=stub.url,
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        read_timeout=10,
    )


@pytest.fixture
async def anthropic_live(anthropic_stub: AnthropicStub) -> AsyncIterator[AnthropicClient]:
    async with anthropic_client(anthropic_stub) as client:
        yield client


@pytest.fixture
async def bedrock_live(bedrock_stub: BedrockStub) -> AsyncIterator[BedrockClient]:
    async with bedrock_client(bedrock_stub) as client:
        yield client
