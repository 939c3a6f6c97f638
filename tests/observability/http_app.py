"""A plain ASGI app behind TraceMiddleware on a real uvicorn server, for the HTTP tests.

``/echo`` answers with the ``traceparent`` header it received, ``/fail``
answers 503, ``/boom`` raises. :func:`serving` runs it on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

from agentledger.observability import TraceMiddleware


class Boom(RuntimeError):
    """What ``/boom`` raises."""


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Echo the trace headers, or fail as the path says."""
    assert scope["type"] == "http"
    headers = {k.decode(): v.decode() for k, v in scope["headers"]}
    if scope["path"] == "/boom":
        raise Boom("the handler broke")
    status = 503 if scope["path"] == "/fail" else 200
    body = json.dumps({"traceparent": headers.get("traceparent", "")}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


@asynccontextmanager
async def serving() -> AsyncIterator[str]:
    """The traced app on a uvicorn server on a free loopback port; yields its base URL."""
    config = uvicorn.Config(
        TraceMiddleware(app), host="127.0.0.1", port=0, lifespan="off", log_level="critical"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
