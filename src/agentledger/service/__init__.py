"""The store service: one process owns the database, workers call it (DESIGN section 9).

``agentledger serve`` runs :func:`create_app` over a SQLite file or a
PostgreSQL database; :class:`StoreClient` implements ``Store`` and
``SessionAdmin`` by calling it, with the backend's results and typed errors.
A :class:`RuntimeHost` (e.g. :class:`RuntimeClientHost` over a ``Runtime``)
given to the service lets the inspector answer, fork and cancel runs.

Names load on first use, so ``agentledger`` can list its commands without the
``service`` extra (litestar, uvicorn, aiohttp) installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentledger.service.admission import OverloadLimits
    from agentledger.service.app import create_app
    from agentledger.service.auth import TokenTable, add_token
    from agentledger.service.client import FollowedRecord, StoreClient
    from agentledger.service.host_runtime import RuntimeClientHost, RuntimeHost
    from agentledger.service.server import serve
    from agentledger.service.wire import Role

__all__ = [
    "FollowedRecord",
    "OverloadLimits",
    "Role",
    "RuntimeClientHost",
    "RuntimeHost",
    "StoreClient",
    "TokenTable",
    "add_token",
    "create_app",
    "serve",
]

_HOMES = {
    "FollowedRecord": "client",
    "OverloadLimits": "admission",
    "Role": "wire",
    "RuntimeClientHost": "host_runtime",
    "RuntimeHost": "host_runtime",
    "StoreClient": "client",
    "TokenTable": "auth",
    "add_token": "auth",
    "create_app": "app",
    "serve": "server",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'agentledger.service' has no attribute {name!r}")
    try:
        module = importlib.import_module(f"agentledger.service.{home}")
    except ImportError as e:
        if e.name is None or e.name.startswith("agentledger"):
            raise
        from agentledger._extras import needs_extra

        raise needs_extra("the store service", "service", e) from e
    return getattr(module, name)
