"""Run in the ADK peer's own venv (.venv-adk-peer): write a DatabaseSessionService store.

``python adk_peer.py DB`` (a SQLite path, or a SQLAlchemy URL) creates two
sessions with Google ADK's own API, appends events to them (text, a function call
and its response, thinking, a state change with no content), and prints, as one
JSON line, what ``get_session`` returns for each: ``{"<session id>": [<event as
JSON>, ...]}``. Not collected by pytest.
"""

from __future__ import annotations

import asyncio
import json
import sys

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.genai import types

APP, USER = "weather-app", "u1"


def _event(author: str, *parts: types.Part, role: str = "", **kw: object) -> Event:
    content = types.Content(
        role=role or ("user" if author == "user" else "model"), parts=list(parts)
    )
    return Event(author=author, invocation_id="inv-1", content=content, **kw)  # type: ignore[arg-type]


async def main(db: str) -> None:
    url = db if "://" in db else f"sqlite+aiosqlite:///{db}"
    service = DatabaseSessionService(url)
    try:
        chat = await service.create_session(app_name=APP, user_id=USER, session_id="chat-1")
        events = [
            _event("user", types.Part(text="Weather in Paris?")),
            _event(
                "forecaster",
                types.Part(
                    function_call=types.FunctionCall(
                        id="call-1", name="weather", args={"city": "Paris", "celsius": 21.5}
                    )
                ),
            ),
            _event(
                "forecaster",
                types.Part(
                    function_response=types.FunctionResponse(
                        id="call-1", name="weather", response={"sky": "sunny", "celsius": 21.5}
                    )
                ),
                role="user",
            ),
            _event("forecaster", types.Part(text="Sunny, 21.5 C.")),
            Event(
                author="forecaster",
                invocation_id="inv-1",
                actions=EventActions(state_delta={"city": "Paris"}),
            ),
            _event("user", types.Part(text="And tomorrow, caf\u00e9?")),
            _event(
                "forecaster",
                types.Part(text="Looking at the models.", thought=True),
                types.Part(text="Rain."),
            ),
        ]
        for event in events:
            await service.append_event(chat, event)
        short = await service.create_session(app_name=APP, user_id=USER, session_id="chat-2")
        await service.append_event(short, _event("user", types.Part(text="hi")))
        returned = {}
        for sid in ("chat-1", "chat-2"):
            got = await service.get_session(app_name=APP, user_id=USER, session_id=sid)
            assert got is not None
            returned[sid] = [e.model_dump(mode="json", exclude_none=True) for e in got.events]
        print(json.dumps(returned))
    finally:
        await service.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
