"""The inspector's routes under ``/ui``: pages, fragments, live streams, static files, login.

Pages and fragments are :class:`.pages.Pages` handlers; the actions a
``host`` token may take are :class:`.actions.Actions` handlers. Ids travel
as query parameters, so any printable id (slashes, ``?``, ``#`` included)
has a page. Live pages follow the log through the service's follow stream
and fetch the fragments that changed.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from litestar import Request, Response, get, post
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath
from litestar.response import Redirect

from agentledger.errors import AccessDeniedError
from agentledger.service.auth import Principal
from agentledger.service.inspector.actions import Actions
from agentledger.service.inspector.finder import search_page
from agentledger.service.inspector.login import (
    check_token,
    cookie_header,
    safe_next,
    same_origin,
    secure_cookie,
)
from agentledger.service.inspector.model_page import model_turn_page
from agentledger.service.inspector.pages import HEADERS, Pages, html, param
from agentledger.service.inspector.render import page_url, render
from agentledger.service.inspector.usage import PRICES_ENV, load_prices
from agentledger.service.state import ServiceState

__all__ = ["inspector_handlers"]

_ANY = Request[Any, Any, Any]
_STATIC = {
    "inspector.css": "text/css; charset=utf-8",
    "inspector.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


def _static() -> dict[str, bytes]:
    folder = resources.files("agentledger.service.inspector") / "static"
    return {name: (folder / name).read_bytes() for name in _STATIC}


def inspector_handlers(state: ServiceState) -> list[HTTPRouteHandler]:
    """The inspector's routes under ``/ui`` for a service's ``ServiceState``.

    The price table named by ``$AGENTLEDGER_PRICES`` (if set) is read once, here.

    Raises:
        ValidationError: the price table cannot be read or holds something else.
    """
    ui = Pages(state, load_prices(os.environ.get(PRICES_ENV)))
    act = Actions(ui)
    files = _static()

    def page(
        path: str,
        operation: str,
        view: Callable[[_ANY, Principal], Awaitable[Response[Any]]],
        *,
        is_page: bool = True,
        method: Any = get,
    ) -> HTTPRouteHandler:
        async def handle(request: _ANY) -> Response[Any]:
            return await ui.answer(request, operation, lambda p: view(request, p), page=is_page)

        if method is post:
            return post(path, name=operation, include_in_schema=False, status_code=200)(handle)
        return get(path, name=operation, include_in_schema=False)(handle)

    @get("/ui/static/{name:str}", include_in_schema=False)
    async def static(name: FromPath[str]) -> Response[Any]:
        if name not in files:
            return Response(b"not found\n", status_code=404, media_type="text/plain")
        return Response(
            files[name],
            media_type=_STATIC[name],
            headers={"Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"},
        )

    @get("/ui/login", include_in_schema=False)
    async def login_form(request: _ANY) -> Response[Any]:
        return html(render("login.html", error="", next=safe_next(param(request, "next"))))

    @post("/ui/login", include_in_schema=False, status_code=200)
    async def login(request: _ANY) -> Response[Any]:
        form = parse_qs((await request.body()).decode("utf-8", errors="replace"))
        token = (form.get("token") or [""])[0].strip()
        target = safe_next((form.get("next") or [""])[0])
        if not same_origin(request):
            return html(
                render("login.html", error="this form was posted by another site", next=target), 403
            )
        try:
            check_token(state.tokens, f"Bearer {token}" if token else None, "inspector_login")
        except AccessDeniedError as e:
            return html(render("login.html", error=e.reason, next=target), e.status)
        secure = secure_cookie(request, state.secure_cookies)
        return Redirect(
            target,
            status_code=303,
            headers={**HEADERS, "Set-Cookie": cookie_header(token, secure=secure)},
        )

    @post("/ui/logout", include_in_schema=False, status_code=200)
    async def logout(request: _ANY) -> Response[Any]:
        secure = secure_cookie(request, state.secure_cookies)
        return Redirect(
            "/ui/login",
            status_code=303,
            headers={**HEADERS, "Set-Cookie": cookie_header("", secure=secure)},
        )

    @get("/ui/go", include_in_schema=False)
    async def go(request: _ANY) -> Response[Any]:
        run_id, session_id = param(request, "run").strip(), param(request, "session").strip()
        if run_id:
            return Redirect(page_url("/ui/run", id=run_id), status_code=303)
        if session_id:
            return Redirect(page_url("/ui/session", id=session_id), status_code=303)
        return Redirect("/ui", status_code=303)

    return [
        static,
        login_form,
        login,
        logout,
        go,
        page("/ui", "inspect_sessions", ui.sessions),
        page(
            "/ui/sessions/rows",
            "inspect_sessions_rows",
            lambda r, p: ui.sessions(r, p, fragment=True),
            is_page=False,
        ),
        page("/ui/events", "inspect_changes", ui.changes, is_page=False),
        page(
            "/ui/session/conversation",
            "inspect_session_conversation",
            lambda r, p: ui.conversation(r, p, fragment=False),
        ),
        page(
            "/ui/session/conversation/body",
            "inspect_session_conversation_body",
            lambda r, p: ui.conversation(r, p, fragment=True),
            is_page=False,
        ),
        page("/ui/session/search", "inspect_session_search", ui.search),
        page("/ui/search", "inspect_search", lambda r, p: search_page(ui, r, p)),
        page("/ui/session/end", "inspect_end_session", act.end_session, method=post),
        page("/ui/session/send", "inspect_send_message", act.send, method=post),
        page("/ui/session/new", "inspect_new_session", act.new_session, method=post),
        page("/ui/run/cancel", "inspect_cancel_run", act.cancel, method=post),
        page("/ui/run/answer", "inspect_answer_run", act.answer, method=post),
        page("/ui/run/fork", "inspect_fork_run", act.fork, method=post),
        page(
            "/ui/run/timeline",
            "inspect_timeline",
            lambda r, p: ui.timeline(r, p, fragment=False),
        ),
        page(
            "/ui/run/waterfall",
            "inspect_waterfall",
            lambda r, p: ui.timeline(r, p, fragment=True),
            is_page=False,
        ),
        page("/ui/session", "inspect_session", lambda r, p: ui.session(r, p, fragment=False)),
        page(
            "/ui/session/tree",
            "inspect_session_tree",
            lambda r, p: ui.session(r, p, fragment=True),
            is_page=False,
        ),
        page(
            "/ui/session/events",
            "inspect_session_events",
            lambda r, p: ui.events(r, p, "session"),
            is_page=False,
        ),
        page("/ui/run", "inspect_run", ui.run),
        page("/ui/run/rows", "inspect_run_rows", ui.rows, is_page=False),
        page("/ui/run/turn", "inspect_model_turn", lambda r, p: model_turn_page(ui, r, p)),
        page("/ui/run/header", "inspect_run_header", ui.header, is_page=False),
        page(
            "/ui/run/transcript",
            "inspect_transcript",
            lambda r, p: ui.transcript(r, p, fragment=False),
        ),
        page(
            "/ui/run/conversation",
            "inspect_conversation",
            lambda r, p: ui.transcript(r, p, fragment=True),
            is_page=False,
        ),
        page(
            "/ui/run/events",
            "inspect_run_events",
            lambda r, p: ui.events(r, p, "run"),
            is_page=False,
        ),
    ]
