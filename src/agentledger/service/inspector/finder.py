"""The inspector's search (``/ui/search``): messages across sessions, ids and labels.

One box: the text is looked for in every message the token may see
(``Store.search``, newest first, a page at a time), and, as before, as a
session or run id to open and as labels to list sessions by. A token
scoped to labels searches only its sessions: its labels are added to the
search's filter, so the store never answers with another scope's messages.
"""

from __future__ import annotations

import re
from typing import Any

import markupsafe
from litestar import Request, Response

from agentledger.errors import NotFoundError, SessionPurgedError, ValidationError
from agentledger.service.auth import Principal
from agentledger.service.inspector.pages import SEARCH_PAGE, Pages, html, param, parse_labels
from agentledger.service.inspector.render import render
from agentledger.storage.search import MAX_SEARCH_TEXT, SearchPage, terms_of

__all__ = ["marked", "search_page"]

_ANY = Request[Any, Any, Any]
_MARK = re.compile(r"\*\*([^\W_]+)\*\*")


def marked(snippet: str, q: str) -> markupsafe.Markup:
    """A hit's snippet as HTML: each match the store marked ``**like this**`` (a word of
    ``q``) in ``<mark>``, everything else escaped."""
    terms = set(terms_of(q))
    out: list[str] = []
    at = 0
    for m in _MARK.finditer(snippet):
        if m.group(1).lower() not in terms:
            continue  # stars the message itself holds: text, as written
        out.append(markupsafe.escape(snippet[at : m.start()]))
        out.append(markupsafe.Markup("<mark>{0}</mark>").format(m.group(1)))
        at = m.end()
    out.append(markupsafe.escape(snippet[at:]))
    return markupsafe.Markup("").join(out)


async def _named(pages: Pages, principal: Principal, q: str) -> dict[str, str]:
    """The session and run the text names as an id, if the token may see them."""
    found: dict[str, str] = {}
    if not q or len(q) > 512 or any(c.isspace() for c in q):
        return found
    for kind in ("session", "run"):
        try:
            await pages.in_scope(principal, f"inspect_{kind}", kind, q)
            if kind == "session":
                await pages.store.load_session(q)
            else:
                await pages.store.load_run(q)
        except (NotFoundError, SessionPurgedError, ValidationError):
            continue
        found[kind] = q
    return found


def _as_labels(q: str) -> str:
    """The text as a label filter (``k=v, ...``), or "" when it is not one."""
    if "=" not in q:
        return ""
    try:
        return q if parse_labels(q) else ""
    except ValidationError:
        return ""


async def search_page(pages: Pages, request: _ANY, principal: Principal) -> Response[Any]:
    """``/ui/search?q=TEXT[&labels=k=v][&cursor=C]``.

    Raises:
        ValidationError: labels that are not ``k=v`` pairs, a text too long, or a cursor
            of another search.
    """
    q = param(request, "q").strip()
    labels = param(request, "labels")
    asked = parse_labels(labels)
    cursor = param(request, "cursor")
    if len(q) > MAX_SEARCH_TEXT:
        raise ValidationError(
            field="q", expected=f"at most {MAX_SEARCH_TEXT} characters", got=f"{len(q)}"
        )
    clash = sorted(k for k, v in principal.labels.items() if asked.get(k, v) != v)
    found: SearchPage | None = None
    if q and terms_of(q) and not clash:
        found = await pages.store.search(
            q,
            labels={**asked, **principal.labels} or None,
            limit=SEARCH_PAGE,
            cursor=cursor or None,
        )
    return html(
        render(
            "find.html",
            principal=principal,
            q=q,
            labels=labels,
            cursor=cursor,
            found=found,
            clash=clash,
            named=await _named(pages, principal, q),
            as_labels=_as_labels(q),
            words=bool(terms_of(q)),
            mark=marked,
        )
    )
