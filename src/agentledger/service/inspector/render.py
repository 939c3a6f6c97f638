"""HTML from Jinja2 templates shipped in the package; every value is escaped.

Autoescaping is on for every template and undefined names are errors, so a
stored id, label or payload is always text on the page, never markup.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

import jinja2
import markupsafe

from agentledger.service.inspector.conversation import data_uri, kind_of, pretty_json
from agentledger.views.timeline import duration_text

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


def _when(at: datetime | None) -> markupsafe.Markup:
    """A ``<time>`` element in UTC; the page's script shows it in the viewer's zone."""
    text = iso(at)
    if not text:
        return markupsafe.Markup("")
    return markupsafe.Markup('<time datetime="{0}" title="{0} (UTC)">{0}</time>').format(text)


def _money(amount: Decimal, currency: str) -> str:
    """A cost with enough digits to see a fraction of a cent."""
    digits = 2 if abs(amount) >= 1 else 4 if abs(amount) >= Decimal("0.01") else 6
    return f"{amount:.{digits}f} {currency}"


def _preview(payload: bytes, most: int = 120) -> str:
    """A payload on one line, cut at ``most`` characters (a folded JSON's summary)."""
    text = " ".join(bytes(payload).decode("utf-8", errors="replace").split())
    return text if len(text) <= most else text[: most - 1] + "…"


def _snippet(payload: bytes, q: str, around: int = 80) -> str:
    """The part of a payload around the first place it holds ``q``."""
    text = " ".join(bytes(payload).decode("utf-8", errors="replace").split())
    at = text.lower().find(q.lower())
    if at < 0:
        return _preview(payload, 2 * around)
    start, end = max(at - around, 0), min(at + len(q) + around, len(text))
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def _leaves(value: Any, key: str = "") -> Iterable[str]:
    """A decoded JSON value as ``key: value`` texts, one per scalar (parts' kinds left out)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k != "kind":
                yield from _leaves(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v, key)
    elif value is not None and value != "":
        yield f"{key}: {value}" if key else str(value)


def _readable(payload: bytes) -> str:
    """A payload as words: each value with its field's name (``role: user · text: Hi``),
    not raw JSON; a payload that is not JSON as its text."""
    try:
        decoded = json.loads(bytes(payload))
    except ValueError:
        return " ".join(bytes(payload).decode("utf-8", errors="replace").split())
    return " · ".join(" ".join(leaf.split()) for leaf in _leaves(decoded))


def _found(payload: bytes, q: str, around: int = 100) -> markupsafe.Markup:
    """The readable payload around the first place it holds ``q``, the match marked."""
    text = _readable(payload)
    at = text.lower().find(q.lower()) if q else -1
    if at < 0:
        cut = text if len(text) <= 2 * around else text[: 2 * around - 1] + "…"
        return markupsafe.Markup("{0}").format(cut)
    start, end = max(at - around, 0), min(at + len(q) + around, len(text))
    return markupsafe.Markup("{0}{1}<mark>{2}</mark>{3}{4}").format(
        "…" if start else "", text[start:at], text[at : at + len(q)], text[at + len(q) : end],
        "…" if end < len(text) else "",
    )  # fmt: skip


def _sample(items: Any, most: int) -> list[Any]:
    """At most ``most`` of ``items``, evenly spread, the first and the last kept."""
    values: list[Any] = list(items)
    if len(values) <= most:
        return values
    step = (len(values) - 1) / (most - 1)
    return [values[round(i * step)] for i in range(most)]


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
    when=_when,
    money=_money,
    preview=_preview,
    snippet=_snippet,
    found=_found,
    readable=_readable,
    duration=duration_text,
    sample=_sample,
)
_ENV.globals.update(url=page_url)


def render(template: str, **context: Any) -> str:
    """The named template rendered with ``context``."""
    return _ENV.get_template(template).render(**context)
