"""The inspector's pages: what each one reads from the store and which template shows it.

Every page authenticates its browser (:mod:`.login`), checks the token's
label scope exactly as the store methods do
(:func:`agentledger.service.scope.check_scope`), reads the backend and
renders a template. Errors become pages that keep the navigation and say
what happened in words.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from litestar import Request, Response
from litestar.response import Redirect, Stream

from agentledger.errors import (
    AccessDeniedError,
    AgentledgerError,
    ConflictError,
    CorruptRecordError,
    NotFoundError,
    RunNotActiveError,
    SessionEndedError,
    TransientError,
    ValidationError,
)
from agentledger.runtime.prompts import prompt_versions
from agentledger.runtime.records import decode_payload
from agentledger.service.auth import Principal
from agentledger.service.follow import HEARTBEAT, follow
from agentledger.service.gate import metered
from agentledger.service.host_runtime import ChatHost
from agentledger.service.inspector.answers import Question, fork_points, question_of
from agentledger.service.inspector.conversation import Bubble, arrange, bubble_at, searchable
from agentledger.service.inspector.digest import MAX_RECORDS, Log, read_log
from agentledger.service.inspector.login import (
    COOKIE,
    cookie_header,
    enter,
    safe_next,
    secure_cookie,
)
from agentledger.service.inspector.pauses import pause_of
from agentledger.service.inspector.positions import matches, window
from agentledger.service.inspector.render import page_url, render
from agentledger.service.scope import check_scope
from agentledger.service.state import ServiceState
from agentledger.service.wire import Role, Subject
from agentledger.storage.payloads import (
    CHILD_RUN_LINKED,
    ChildRunLinked,
)
from agentledger.storage.protocol import Store
from agentledger.storage.replay import (
    TRANSCRIPT_RECORD_TYPES,
    MessageOrigin,
    replay_with_origins,
)
from agentledger.storage.run_failure import load_run_failure
from agentledger.storage.types import Record, RunMeta, RunStatus, SessionStatus
from agentledger.views.conversation import Branch, session_conversation
from agentledger.views.messages import run_message
from agentledger.views.runs import RunDigest, RunView, read_run_view
from agentledger.views.sessions import SessionRuns, session_rows, session_runs
from agentledger.views.timeline import timeline
from agentledger.views.transcript import (
    HistoryLink,
    WindowMark,
    chain_records,
    history_links,
    window_marks,
)
from agentledger.views.usage import PriceTable, Usage, usage_of
from agentledger.views.waits import exchanges, waiting_kind, waiting_text

if TYPE_CHECKING:
    from agentledger.engine.temporal.paused import Pause

__all__ = [
    "HEADERS",
    "RECORDS_PAGE",
    "SESSIONS_PAGE",
    "TIMELINE_PAGE",
    "TRANSCRIPT_PAGE",
    "Pages",
    "html",
    "in_words",
    "param",
    "parse_labels",
]

_log = logging.getLogger("agentledger.service.inspector")
_ANY = Request[Any, Any, Any]
_HTML = "text/html; charset=utf-8"
HEADERS = {
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
TRANSCRIPT_PAGE = 100
"""Messages per page of a transcript or a session's conversation."""
TIMELINE_PAGE = 150
"""Steps per page of a run's timeline."""
CHILD_STEPS = 100
"""Steps of a child run shown unfolded in its parent's waterfall (its own page has all)."""
KEPT_DIGESTS = 256
"""Runs whose figures a service keeps between a page's live refreshes (the most recent)."""
KEPT_FIRSTS = 1024
"""First messages of sessions a service keeps for the list of sessions."""
SEARCH_PAGE = 20
"""Hits per page of a search of messages."""

Work = Callable[[Principal], Awaitable[Response[Any]]]

_IN_WORDS: tuple[tuple[type[AgentledgerError], str], ...] = (
    (NotFoundError, "Not found"),
    (ValidationError, "That request is not valid"),
    (CorruptRecordError, "Stored data is damaged"),
    (RunNotActiveError, "Not possible in the run's current state"),
    (SessionEndedError, "The session has ended"),
    (ConflictError, "That conflicts with what is stored"),
    (AccessDeniedError, "Not allowed"),
    (TransientError, "The service cannot answer right now"),
)


def in_words(error: AgentledgerError) -> str:
    """A page title saying what went wrong, in words (never a class name)."""
    return next(
        (words for kind, words in _IN_WORDS if isinstance(error, kind)), "Something went wrong"
    )


def html(body: str, status: int = 200, headers: dict[str, str] | None = None) -> Response[Any]:
    """An HTML answer with the inspector's security headers."""
    return Response(
        body, status_code=status, media_type=_HTML, headers={**HEADERS, **(headers or {})}
    )


def param(request: _ANY, name: str) -> str:
    """A query parameter ("" when absent)."""
    value = request.query_params.get(name)
    return str(value) if value is not None else ""


def _params(request: _ANY, name: str) -> list[str]:
    return [str(v) for v in request.query_params.getall(name, []) if v]


def parse_labels(text: str) -> dict[str, str]:
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


def _number(request: _ANY, name: str, default: int, most: int, least: int = 1) -> int:
    text = param(request, name)
    if not text:
        return default
    if not text.isdigit() or not least <= int(text) <= most:
        raise ValidationError(field=name, expected=f"a number from {least} to {most}", got=text)
    return int(text)


@dataclass(frozen=True)
class RunHeader:
    """What a run's header shows (every run page has it): the run at a glance, whether
    Temporal holds it paused, what it asks or waits for, and what its tokens cost."""

    run: RunMeta
    summary: RunView
    pause: Pause | None
    question: Question | None
    host_runtime: bool
    """Whether this service can act on runs (answer, fork, cancel) itself."""
    waiting: str
    """The kind of input a suspended run waits for."""
    waiting_text: str
    predecessor: str
    now: datetime
    usage: Usage
    cost: tuple[Decimal | None, list[str]]
    prices: PriceTable | None
    complete: bool


def _fields(view: Any) -> dict[str, Any]:
    """A view's fields by name, as a template's context (not copied)."""
    return {f.name: getattr(view, f.name) for f in dataclasses.fields(view)}


def _now() -> datetime:
    return datetime.now(UTC)


class Pages:
    """The page handlers of one service's inspector, sharing its state."""

    def __init__(self, state: ServiceState, prices: PriceTable | None) -> None:
        self.state = state
        self.store = state.store
        self.prices = prices
        self.digests: OrderedDict[str, RunDigest] = OrderedDict()
        self.firsts: OrderedDict[str, str] = OrderedDict()
        """The first message of each session's first run, by run id, once read (it never
        changes): the list of sessions reads it once, not on every refresh."""
        """The figures of the runs whose pages were shown last, to fold only their tails."""

    async def answer(
        self, request: _ANY, operation: str, work: Work, *, page: bool
    ) -> Response[Any]:
        """Through the service's gate, run ``work``; errors become pages (or plain text for
        fragments), counted in the metrics like every call."""
        principal: Principal | None = None

        async def entered() -> Response[Any]:
            nonlocal principal
            principal = enter(self.state, request, operation)
            return await work(principal)

        def refuse(error: AgentledgerError, status: int) -> Response[Any]:
            if isinstance(error, AccessDeniedError):
                return self.refused(request, error, principal, page=page)
            return self.failed(error, status, principal, page=page)

        return await metered(self.state, operation, entered, refuse, _status, room="inspector")

    def refused(
        self,
        request: _ANY,
        error: AccessDeniedError,
        principal: Principal | None,
        *,
        page: bool,
    ) -> Response[Any]:
        """401: to the login form (clearing a cookie that failed); 403: why, as a page."""
        if not page:
            return Response(f"{error}\n", status_code=error.status, media_type="text/plain")
        if error.status != 401:
            body = render(
                "error.html", error=error, kind=in_words(error), login=True, principal=principal
            )
            return html(body, 403)
        asked = str(request.url.path) + (f"?{request.url.query}" if request.url.query else "")
        if COOKIE not in request.cookies and "authorization" not in request.headers:
            return Redirect(page_url("/ui/login", next=asked), status_code=303, headers=HEADERS)
        body = render("login.html", error=str(error.reason), next=safe_next(asked))
        secure = secure_cookie(request, self.state.secure_cookies)
        clear = {"Set-Cookie": cookie_header("", secure=secure)}
        return html(body, 401, clear)

    def failed(
        self, error: AgentledgerError, status: int, principal: Principal | None, *, page: bool
    ) -> Response[Any]:
        if not page:
            return Response(f"{error}\n", status_code=status, media_type="text/plain")
        body = render(
            "error.html", error=error, kind=in_words(error), login=False, principal=principal
        )
        return html(body, status)

    def chat(self, principal: Principal) -> list[str] | None:
        """The agents a host may start a session with, when this service's host runtime
        takes messages (None: no message box, for a reader or without one)."""
        host = self.state.host_runtime
        if principal.role != Role.HOST or not isinstance(host, ChatHost):
            return None
        return host.agents()

    async def in_scope(self, principal: Principal, operation: str, kind: str, id: str) -> None:
        if not id:
            raise ValidationError(field="id", expected=f"a {kind} id", got=id)
        await check_scope(self.store, principal, operation, (Subject(kind, id),))

    # -- sessions --------------------------------------------------------------------------

    async def sessions(
        self, request: _ANY, principal: Principal, *, fragment: bool = False
    ) -> Response[Any]:
        status = param(request, "status")
        if status and status not in set(SessionStatus):
            raise ValidationError(field="status", expected="active or ended", got=status)
        asked = parse_labels(param(request, "labels"))
        limit = _number(request, "limit", SESSIONS_PAGE, 200)
        cursor = param(request, "cursor")
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
        rows = await session_rows(self.store, sessions, self.firsts)
        while len(self.firsts) > KEPT_FIRSTS:
            self.firsts.popitem(last=False)
        context = {
            "sessions": sessions,
            "rows": rows,
            "filled": page_url(
                "/ui/sessions/rows",
                status=status,
                labels=param(request, "labels"),
                limit=param(request, "limit"),
                cursor=cursor,
            ),
            "status": status,
            "labels": param(request, "labels"),
            "cursor": cursor,
        }
        if fragment:
            return html(render("_sessions_rows.html", **context))
        return html(
            render(
                "sessions.html",
                principal=principal,
                chat=self.chat(principal),
                next_cursor=next_cursor,
                limit=param(request, "limit"),
                clash=sorted(clash),
                **context,
            )
        )

    async def changes(self, request: _ANY, principal: Principal) -> Response[Any]:
        """Server-sent ``change`` events when anything is written (and every few seconds)."""
        notifier, state = self.state.notifier, self.state
        del request, principal  # any reader may know that something changed, not what

        async def stream() -> AsyncIterator[bytes]:
            yield b": following\n\n"
            beats = 0
            clock = asyncio.get_running_loop().time
            while not state.stopping:
                started = clock()
                await notifier.wait(HEARTBEAT)
                woken = clock() - started < HEARTBEAT * 0.9  # a write through this service
                beats += 1
                if woken or beats % 5 == 0:  # other replicas' writes: every 5 heartbeats
                    yield b"event: change\ndata: {}\n\n"
                else:
                    yield b": heartbeat\n\n"

        return Stream(
            stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def _session_runs(self, session_id: str) -> tuple[SessionRuns, Log]:
        runs = await self.store.list_runs_by_session(session_id)
        log = await read_log(self.store.list_session_run_records, session_id)
        return await session_runs(self.store, session_id, runs, log.records), log

    async def session(
        self, request: _ANY, principal: Principal, *, fragment: bool
    ) -> Response[Any]:
        session_id = param(request, "id")
        await self.in_scope(principal, "inspect_session", "session", session_id)
        session = await self.store.load_session(session_id)
        runs, log = await self._session_runs(session_id)
        usage = usage_of(log.records)
        totals = await self.store.load_session_usage(session_id)  # the counters: one read
        try:
            talk = session_conversation(runs.tree, log.records)
            branches, leaves = talk.branches, {r: talk.leaves_at(r) for r in talk.branches}
        except CorruptRecordError:
            branches, leaves = {}, {}  # a damaged reference: the conversation page names it
        context = {
            "branches": branches,
            "leaves": leaves,
            "tree": runs.tree,
            "waiting_messages": runs.waiting,
            "session": session,
            "summaries": runs.summaries,
            "now": _now(),
            "usage": usage,
            "totals": totals,
            "cost": usage.cost(self.prices),
            "prices": self.prices,
            "complete": log.complete,
        }
        if fragment:
            return html(render("_tree.html", **context))
        end = await log.end(self.store.list_session_run_records, session_id)
        return html(render("session.html", principal=principal, tab="runs", end=end, **context))

    async def conversation(
        self, request: _ANY, principal: Principal, *, fragment: bool
    ) -> Response[Any]:
        """A session's top-level runs as one conversation, each turn's messages once."""
        session_id = param(request, "id")
        await self.in_scope(principal, "inspect_session", "session", session_id)
        session = await self.store.load_session(session_id)
        runs, log = await self._session_runs(session_id)
        talk = session_conversation(runs.tree, log.records)
        order = list(talk.runs)
        branch = param(request, "branch")
        path = talk.path(branch)  # one path at a time: the main conversation or a branch
        origins = [talk.origins[n] for n in path]
        bubbles = arrange([talk.messages[n] for n in path], [o[0] for o in origins])
        chain = talk.chain(branch) if talk.branches else []
        leaving: dict[int, list[Branch]] = {}  # the branches leaving after a message shown
        for fork in talk.branches.values():
            if fork.at and fork.at - 1 in path and fork.run_id not in chain:
                leaving.setdefault(path.index(fork.at - 1), []).append(fork)
        # where each branch leaves, numbered as its own path numbers its messages
        leaves = {run_id: talk.leaves_at(run_id) for run_id in talk.branches}
        corrupt = talk.corrupt
        wanted = {run.run_id for run in order}
        kept = (r for r in log.records if r.run_id in wanted)
        try:
            windows = _windows(kept, origins)
        except CorruptRecordError as e:
            windows, corrupt = {}, corrupt or e
        page, paging = _paged(request, bubbles)
        context = _fields(await exchanges(self.store, log.records, order))
        context.update(
            session=session,
            bubbles=page,
            corrupt=corrupt,
            summaries=runs.summaries,
            windows=windows,
            now=_now(),
            turns=talk.turns,
            branches=talk.branches,
            branch=branch,
            leaving=leaving,
            leaves=leaves,
            current=next((r for r in reversed(chain) if r in talk.branches), ""),
            chain=chain,
            waiting_messages=runs.waiting,
            **paging,
        )
        if fragment:
            return html(render("_session_conversation.html", **context))
        end = await log.end(self.store.list_session_run_records, session_id)
        return html(
            render(
                "conversation.html",
                principal=principal,
                tab="conversation",
                end=end,
                chat=self.chat(principal),
                **context,
            )
        )

    async def search(self, request: _ANY, principal: Principal) -> Response[Any]:
        """Records of a session whose payload, type or key holds the text searched for."""
        session_id = param(request, "id")
        await self.in_scope(principal, "inspect_session", "session", session_id)
        session = await self.store.load_session(session_id)
        q = param(request, "q").strip()
        hits: list[Record] = []
        log = Log([], True)
        if q:
            log = await read_log(self.store.list_session_run_records, session_id)
            needle = q.lower()
            hits = [r for r in log.records if matches(r, needle)][:RECORDS_PAGE]
        return html(
            render(
                "search.html",
                principal=principal,
                tab="search",
                session=session,
                q=q,
                hits=hits,
                complete=log.complete,
                most=RECORDS_PAGE,
            )
        )

    # -- runs ------------------------------------------------------------------------------

    def _keep(self, digest: RunDigest) -> None:
        """Keep ``digest`` for the run's next live refresh (the most recent runs only)."""
        self.digests[digest.run_id] = digest
        self.digests.move_to_end(digest.run_id)
        while len(self.digests) > KEPT_DIGESTS:
            self.digests.popitem(last=False)

    async def _run_view(self, run_id: str, log: Log | None) -> RunView:
        """The run at a glance: from ``log`` when the page read it, else from ``load_run``
        and the records written since the run's last view (its whole log the first time)."""
        if log is None:
            view, digest = await read_run_view(
                self.store, run_id, self.digests.get(run_id), most=MAX_RECORDS
            )
        else:
            digest = RunDigest(run_id).extend(log.records)
            digest.complete = log.complete
            view = digest.view(await self.store.load_run(run_id))
        self._keep(digest)  # a partial one goes on where it stopped, up to the end
        run = view.run
        return view.having(
            failure=await load_run_failure(self.store, run),
            message=await run_message(self.store, run),
        )

    async def _run_header(
        self, run_id: str, log: Log | None = None, *, ask_temporal: bool = True
    ) -> RunHeader:
        """The run's header; ``ask_temporal`` False leaves out whether Temporal holds it
        paused: a live refresh follows a record the run just wrote, so it moves (its page asks)."""
        view = await self._run_view(run_id, log)
        run = view.run
        suspended = run.status is RunStatus.SUSPENDED
        waiting = await waiting_kind(self.store, run) if suspended else ""
        return RunHeader(
            run=run,
            summary=view,
            pause=await pause_of(self.state, run_id) if ask_temporal else None,
            question=await question_of(self.store, run_id) if suspended else None,
            host_runtime=self.state.host_runtime is not None,
            waiting=waiting,
            waiting_text=await waiting_text(self.store, run, waiting) if suspended else "",
            predecessor=view.predecessor,
            now=_now(),
            usage=view.usage,
            cost=view.usage.cost(self.prices),
            prices=self.prices,
            complete=view.complete,
        )

    async def run(self, request: _ANY, principal: Principal) -> Response[Any]:
        run_id = param(request, "id")
        await self.in_scope(principal, "inspect_run", "run", run_id)
        log = await read_log(self.store.list_run_records, run_id)
        context = _fields(await self._run_header(run_id, log))
        types = _params(request, "type")
        after = param(request, "after")
        q = param(request, "q").strip()
        shown = await window(
            self.store.list_run_records,
            run_id,
            after,
            limit=_number(request, "limit", RECORDS_PAGE, 1000),
            types=types,
            text=q,
        )
        children = [
            decode_payload(r, ChildRunLinked) for r in log.records if r.type == CHILD_RUN_LINKED
        ]
        prompts, prompts_error = await _prompts(self.store, run_id)
        counts: dict[str, int] = {}
        for record in log.records:
            counts[record.type] = counts.get(record.type, 0) + 1
        return html(
            render(
                "run.html",
                principal=principal,
                tab="records",
                types=types,
                after=after,
                q=q,
                window=shown,
                counts=sorted(counts.items()),
                children=children,
                prompts=prompts,
                prompts_error=prompts_error,
                **context,
            )
        )

    async def rows(self, request: _ANY, principal: Principal) -> Response[Any]:
        run_id = param(request, "id")
        await self.in_scope(principal, "inspect_run", "run", run_id)
        shown = await window(
            self.store.list_run_records,
            run_id,
            param(request, "after"),
            limit=RECORDS_PAGE,
            types=_params(request, "type"),
            text=param(request, "q").strip(),
        )
        return html(render("_rows.html", window=shown))

    async def header(self, request: _ANY, principal: Principal) -> Response[Any]:
        run_id = param(request, "id")
        await self.in_scope(principal, "inspect_run", "run", run_id)
        return html(
            render(
                "_run_header.html",
                principal=principal,
                **_fields(await self._run_header(run_id, ask_temporal=False)),
            )
        )

    async def timeline(
        self, request: _ANY, principal: Principal, *, fragment: bool
    ) -> Response[Any]:
        run_id = param(request, "id")
        await self.in_scope(principal, "inspect_run", "run", run_id)
        log = await read_log(self.store.list_run_records, run_id)
        header = await self._run_header(run_id, log)
        context = _fields(header)
        line = timeline(header.run, log.records, header.now)
        turns = sorted(
            (turn, tokens) for (rid, turn), tokens in header.usage.by_turn.items() if rid == run_id
        )
        steps = line.rows[1:-1]  # the run's own row and the writes' row are on every page
        last = max((len(steps) - 1) // TIMELINE_PAGE * TIMELINE_PAGE, 0)
        if param(request, "at") == "end":
            start = last
        else:
            start = _number(request, "from", 0, max(len(steps), 0), least=0)
        rows = [*line.rows[:1], *steps[start : start + TIMELINE_PAGE], *line.rows[-1:]]
        inner: dict[str, list[Any]] = {}  # each child run's steps, to unfold in place
        for row in rows:
            if row.kind == "child" and row.link and row.link not in inner:
                try:
                    child = await self.store.load_run(row.link)
                except NotFoundError:
                    continue  # linked before its first write: its own page says so
                got = await read_log(self.store.list_run_records, row.link)
                inner[row.link] = timeline(child, got.records, header.now).rows[1:-1][:CHILD_STEPS]
        view = {"line": line, "rows": rows, "turns": turns, "start": start, "inner": inner,
                "total": len(steps), "size": TIMELINE_PAGE, "q": ""}  # fmt: skip
        if fragment:
            return html(render("_timeline.html", **view, **context))
        end = await log.end(self.store.list_run_records, run_id)
        return html(
            render("timeline.html", principal=principal, tab="timeline", end=end, **view, **context)
        )

    async def transcript(
        self, request: _ANY, principal: Principal, *, fragment: bool
    ) -> Response[Any]:
        run_id = param(request, "id")
        await self.in_scope(principal, "inspect_run", "run", run_id)
        log = await read_log(self.store.list_run_records, run_id)
        corrupt: CorruptRecordError | None = None
        history: list[HistoryLink] = []
        windows: dict[int, list[WindowMark]] = {}
        forks: dict[int, MessageOrigin] = {}
        try:  # the run's history references followed: each message says where it is stored
            segments = await self.store.load_transcript_chain(run_id)
            pairs = replay_with_origins(segments, full=True)
            bubbles = arrange([m for m, _ in pairs], [origin.run_id for _, origin in pairs])
            history = history_links(segments)
            windows = _windows(
                chain_records(segments), [(o.run_id, o.record_id, o.position) for _, o in pairs]
            )
            if principal.role == Role.HOST and self.state.host_runtime is not None:
                forks = fork_points([m for m, _ in pairs], [origin for _, origin in pairs])
            target = _target(request, run_id, [origin for _, origin in pairs], bubbles)
        except CorruptRecordError as e:
            bubbles, corrupt, target = [], e, None
        page, paging = _paged(request, bubbles, target)
        header = await self._run_header(run_id, log)
        context = _fields(header)
        context.update(history=history, windows=windows, forks=forks)
        context.update(_fields(await exchanges(self.store, log.records, [header.run])))
        if fragment:
            return html(
                render("_conversation.html", bubbles=page, corrupt=corrupt, **paging, **context)
            )
        end = await log.end(self.store.list_run_records, run_id)
        return html(
            render(
                "transcript.html",
                principal=principal,
                tab="transcript",
                bubbles=page,
                corrupt=corrupt,
                end=end,
                transcript_types=sorted(TRANSCRIPT_RECORD_TYPES),
                **paging,
                **context,
            )
        )

    async def events(self, request: _ANY, principal: Principal, kind: str) -> Response[Any]:
        scope_id = param(request, "id")
        await self.in_scope(principal, f"inspect_{kind}", kind, scope_id)
        after = request.headers.get("last-event-id") or param(request, "after")
        list_page = (
            self.store.list_run_records if kind == "run" else self.store.list_session_run_records
        )
        stream: AsyncIterator[bytes] = await follow(
            list_page,
            scope_id,
            after,
            notifier=self.state.notifier,
            stopping=lambda: bool(self.state.stopping),
            key=f"{kind}:{scope_id}",
        )
        return Stream(
            stream,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )


async def _prompts(store: Store, run_id: str) -> tuple[list[tuple[str, ...]], str]:
    """The Prompts panel: one row per use of a prompt version that influenced the run, or
    why they could not be read (a damaged record, named; the rest of the page still shows)."""
    try:
        found = await prompt_versions(store, run_id)
    except CorruptRecordError as e:
        return [], str(e)
    return [
        (v.prompt_id, v.version, use.via, use.run_id, use.record_id, use.model)
        for v in found
        for use in v.uses
    ], ""


def _windows(
    records: Iterable[Record], origins: Sequence[tuple[str, str, int]]
) -> dict[int, list[WindowMark]]:
    """Where each recorded window starts, by message number (``origins`` says where each
    message is stored: run, record, place in the record)."""
    at = {origin: n for n, origin in enumerate(origins)}
    return {at[stored]: marks for stored, marks in window_marks(records).items() if stored in at}


def _target(
    request: _ANY, run_id: str, origins: Sequence[MessageOrigin], bubbles: Sequence[Bubble]
) -> int | None:
    """The bubble showing the message a link points at (``record``, ``message``: as a search
    hit names it on the run's own log); None without ``record`` (see :func:`bubble_at`).

    Raises:
        ValidationError: ``message`` is not a number.
    """
    record = param(request, "record")
    if not record:
        return None
    at = _number(request, "message", 0, 1_000_000, least=0)
    return bubble_at(bubbles, [(o.run_id, o.record_id, o.position) for o in origins],
                     (run_id, record, at))  # fmt: skip


def _paged(
    request: _ANY, bubbles: list[Any], target: int | None = None
) -> tuple[list[Any], dict[str, Any]]:
    """The page of ``bubbles`` asked for (``from``, or ``at=end``, or the one holding the
    ``target`` message), searched by ``q``.

    Raises:
        ValidationError: ``from`` is not a message number of this conversation.
    """
    q = param(request, "q").strip()
    bubbles, shown = _search_bubbles(bubbles, q)
    total = len(bubbles)
    last = max((total - 1) // TRANSCRIPT_PAGE * TRANSCRIPT_PAGE, 0)
    at = next((i for i, b in enumerate(bubbles) if b.index == target), None)
    if at is not None and not q:
        start = at // TRANSCRIPT_PAGE * TRANSCRIPT_PAGE
    elif param(request, "at") == "end":
        start = last
    else:
        start = _number(request, "from", 0, max(total, 0), least=0)
    paging = {"start": start, "total": total, "size": TRANSCRIPT_PAGE, "shown": shown, "q": q,
              "found": target if at is not None else None}  # fmt: skip
    return bubbles[start : start + TRANSCRIPT_PAGE], paging


def _search_bubbles(bubbles: list[Any], q: str) -> tuple[list[Any], int]:
    """The bubbles holding ``q`` (all when empty), and how many there were before."""
    if not q:
        return bubbles, len(bubbles)
    needle = q.lower()
    return [b for b in bubbles if needle in searchable(b)], len(bubbles)


def _status(response: Response[Any]) -> int:
    return response.status_code or 200
