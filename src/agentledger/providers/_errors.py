"""Provider errors mapped once, at the SDK boundary, into agentledger's error tree.

* HTTP 408, 429 and 5xx (Anthropic's 529 "overloaded" included), timeouts,
  refused or dropped connections and a stream cut short: `TransientError`, the
  same call may succeed later.
* Any other status: `ProviderError(provider, status, body)`, the provider refused.
* An optional SDK that is not installed: ``ImportError`` naming the extra.
"""

from __future__ import annotations

import importlib
from typing import Any

from agentledger.errors import ProviderError, TranscriptError, TransientError

__all__ = [
    "bad_response",
    "by_status",
    "connection_lost",
    "missing_sdk",
    "transport_errors",
    "truncated",
]


def missing_sdk(package: str, extra: str) -> ImportError:
    """The error for a provider SDK that is not installed, with the install hint."""
    from agentledger._extras import needs_extra

    return needs_extra(
        f"the {package} client",
        extra,
        ModuleNotFoundError(f"No module named {package!r}", name=package),
    )


def by_status(provider: str, operation: str, status: int, body: str) -> Exception:
    """`TransientError` for 408, 429 and 5xx, else `ProviderError`."""
    if status in (408, 429) or status >= 500:
        return TransientError(f"{provider} answered {status}: {body[:300]}", operation=operation)
    return ProviderError(provider=provider, status=status, body=body)


def connection_lost(provider: str, operation: str, error: BaseException) -> TransientError:
    """A timeout, a refused connection or one dropped mid-answer."""
    return TransientError(f"{provider}: {type(error).__name__}: {error}", operation=operation)


def bad_response(provider: str, field: str, expected: str, got: object) -> TranscriptError:
    """A provider answer we cannot turn into transcript parts (``field`` is a path in it)."""
    shown = repr(got)
    shown = shown if len(shown) <= 120 else shown[:117] + "..."
    return TranscriptError(
        field=field,
        expected=expected,
        got=got,
        message=f"{provider} response: {field}: expected {expected}, got {shown}",
    )


def truncated(provider: str, operation: str, why: str) -> TransientError:
    """A stream that ended before its last event: the answer is incomplete, try again."""
    return TransientError(f"{provider} stream ended early: {why}", operation=operation)


def transport_errors() -> tuple[type[BaseException], ...]:
    """The transport error classes of the HTTP libraries the SDKs use (httpx2, httpx)."""
    found: list[type[BaseException]] = []
    for name in ("httpx2", "httpx"):
        try:
            module: Any = importlib.import_module(name)
        except ImportError:
            continue
        found.append(module.TransportError)
        found.append(module.DecodingError)
    return tuple(found)
