"""agentledger: durable memory, sessions and runs for AI agents."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("agentledger")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = ["__version__"]
