"""How a browser proves it holds a token: a login form and an HttpOnly cookie [S4].

A browser cannot send an ``Authorization`` header on its own, so the login
form takes the token once and the answer stores it in a cookie that scripts
cannot read (``HttpOnly``), that no other site's page can make the browser
send (``SameSite=Strict``), scoped to ``/ui`` and ``Secure`` over HTTPS. Each
request then presents the cookie's token to the same :class:`TokenTable` check
as a bearer token (SHA-256, constant-time compare, same role and label
scope), so revoking a token in the token file locks its browsers out too. A
bearer header, when present, is used instead of the cookie.

Only roles that may read sessions use the inspector: ``reader`` and ``host``.
A page enters through the service's one gate (:func:`enter`, over
:func:`agentledger.service.gate.gate`), as a store call does.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote, urlsplit

from litestar import Request

from agentledger.service.auth import Principal, TokenTable
from agentledger.service.gate import check_role, gate
from agentledger.service.state import ServiceState
from agentledger.service.wire import ADMIN_READERS

__all__ = [
    "COOKIE",
    "INSPECTOR_USE",
    "SECURE_COOKIES",
    "authenticate",
    "browser_authorization",
    "check_token",
    "cookie_header",
    "enter",
    "safe_next",
    "same_origin",
    "secure_cookie",
]

COOKIE = "agentledger_inspector"
"""The cookie holding the inspector's token."""

_PATH = "/ui"


INSPECTOR_USE = "use the inspector (reader or host)"
"""What a token of another role (``worker``) may not do, in the words of its refusal."""


def browser_authorization(request: Request[Any, Any, Any]) -> str | None:
    """The ``Authorization`` value of a browser request: its bearer header, else its cookie's
    token as one."""
    header = request.headers.get("authorization")
    if header is None:
        token = unquote(request.cookies.get(COOKIE, ""))
        header = f"Bearer {token}" if token else None
    return header


def enter(state: ServiceState, request: Request[Any, Any, Any], operation: str) -> Principal:
    """The principal of a browser request through the service's gate (see :func:`check_token`).

    Raises:
        TransientError: the service is shutting down.
        AccessDeniedError: see :func:`check_token`.
    """
    authorization = browser_authorization(request)
    return gate(state, operation, authorization, ADMIN_READERS, purpose=INSPECTOR_USE)


def authenticate(tokens: TokenTable, request: Request[Any, Any, Any], operation: str) -> Principal:
    """The principal of a browser request (its bearer header, else its cookie).

    Raises:
        AccessDeniedError: see :func:`check_token`.
    """
    return check_token(tokens, browser_authorization(request), operation)


def check_token(tokens: TokenTable, authorization: str | None, operation: str) -> Principal:
    """The principal of an ``Authorization`` value, if it may use the inspector.

    Raises:
        AccessDeniedError: (401) no token or an unknown one; (403) a role that
            may not read sessions (a ``worker`` token).
    """
    principal = tokens.authenticate(authorization, operation)
    return check_role(principal, operation, ADMIN_READERS, INSPECTOR_USE)


def cookie_header(token: str, *, secure: bool) -> str:
    """The ``Set-Cookie`` value storing ``token`` (or clearing it when ``token`` is empty)."""
    parts = [f"{COOKIE}={quote(token, safe='')}", f"Path={_PATH}", "HttpOnly", "SameSite=Strict"]
    if not token:
        parts.append("Max-Age=0")
    if secure:
        parts.append("Secure")
    return "; ".join(parts)


SECURE_COOKIES = ("auto", "always", "never")
"""``agentledger serve --secure-cookies``: when the login cookie is marked ``Secure``."""


def secure_cookie(request: Request[Any, Any, Any], setting: str) -> bool:
    """Whether the cookie is ``Secure``: ``always``, ``never``, or (``auto``) over HTTPS.

    ``auto`` sees HTTPS only when the request arrived as HTTPS, or through a proxy
    whose ``X-Forwarded-Proto`` uvicorn trusts (by default one on 127.0.0.1): a
    service behind a TLS proxy on another host says ``always``.
    """
    if setting == "always":
        return True
    return setting == "auto" and request.url.scheme == "https"


def same_origin(request: Request[Any, Any, Any]) -> bool:
    """Whether a form post comes from a page of this service (login CSRF guard).

    Browsers send ``Sec-Fetch-Site`` (or at least ``Origin``) with every
    POST; a client that sends neither (curl, a test) is not a cross-site page.
    """
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc == request.headers.get("host", "")


def safe_next(target: str) -> str:
    """``target`` if it is a path of the inspector, else the inspector's home (no open redirect)."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith(_PATH) or "\\" in target:
        return _PATH
    if target != _PATH and not target.startswith((f"{_PATH}/", f"{_PATH}?")):
        return _PATH
    return target
