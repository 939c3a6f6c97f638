"""How a refused command reports: one line on stderr, as text or (``--json``) a JSON object.

Every refusal is one line, whatever raised it: an agentledger error, a
command's own wording, or an optional extra that is not installed, which is
named with the command that installs it (from where this copy of
agentledger was installed: its checkout or its wheel file).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from agentledger._extras import install_command

__all__ = [
    "EXTRAS",
    "MissingExtra",
    "install_command",
    "missing_extra",
    "report",
    "wants_json",
]

EXTRAS: dict[str, tuple[str, str]] = {
    "psycopg": ("postgres", "a PostgreSQL database"),
    "psycopg_pool": ("postgres", "a PostgreSQL database"),
    "cryptography": ("encryption", "encryption at rest"),
    "litestar": ("service", "the store service"),
    "uvicorn": ("service", "the store service"),
    "httptools": ("service", "the store service"),
    "uvloop": ("service", "the store service"),
    "aiohttp": ("service", "the store service"),
    "prometheus_client": ("service", "the store service"),
    "jinja2": ("service", "the store service"),
    "temporalio": ("temporal", "the Temporal engine"),
    "openai": ("openai", "the OpenAI client"),
    "anthropic": ("anthropic", "the Anthropic client"),
    "boto3": ("bedrock", "the Bedrock client"),
    "botocore": ("bedrock", "the Bedrock client"),
    "opentelemetry": ("otel", "tracing"),
    "agents": ("openai-agents", "the OpenAI Agents SDK adapter"),
    "pydantic_ai": ("pydantic-ai", "the pydantic-ai adapter"),
}
"""A third-party module an extra brings -> (the extra, the feature that needs it)."""


class MissingExtra(Exception):
    """An optional extra this installation lacks: which, for what, and the missing module."""

    def __init__(self, *, extra: str, feature: str, module: str) -> None:
        super().__init__(
            f"{feature} needs agentledger's [{extra}] extra, which is not installed "
            f"(no module {module!r}): {install_command(extra)}"
        )
        self.extra = extra
        self.feature = feature
        self.module = module


def missing_extra(error: BaseException) -> MissingExtra | None:
    """The extra whose absence caused ``error`` (an import error, or one caused by it)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ImportError) and seen.name:
            top = seen.name.partition(".")[0]
            if top in EXTRAS:
                extra, feature = EXTRAS[top]
                return MissingExtra(extra=extra, feature=feature, module=top)
        seen = seen.__cause__ or seen.__context__
    return None


def wants_json(args: Sequence[str]) -> bool:
    """Whether ``--json`` was given (before any ``--``), so a refusal is printed as JSON."""
    options = args[: list(args).index("--")] if "--" in args else args
    return "--json" in options


def report(error: BaseException, *, json: bool) -> None:
    """Print ``error`` as the one line of a refusal on stderr (a JSON object with ``json``)."""
    message = " ".join(str(error).split())  # one line, whatever the message holds
    if not json:
        print(f"agentledger: error: {message}", file=sys.stderr)
        return
    from agentledger.cli.output import dump

    fields = {k: v for k, v in vars(error).items() if k != "message" and not k.startswith("_")}
    try:
        line = dump({"error": {"type": type(error).__name__, "message": message, "fields": fields}})
    except TypeError:  # a field JSON cannot hold: shown as its text
        fields = {k: str(v) for k, v in fields.items()}
        line = dump({"error": {"type": type(error).__name__, "message": message, "fields": fields}})
    print(line, file=sys.stderr)
