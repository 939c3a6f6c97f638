"""Acting on runs from the inspector: a ``host`` token may cancel, answer and fork runs and
end a session.

The inspector stays read-only for ``reader`` tokens (refused, 403, nothing
changes). An action is a form posted by a page of this service (the cookie
is ``SameSite=Strict`` and a cross-site post is refused too), checked
against the token's label scope like the store method it calls, and carried
out by that same typed method, so it is recorded like any other.

Answering a suspended run [K1] and forking from a message [V2] run an agent:
the service does them through its host runtime
(:class:`agentledger.service.host_runtime.RuntimeHost`) and refuses them, in
words, without one. Cancelling [C1] goes through the host runtime too when
there is one (the intent recorded, then its engine asked); without one it
records the request (the reason in the run's metadata and a
``runtime.cancellation_intent`` record) and the run ends canceled once its
host acts on it. Ending a session stops new work in it: its runs stop at
their next write. With a host runtime that takes messages
(:class:`~agentledger.service.host_runtime.ChatHost`), a host may send a
session its next message (the next turn by reference, with what it does
while a turn runs) and start a new session with an agent it picks.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

from litestar import Request, Response
from litestar.response import Redirect

from agentledger.errors import AccessDeniedError, NotFoundError, ValidationError
from agentledger.service.auth import Principal
from agentledger.service.host_runtime import ChatHost, RuntimeHost, request_cancellation
from agentledger.service.inspector.answers import answer_of, question_of
from agentledger.service.inspector.login import same_origin
from agentledger.service.inspector.pages import HEADERS, Pages
from agentledger.service.inspector.render import page_url
from agentledger.service.scope import check_scope
from agentledger.service.state import ServiceState
from agentledger.service.wire import Role, Subject
from agentledger.storage import RunStatus

__all__ = ["Actions"]

_ANY = Request[Any, Any, Any]
_RECORDED_WAIT = 10.0
"""Seconds an action waits for the run it started to be recorded before showing it."""


def _now_ms() -> datetime:
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


class Actions:
    """The inspector's POST handlers; each answers with a redirect to the page acted on."""

    def __init__(self, pages: Pages) -> None:
        self.pages = pages
        self.state: ServiceState = pages.state
        self.store = self.state.store

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

    def _host_runtime(self, operation: str) -> RuntimeHost:
        """The service's host runtime.

        Raises:
            ValidationError: none is attached (the service alone runs no agent).
        """
        host: RuntimeHost | None = self.state.host_runtime
        if host is None:
            raise ValidationError(
                field="host_runtime",
                expected=f"a service started with a host runtime to {operation} "
                "(agentledger serve --host-runtime module:factory); this one runs no agents",
                got="none attached",
            )
        return host

    async def _recorded(self, run_id: str) -> None:
        """Wait until the host runtime's new run is recorded, so its page has it to show
        (an engine starts a run's workflow before its first write)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _RECORDED_WAIT
        while True:
            try:
                await self.store.load_run(run_id)
                return
            except NotFoundError:
                if loop.time() > deadline:
                    return  # its page says it is not found yet, and the log tells why
                await asyncio.sleep(0.02)

    async def _run_in_scope(self, form: dict[str, str], principal: Principal, op: str) -> str:
        run_id = form.get("id", "")
        if not run_id:
            raise ValidationError(field="id", expected="a run id", got=run_id)
        await check_scope(self.store, principal, op, (Subject("run", run_id),))
        return run_id

    async def cancel(self, request: _ANY, principal: Principal) -> Response[Any]:
        """Cancel a running run [C1]: through the host runtime when there is one, else
        record the request for the host running it."""
        form = await self._form(request, principal, "record_run_cancellation")
        run_id = await self._run_in_scope(form, principal, "record_run_cancellation")
        reason = form.get("reason", "").strip() or "canceled from the inspector"
        host: RuntimeHost | None = self.state.host_runtime
        if host is not None:
            await host.cancel(run_id, reason)
        else:
            await request_cancellation(self.store, run_id, reason)
        self.state.notifier.notify()
        return Redirect(page_url("/ui/run", id=run_id), status_code=303, headers=HEADERS)

    async def end_session(self, request: _ANY, principal: Principal) -> Response[Any]:
        """End a session: its running runs stop at their next write [D2]."""
        form = await self._form(request, principal, "end_session")
        session_id = form.get("id", "")
        if not session_id:
            raise ValidationError(field="id", expected="a session id", got=session_id)
        await check_scope(self.store, principal, "end_session", (Subject("session", session_id),))
        await self.store.end_session(session_id, ended_at=_now_ms())
        self.state.notifier.notify()
        return Redirect(page_url("/ui/session", id=session_id), status_code=303, headers=HEADERS)

    async def answer(self, request: _ANY, principal: Principal) -> Response[Any]:
        """Answer a suspended run [K1]: its continuation starts in the host runtime; the page
        lands at the end of its transcript, where the reply comes."""
        form = await self._form(request, principal, "resume_run")
        run_id = await self._run_in_scope(form, principal, "resume_run")
        host = self._host_runtime("answer a suspended run")
        meta = await self.store.load_run(run_id)
        question = (
            await question_of(self.store, run_id) if meta.status is RunStatus.SUSPENDED else None
        )
        continuation = await host.resume(run_id, answer_of(form, question))
        await self._recorded(continuation)
        self.state.notifier.notify()
        to = page_url("/ui/run/transcript", id=continuation, at="end") + "#latest"
        return Redirect(to, status_code=303, headers=HEADERS)  # on the reply, as it comes

    async def fork(self, request: _ANY, principal: Principal) -> Response[Any]:
        """Start a branch of a run's conversation after one of its messages [V2]."""
        form = await self._form(request, principal, "fork_run")
        run_id = await self._run_in_scope(form, principal, "fork_run")
        through = form.get("through", "").strip()
        message = form.get("message", "").strip()
        if not through:
            raise ValidationError(field="through", expected="the record the fork cuts after",
                                  got=through)  # fmt: skip
        if not message:
            raise ValidationError(field="message", expected="the new user message", got=message)
        host = self._host_runtime("fork a conversation")
        forked = await host.fork(run_id, message, through)
        await self._recorded(forked)
        self.state.notifier.notify()
        return Redirect(page_url("/ui/run/transcript", id=forked), status_code=303, headers=HEADERS)

    def _chat_host(self) -> ChatHost:
        """The service's host runtime, when it takes messages.

        Raises:
            ValidationError: no host runtime, or one that only answers, forks and cancels.
        """
        host = self._host_runtime("send a message")
        if not isinstance(host, ChatHost):
            raise ValidationError(
                field="host_runtime",
                expected="a host runtime that takes messages (send and agents, as "
                "RuntimeClientHost has)",
                got=type(host).__name__,
            )
        return host

    async def send(self, request: _ANY, principal: Principal) -> Response[Any]:
        """The session's next message, by the agent of the turn it follows: the last turn of
        the path the page showed (``after``: a branch), else the session's latest; by
        reference. ``if_busy`` says what it does while a turn runs."""
        form = await self._form(request, principal, "submit_message")
        session_id = form.get("id", "")
        if not session_id:
            raise ValidationError(field="id", expected="a session id", got=session_id)
        await check_scope(self.store, principal, "submit_message",
                          (Subject("session", session_id),))  # fmt: skip
        text = form.get("text", "").strip()
        if not text:
            raise ValidationError(field="text", expected="the message to send", got=text)
        if_busy = form.get("if_busy", "queue")
        host = self._chat_host()
        runs = {r.run_id: r for r in await self.store.list_runs_by_session(session_id)
                if not r.parent_run_id}  # fmt: skip
        # the turn it follows: the last of the path shown (a branch), else the latest turn
        after = form.get("after", "").strip()
        if after not in runs:
            latest = max(runs.values(), key=lambda r: (r.started_at, r.run_id), default=None)
            after = latest.run_id if latest is not None else ""
        while after and runs[after].successor_run_id in runs:  # a suspended turn's continuation
            after = runs[after].successor_run_id
        agent = form.get("agent", "").strip() or (runs[after].agent_id if after else "")
        if not agent:
            raise ValidationError(field="agent", expected="the agent to talk to", got=agent)
        await host.send(session_id, text, agent_id=agent, if_busy=if_busy, after=after)
        self.state.notifier.notify()
        return Redirect(
            page_url("/ui/session/conversation", id=session_id, at="end") + "#latest",
            status_code=303,
            headers=HEADERS,
        )

    async def new_session(self, request: _ANY, principal: Principal) -> Response[Any]:
        """A new session (with the token's labels) whose first turn is the message, by the
        agent picked."""
        form = await self._form(request, principal, "create_session")
        agent = form.get("agent", "").strip()
        text = form.get("text", "").strip()
        host = self._chat_host()
        if agent not in host.agents():
            raise ValidationError(
                field="agent", expected=f"one of {', '.join(host.agents())}", got=agent
            )
        if not text:
            raise ValidationError(field="text", expected="the first message", got=text)
        session_id = f"chat-{uuid.uuid4().hex[:10]}"
        await self.store.create_session(
            session_id, created_at=_now_ms(), labels=dict(principal.labels)
        )
        await host.send(session_id, text, agent_id=agent)
        self.state.notifier.notify()
        return Redirect(
            page_url("/ui/session/conversation", id=session_id, at="end") + "#latest",
            status_code=303,
            headers=HEADERS,
        )
