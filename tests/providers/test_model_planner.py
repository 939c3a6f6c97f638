"""A full ModelPlanner run through each real client and its loopback stub ([T3] [T7])."""

from __future__ import annotations

from typing import Any

import pytest

from agentledger.providers._names import wire_name
from agentledger.runtime import tool
from agentledger.storage import MemoryStore, RunStatus
from agentledger.transcript import Message, TextPart
from tests.providers.test_clients import KITS, Kit
from tests.runtime.support import chat_runtime


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.mark.parametrize("kit", KITS, ids=[k.name for k in KITS])
async def test_model_planner_tool_loop(kit: Kit) -> None:
    """The runtime's planner drives a tool loop over real HTTP: call, tool, result, answer."""
    with kit.stub() as stub:
        client: Any = kit.client(stub)
        try:
            wire = wire_name(add.name)
            stub.script(
                kit.tool_reply([("call_1", wire, {"a": 2, "b": 3})], ""), kit.text_reply("5")
            )
            store = MemoryStore()
            await store.create_session("s1", created_at=_now())
            runtime = chat_runtime(store, client, tools=[add])
            out = await runtime.agent_client("chat").run(
                "s1", [Message(role="user", parts=(TextPart(text="2+3?"),))]
            )
        finally:
            await client.aclose()
    assert out.status == RunStatus.COMPLETED, out.failure
    assert out.final is not None
    assert out.final.parts == (TextPart(text="5"),)
    assert len(stub.requests) == 2


def _now() -> Any:
    from datetime import UTC, datetime

    stamp = datetime.now(UTC)
    return stamp.replace(microsecond=stamp.microsecond // 1000 * 1000)
