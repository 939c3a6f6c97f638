"""Connecting to Temporal with agentledger's data converter.

Every client that starts runs and every worker that runs them must encode
payloads the same way; :func:`connect` is ``Client.connect`` with
:data:`~agentledger.engine.temporal.converter.data_converter` set, and
:func:`check_client` refuses a client connected without it.
"""

from __future__ import annotations

import re
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from agentledger.engine.temporal.converter import MsgspecPayloadConverter, data_converter
from agentledger.errors import TransientError, ValidationError
from agentledger.observability.propagation import temporal_plugins

__all__ = ["check_client", "connect"]


async def connect(target_host: str, *, namespace: str = "default", **options: Any) -> Client:
    """Connect to the Temporal frontend at ``target_host`` (``HOST:PORT``).

    Args:
        target_host: e.g. ``"127.0.0.1:7233"``.
        namespace: the Temporal namespace runs live in.
        **options: passed to ``temporalio.client.Client.connect`` (TLS, API key ...).

    Raises:
        TransientError: the server cannot be reached.
    """
    if not isinstance(target_host, str) or not target_host:
        raise ValidationError(field="target_host", expected="HOST:PORT", got=target_host)
    # With tracing on (a replay-safe provider), Temporal's plugin carries the trace context.
    options["plugins"] = temporal_plugins(options.get("plugins", ()))
    try:
        return await Client.connect(
            target_host, namespace=namespace, data_converter=data_converter, **options
        )
    except RPCError as e:
        raise TransientError(f"temporal at {target_host}: {e}", operation="connect") from e
    except RuntimeError as e:  # the SDK reports a refused connection as a RuntimeError
        raise TransientError(_unreachable(target_host, str(e)), operation="connect") from e


_OS_MESSAGE = re.compile(r'message: "([^"]+)"')


def _unreachable(target_host: str, error: str) -> str:
    """The words for a Temporal server that did not answer (the SDK's own text, which
    is the Rust transport's debug output, reduced to the system's reason in it)."""
    if "tonic::transport::Error" not in error:
        return f"temporal at {target_host}: {error}"
    reason = _OS_MESSAGE.search(error)
    why = f" ({reason[1].lower()})" if reason else ""
    return (
        f"the Temporal server is not reachable at {target_host}{why}: is it running? "
        f"(`temporal server start-dev` starts one for development)"
    )


def check_client(client: Client) -> None:
    """Refuse a client whose payloads agentledger's workers could not read.

    Raises:
        ValidationError: the client was connected without agentledger's data converter.
    """
    converter = client.data_converter.payload_converter_class
    if not (isinstance(converter, type) and issubclass(converter, MsgspecPayloadConverter)):
        raise ValidationError(
            field="client",
            expected="a Temporal client connected with agentledger's data converter "
            "(agentledger.engine.temporal.connect, or Client.connect(..., "
            "data_converter=agentledger.engine.temporal.data_converter))",
            got=getattr(converter, "__name__", converter),
        )
