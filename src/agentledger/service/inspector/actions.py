"""Acting on runs from the inspector: a ``host`` token may cancel a run or end a session.

The inspector stays read-only for ``reader`` tokens (refused, 403, nothing
changes). An action is a form posted by a page of this service (the cookie
is ``SameSite=Strict`` and a cross-site post is refused too), checked
against the token's label scope like the store method it calls, and carried
out by that same typed store method, so it is recorded like any other.
Cancelling records the [C1] cancellation request (the reason in the run's
metadata and a ``runtime.cancellation_intent`` record): the store service
cannot reach the engine running the run, so the run ends canceled once its
host acts on the request (``runtime.cancel_run`` with the same reason).
Ending a session stops new work in it: its runs stop at their next write.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

from litestar import Request, Response
from litestar.response import Redirect

from agentledger.errors import AccessDeniedError, ValidationError
from agentledger.service.auth import Principal
from agentledger.service.inspector.login import same_origin
from agentledger.service.inspector.pages import HEADERS, Pages
from agentledger.service.inspector.render import page_url
from agentledger.service.scope import check_scope
from agentledger.service.wire import Role, Subject
from agentledger.storage import RecordBuilder, RunStart

__all__ = ["Actions"]

_ANY = Request[Any, Any, Any]


def _now_ms() -> datetime:
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


class Actions:
    """The inspector's POST handlers; each answers with a redirect to the page acted on."""

    def __init__(self, pages: Pages) -> None:
        self.pages = pages
        self.store = pages.store

    async def _form(self, request: _ANY, principal: Principal, operation: str) -> dict[str, str]:
        """The posted form, once the post is known to come from a host's page here.

        Raises:
            AccessDeniedError: (403) a reader token, or a form posted by another site.
        """
        if principal.role != Role.HOST:
            raise AccessDeniedError(
                operation=operation,
                status=403,
                reason=f"a {principal.role} token may only look; acting on runs needs a host token",
            )
        if not same_origin(request):
            raise AccessDeniedError(
                operation=operation, status=403, reason="this form was posted by another site"
            )
        form = parse_qs((await request.body()).decode("utf-8", errors="replace"))
        return {key: values[0] for key, values in form.items() if values}

    async def cancel(self, request: _ANY, principal: Principal) -> Response[Any]:
        """Record a cancellation request for a running run [C1]."""
        form = await self._form(request, principal, "record_run_cancellation")
        run_id = form.get("id", "")
        reason = form.get("reason", "").strip() or "canceled from the inspector"
        if not run_id:
            raise ValidationError(field="id", expected="a run id", got=run_id)
        await check_scope(
            self.store, principal, "record_run_cancellation", (Subject("run", run_id),)
        )
        meta = await self.store.load_run(run_id)
        start = RunStart(
            run_id=meta.run_id,
            agent_id=meta.agent_id,
            session_id=meta.session_id,
            parent_run_id=meta.parent_run_id,
            started_at=meta.started_at,
            labels=dict(meta.labels),
        )
        await self.store.record_run_cancellation(
            RecordBuilder(start).cancellation(reason, at=_now_ms())
        )
        self.pages.state.notifier.notify()
        return Redirect(page_url("/ui/run", id=run_id), status_code=303, headers=HEADERS)

    async def end_session(self, request: _ANY, principal: Principal) -> Response[Any]:
        """End a session: its running runs stop at their next write [D2]."""
        form = await self._form(request, principal, "end_session")
        session_id = form.get("id", "")
        if not session_id:
            raise ValidationError(field="id", expected="a session id", got=session_id)
        await check_scope(self.store, principal, "end_session", (Subject("session", session_id),))
        await self.store.end_session(session_id, ended_at=_now_ms())
        self.pages.state.notifier.notify()
        return Redirect(page_url("/ui/session", id=session_id), status_code=303, headers=HEADERS)
