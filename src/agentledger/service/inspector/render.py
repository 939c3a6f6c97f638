"""HTML from Jinja2 templates shipped in the package; every value is escaped.

Autoescaping is on for every template and undefined names are errors, so a
stored id, label or payload is always text on the page, never markup.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import jinja2

from agentledger.service.inspector.conversation import data_uri, kind_of, pretty_json

__all__ = ["iso", "page_url", "render"]


def iso(at: datetime | None) -> str:
    """A time as ISO 8601 UTC with milliseconds and ``Z`` (``""`` for none)."""
    if at is None:
        return ""
    text = at.astimezone(UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def page_url(path: str, **params: str | Iterable[str] | None) -> str:
    """``path`` with query parameters (lists repeat their key, empty values are left out)."""
    pairs: list[tuple[str, str]] = []
    for key, value in params.items():
        if value is None or value == "":
            continue
        values = [value] if isinstance(value, str) else list(value)
        pairs.extend((key, v) for v in values)
    return f"{path}?{urlencode(pairs)}" if pairs else path


def _labels(labels: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _web(url: str) -> bool:
    """Whether a stored URL may be a link: http(s) only, never ``javascript:`` or ``data:``."""
    return url.lower().startswith(("https://", "http://"))


def _size(count: int) -> str:
    for unit in ("bytes", "KiB", "MiB"):
        if count < 1024 or unit == "MiB":
            return f"{count} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024  # type: ignore[assignment]
    return str(count)


_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("agentledger.service.inspector", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters.update(
    iso=iso,
    pretty=pretty_json,
    kind=kind_of,
    data_uri=data_uri,
    labels=_labels,
    size=_size,
    web=_web,
)
_ENV.globals.update(url=page_url)


def render(template: str, **context: Any) -> str:
    """The named template rendered with ``context``."""
    return _ENV.get_template(template).render(**context)
