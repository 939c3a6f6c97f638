"""agentledger: durable memory, sessions and runs for AI agents."""

from typing import Any

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    """``__version__``, read from the installed metadata on first use.

    Lazily, because ``importlib.metadata`` costs more to import than the rest
    of ``import agentledger``; the CLI's ``--version`` and most programs never ask.
    """
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("agentledger")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        found = "0.0.0"
    globals()["__version__"] = found
    return found
