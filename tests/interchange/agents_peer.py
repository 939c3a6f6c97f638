"""Run with the OpenAI Agents SDK and SQLAlchemy: write a SQLAlchemySession store.

``python agents_peer.py URL`` (a SQLAlchemy async URL) adds a conversation's items
to session ``chat-1`` with the SDK's own ``SQLAlchemySession``, in two calls, and
prints, as one JSON line, what its ``get_items()`` returns. Not collected by pytest.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "weather",
        "arguments": '{"city": "Paris", "celsius": 21.5}',
        "id": "fc_1",
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21.5 C"},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Sunny.", "annotations": []}],
    },
    {"role": "user", "content": "And tomorrow, caf\u00e9?"},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_2",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Rain.", "annotations": []}],
    },
]


async def main(url: str) -> None:
    session = SQLAlchemySession.from_url("chat-1", url=url, create_tables=True)
    try:
        await session.add_items(ITEMS[:4])
        await session.add_items(ITEMS[4:])
        print(json.dumps(await session.get_items()))
    finally:
        await session.engine.dispose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
