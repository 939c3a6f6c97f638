"""The inspector's pages: sessions, a session's run tree, a run's records and transcript.

Every page is read-only and server-rendered. A page authenticates its
browser (:mod:`.login`), checks the token's label scope exactly as the store
methods do (:func:`agentledger.service.scope.check_scope`), reads the backend
and renders a template. Ids travel as query parameters, so any printable id
(slashes, ``?``, ``#`` included) has a page. Live pages follow the log through
the service's follow stream (:func:`agentledger.service.follow.follow`) and
fetch the fragments that changed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

import msgspec
from litestar import Request, Response, get, post
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath
from litestar.response import Redirect, Stream

from agentledger.errors import (
    AccessDeniedError,
    AgentledgerError,
    CorruptRecordError,
    TransientError,
    ValidationError,
)
from agentledger.service.auth import Principal
from agentledger.service.error_codec import http_status
from agentledger.service.follow import follow
from agentledger.service.inspector.conversation import arrange
from agentledger.service.inspector.login import (
    COOKIE,
    authenticate,
    check_token,
    cookie_header,
    safe_next,
    same_origin,
    secure_cookie,
)
from agentledger.service.inspector.positions import end_position, record_types, window
from agentledger.service.inspector.render import page_url, render
from agentledger.service.inspector.tree import run_tree
from agentledger.service.scope import check_scope
from agentledger.service.wire import Subject
from agentledger.storage.payloads import CHILD_RUN_LINKED
from agentledger.storage.types import SessionStatus
from agentledger.transcript.replay import TRANSCRIPT_RECORD_TYPES, build_messages_from_run_log

__all__ = ["inspector_handlers"]

_log = logging.getLogger("agentledger.service.inspector")
_ANY = Request[Any, Any, Any]
_HTML = "text/html; charset=utf-8"
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
SESSIONS_PAGE = 25
"""Sessions per page of the sessions view."""
RECORDS_PAGE = 200
"""Records per page of a run's records view."""
_STATIC = {
    "inspector.css": "text/css; charset=utf-8",
    "inspector.js": "text/javascript; charset=utf-8",
}

Work = Callable[[Principal], Awaitable[Response[Any]]]


def _html(body: str, status: int = 200, headers: dict[str, str] | None = None) -> Response[Any]:
    return Response(
        body, status_code=status, media_type=_HTML, headers={**_HEADERS, **(headers or {})}
    )


def _param(request: _ANY, name: str) -> str:
    value = request.query_params.get(name)
    return str(value) if value is not None else ""


def _params(request: _ANY, name: str) -> list[str]:
    return [str(v) for v in request.query_params.getall(name, []) if v]


def _parse_labels(text: str) -> dict[str, str]:
    """``k=v, k2=v2`` as a dict.

    Raises:
        ValidationError: a pair without ``=`` or with an empty key.
    """
    labels: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise ValidationError(field="labels", expected="k=v pairs, comma-separated", got=pair)
        labels[key.strip()] = value.strip()
    return labels


def _limit(request: _ANY, default: int, most: int) -> int:
    text = _param(request, "limit")
    if not text:
        return default
    if not text.isdigit() or not 1 <= int(text) <= most:
        raise ValidationError(field="limit", expected=f"a number from 1 to {most}", got=text)
    return int(text)


class _Inspector:
    """The handlers of one service's inspector, sharing its state."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.store = state.store

    async def answer(
        self, request: _ANY, operation: str, work: Work, *, page: bool
    ) -> Response[Any]:
        """Authenticate, run ``work``; errors become pages (or plain text for fragments)."""
        started = time.perf_counter()
        try:
            if self.state.stopping:
                raise TransientError("the service is shutting down", operation=operation)
            principal = authenticate(self.state.tokens, request, operation)
            response = await work(principal)
        except AccessDeniedError as e:
            response = self.refused(request, e, page=page)
        except AgentledgerError as e:
            response = self.failed(e, http_status(e), page=page)
        except Exception:
            _log.exception("inspector: %s failed", operation)
            failure = TransientError("internal error in the inspector", operation=operation)
            response = self.failed(failure, 500, page=page)
        self.state.metrics.observe(
            operation, response.status_code or 200, time.perf_counter() - started
        )
        return response

    def refused(self, request: _ANY, error: AccessDeniedError, *, page: bool) -> Response[Any]:
        """401: to the login form (clearing a cookie that failed); 403: why, as a page."""
        if not page:
            return Response(f"{error}\n", status_code=error.status, media_type="text/plain")
        if error.status != 401:
            return _html(render("error.html", error=error, kind="Not allowed", login=True), 403)
        asked = str(request.url.path) + (f"?{request.url.query}" if request.url.query else "")
        if COOKIE not in request.cookies and "authorization" not in request.headers:
            return Redirect(page_url("/ui/login", next=asked), status_code=303, headers=_HEADERS)
        body = render("login.html", error=str(error.reason), next=safe_next(asked))
        secure = secure_cookie(request, self.state.secure_cookies)
        clear = {"Set-Cookie": cookie_header("", secure=secure)}
        return _html(body, 401, clear)

    def failed(self, error: AgentledgerError, status: int, *, page: bool) -> Response[Any]:
        if not page:
            return Response(f"{error}\n", status_code=status, media_type="text/plain")
        kind = type(error).__name__
        return _html(render("error.html", error=error, kind=kind, login=False), status)

    async def in_scope(self, principal: Principal, operation: str, kind: str, id: str) -> None:
        if not id:
            raise ValidationError(field="id", expected=f"a {kind} id", got=id)
        await check_scope(self.store, principal, operation, (Subject(kind, id),))

    # -- sessions --------------------------------------------------------------------------

    async def sessions(self, request: _ANY, principal: Principal) -> Response[Any]:
        status = _param(request, "status")
        if status and status not in set(SessionStatus):
            raise ValidationError(field="status", expected="active or ended", got=status)
        asked = _parse_labels(_param(request, "labels"))
        limit = _limit(request, SESSIONS_PAGE, 200)
        cursor = _param(request, "cursor")
        clash = {k for k, v in principal.labels.items() if asked.get(k, v) != v}
        if clash:  # a filter outside the token's scope matches nothing it may see
            sessions, next_cursor = [], ""
        else:
            found = await self.store.list_sessions(
                statuses=[SessionStatus(status)] if status else (),
                labels={**asked, **principal.labels},
                cursor=cursor,
                limit=limit,
            )
            sessions, next_cursor = found.sessions, found.next_cursor
        return _html(
            render(
                "sessions.html",
                principal=principal,
                sessions=sessions,
                status=status,
                labels=_param(request, "labels"),
                cursor=cursor,
                next_cursor=next_cursor,
                limit=_param(request, "limit"),
                clash=sorted(clash),
            )
        )

    async def session(
        self, request: _ANY, principal: Principal, *, fragment: bool
    ) -> Response[Any]:
        session_id = _param(request, "id")
        await self.in_scope(principal, "inspect_session", "session", session_id)
        session = await self.store.load_session(session_id)
        tree = run_tree(await self.store.list_runs_by_session(session_id))
        if fragment:
            return _html(render("_tree.html", tree=tree, session=session))
        end = await end_position(self.store.list_session_run_records, session_id)
        return _html(
            render("session.html", principal=principal, session=session, tree=tree, end=end)
        )

    # -- runs ------------------------------------------------------------------------------

    async def _run_context(self, run_id: str) -> dict[str, Any]:
        run = await self.store.load_run(run_id)
        first = await self.store.list_run_records(run_id, cursor="", limit=1)
        predecessor = ""
        if first.records:
            try:
                started = msgspec.json.decode(first.records[0].payload)
                predecessor = str(started.get("predecessor_run_id", ""))
            except (msgspec.DecodeError, AttributeError):
                predecessor = ""
        return {"run": run, "predecessor": predecessor}

    async def run(self, request: _ANY, principal: Principal) -> Response[Any]:
        run_id = _param(request, "id")
        await self.in_scope(principal, "inspect_run", "run", run_id)
        context = await self._run_context(run_id)
        types = _params(request, "type")
        after = _param(request, "after")
        shown = await window(
            self.store.list_run_records,
            run_id,
            after,
            limit=_limit(request, RECORDS_PAGE, 1000),
            types=types,
        )
        links = await window(
            self.store.list_run_records, run_id, "", limit=1000, types=(CHILD_RUN_LINKED,)
        )
        children = []
        for record in links.records:
            try:
                children.append(msgspec.json.decode(record.payload))
            except msgspec.DecodeError:
                continue
        counts = await record_types(self.store.list_run_records, run_id)
        return _html(
            render(
                "run.html",
                principal=principal,
                tab="records",
                types=types,
                after=after,
                window=shown,
                counts=sorted(counts.items()),
                children=children,
                **context,
            )
        )

    async def rows(self, request: _ANY, principal: Principal) -> Response[Any]:
        run_id = _param(request, "id")
        await self.in_scope(principal, "inspect_run", "run", run_id)
        shown = await window(
            self.store.list_run_records,
            run_id,
            _param(request, "after"),
            limit=RECORDS_PAGE,
            types=_params(request, "type"),
        )
        return _html(render("_rows.html", window=shown))

    async def header(self, request: _ANY, principal: Principal) -> Response[Any]:
        run_id = _param(request, "id")
        await self.in_scope(principal, "inspect_run", "run", run_id)
        return _html(render("_run_header.html", **await self._run_context(run_id)))

    async def transcript(
        self, request: _ANY, principal: Principal, *, fragment: bool
    ) -> Response[Any]:
        run_id = _param(request, "id")
        await self.in_scope(principal, "inspect_run", "run", run_id)
        corrupt: CorruptRecordError | None = None
        try:
            bubbles = arrange(await build_messages_from_run_log(self.store, run_id))
        except CorruptRecordError as e:
            bubbles, corrupt = [], e
        if fragment:
            return _html(render("_conversation.html", bubbles=bubbles, corrupt=corrupt))
        context = await self._run_context(run_id)
        end = await end_position(self.store.list_run_records, run_id)
        return _html(
            render(
                "transcript.html",
                principal=principal,
                tab="transcript",
                bubbles=bubbles,
                corrupt=corrupt,
                end=end,
                transcript_types=sorted(TRANSCRIPT_RECORD_TYPES),
                **context,
            )
        )

    async def events(self, request: _ANY, principal: Principal, kind: str) -> Response[Any]:
        scope_id = _param(request, "id")
        await self.in_scope(principal, f"inspect_{kind}", kind, scope_id)
        after = request.headers.get("last-event-id") or _param(request, "after")
        list_page = (
            self.store.list_run_records if kind == "run" else self.store.list_session_run_records
        )
        stream: AsyncIterator[bytes] = await follow(
            list_page,
            scope_id,
            after,
            notifier=self.state.notifier,
            stopping=lambda: bool(self.state.stopping),
        )
        return Stream(
            stream,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )


def _static() -> dict[str, bytes]:
    folder = resources.files("agentledger.service.inspector") / "static"
    return {name: (folder / name).read_bytes() for name in _STATIC}


def inspector_handlers(state: Any) -> list[HTTPRouteHandler]:
    """The inspector's routes under ``/ui`` for a service's ``ServiceState``."""
    ui = _Inspector(state)
    files = _static()

    def page(
        path: str,
        operation: str,
        view: Callable[[_ANY, Principal], Awaitable[Response[Any]]],
        *,
        is_page: bool = True,
    ) -> HTTPRouteHandler:
        async def handle(request: _ANY) -> Response[Any]:
            return await ui.answer(request, operation, lambda p: view(request, p), page=is_page)

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
        return _html(render("login.html", error="", next=safe_next(_param(request, "next"))))

    @post("/ui/login", include_in_schema=False, status_code=200)
    async def login(request: _ANY) -> Response[Any]:
        form = parse_qs((await request.body()).decode("utf-8", errors="replace"))
        token = (form.get("token") or [""])[0].strip()
        target = safe_next((form.get("next") or [""])[0])
        if not same_origin(request):
            return _html(
                render("login.html", error="this form was posted by another site", next=target), 403
            )
        try:
            check_token(state.tokens, f"Bearer {token}" if token else None, "inspector_login")
        except AccessDeniedError as e:
            return _html(render("login.html", error=e.reason, next=target), e.status)
        secure = secure_cookie(request, state.secure_cookies)
        return Redirect(
            target,
            status_code=303,
            headers={**_HEADERS, "Set-Cookie": cookie_header(token, secure=secure)},
        )

    @post("/ui/logout", include_in_schema=False, status_code=200)
    async def logout(request: _ANY) -> Response[Any]:
        secure = secure_cookie(request, state.secure_cookies)
        return Redirect(
            "/ui/login",
            status_code=303,
            headers={**_HEADERS, "Set-Cookie": cookie_header("", secure=secure)},
        )

    @get("/ui/go", include_in_schema=False)
    async def go(request: _ANY) -> Response[Any]:
        run_id, session_id = _param(request, "run").strip(), _param(request, "session").strip()
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
