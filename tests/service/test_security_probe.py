"""[S4] Our own security probe: every route, every wrong way in, nothing allowed or learned.

Each store method's route and both follow routes are called with no token, an
unknown token, a role that may not call them, a token scoped to another
tenant, and hostile ids. For every call the probe checks that it is refused
(nothing allowed), that the answer naming another tenant's row is the answer
naming an id never used (nothing learned; an id to create that another tenant
holds gets the one "not free" refusal), that every refusal is a typed error
(never a 5xx), and that no store row changed. Run
with ``-s`` to see the count table, route by probe kind.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx
import msgspec
import pytest

from agentledger.service import StoreClient, wire
from agentledger.service.error_codec import decode_error
from agentledger.storage import (
    BusyPolicy,
    Checkpoint,
    MessageSubmission,
    RecordBuilder,
    RunStart,
    RunStatus,
)
from agentledger.storage.archive import archive_bytes
from agentledger.storage.conformance import dump_store
from agentledger.storage.memory import MemoryStore
from agentledger.storage.requests import SearchRequest, UsageQuery
from agentledger.storage.session_image import read_session_image
from tests.service.process import ServiceProcess, Tokens

T0 = datetime(2026, 11, 1, tzinfo=UTC)
GLOBEX = {"tenant": "globex", "customer": "Bob Smith"}
ACME = {"tenant": "acme"}
SECRETS = ("globex", "Bob Smith")
HOSTILE = ("a/b", "a%2Fb", "../../etc/passwd", "x" * 600, "nul\x00", "", "é/😀", " ")
CREATES = {"create_session", "import_session", "import_archive"}
KINDS = ("no token", "unknown token", "wrong role", "other tenant", "hostile id")
_COLUMNS = ("probes", "allowed", "learned", "changed", "untyped")


def _at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def _run(run_id: str, session_id: str = "", **kw: Any) -> RecordBuilder:
    return RecordBuilder(RunStart(run_id=run_id, agent_id="a", session_id=session_id,
                                  started_at=_at(1), **kw))  # fmt: skip


class Target(msgspec.Struct, frozen=True):
    """The ids one probe names: a session, a running run, a suspended one-shot run."""

    session: str
    run: str
    suspended: str


GLOBEX_ROWS = Target("p-globex", "p-globex-r", "p-globex-1x")


def _never(i: int) -> Target:
    return Target(f"p-never-s{i}", f"p-never-r{i}", f"p-never-x{i}")


def _hostile(id: str) -> Target:
    return Target(id, id, id)


def _bodies(t: Target, image: Any, archive: bytes) -> dict[str, Any]:
    """A well-formed request of every store method, naming ``t``'s ids."""
    run = _run(t.run, t.session)
    link = {"parent_agent_id": "a", "tool_name": "t", "tool_call_id": "c"}
    return {
        "start_root_run": _run("p-new-1", t.session).root_start(),
        "start_child_run": _run("p-new-2", "p-acme", parent_run_id=t.run).child_start(**link),
        "start_one_shot_run": _run("p-new-3", labels=ACME, predecessor_run_id=t.suspended)
        .one_shot_start(),
        "start_one_shot_child_run": _run("p-new-4", parent_run_id=t.suspended, labels=ACME)
        .one_shot_child_start(**link),
        "append_run_record": run.record("note", b"{}", event_key="n", at=_at(5)),
        "append_run_records": wire.RecordBatch(
            records=[run.record("note", b"{}", event_key="n", at=_at(5))]),
        "append_turn_records": wire.RecordBatch(
            records=[run.record("note", b"{}", event_key="n", at=_at(5))]),
        "record_run_cancellation": run.cancellation("stop", at=_at(5)),
        "record_run_suspension": run.suspension(Checkpoint(id="c", data=b"x"), at=_at(5)),
        "record_run_terminal": run.terminal(RunStatus.COMPLETED, at=_at(5)),
        "repair_run_suspension": run.suspension(Checkpoint(id="c", data=b"x"), at=_at(5)),
        "repair_run_terminal": run.terminal(RunStatus.COMPLETED, at=_at(5)),
        "save_tool_result": wire.ToolResultSave(run_id=t.run, call_key="k", data=b"x"),
        "load_tool_result": wire.ToolResultRef(run_id=t.run, call_key="k"),
        "load_run": wire.RunRef(run_id=t.run),
        "load_session_status": wire.SessionRef(session_id=t.session),
        "load_run_suspension": wire.RunRef(run_id=t.suspended),
        "list_run_records": wire.RunPageQuery(run_id=t.run),
        "load_transcript_chain": wire.RunRef(run_id=t.run),
        "list_session_run_records": wire.SessionPageQuery(session_id=t.session),
        "submit_message": MessageSubmission(
            session_id=t.session, run_id="p-new-5", turn_id="t", agent_id="a",
            message=b'{"role":"user","parts":[{"kind":"text","text":"hi"}]}',
            if_busy=BusyPolicy.QUEUE, submitted_at=_at(6)),
        "load_pending_messages": wire.SessionRef(session_id=t.session),
        "list_session_messages": wire.SessionRef(session_id=t.session),
        "load_session_usage": wire.SessionRef(session_id=t.session),
        "load_run_usage": wire.RunRef(run_id=t.run),
        "create_session": wire.SessionCreate(session_id=t.session, labels=ACME),
        "load_session": wire.SessionRef(session_id=t.session),
        "end_session": wire.SessionEnd(session_id=t.session, ended_at=_at(9)),
        "purge_session": wire.SessionPurge(session_id=t.session),
        "import_session": msgspec.structs.replace(
            image, session=msgspec.structs.replace(image.session, id=t.session)),
        "list_runs_by_session": wire.RunsBySessionQuery(session_id=t.session),
        "list_derived_copies": wire.SessionRef(session_id=t.session),
        "list_sessions": wire.SessionsQuery(labels={"customer": "Bob Smith"}),
        "usage_by_label": UsageQuery(key="customer", labels={"customer": "Bob Smith"}),
        "search": SearchRequest(text="globex", session_id=t.session),
        "export_archive": wire.SessionRef(session_id=t.session),
        "import_archive": wire.ArchiveFile(data=archive),
    }  # fmt: skip


LISTINGS = ("list_sessions", "usage_by_label")  # narrowed to the token's scope, naming no id
ROUTES = [m.name for m in wire.METHODS] + ["follow_run_records", "follow_session_records"]


async def _call(
    http: httpx.AsyncClient, route: str, t: Target, token: str | None, extra: dict[str, Any]
) -> tuple[int, str]:
    """One probe: the status and the body of the answer."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    if route.startswith("follow_"):
        scope, id = ("runs", t.run) if route == "follow_run_records" else ("sessions", t.session)
        path = f"/v1/{scope}/{quote(id, safe='')}/records"
        async with http.stream("GET", path, headers=headers) as answer:
            if answer.status_code == 200:
                return 200, ""
            return answer.status_code, (await answer.aread()).decode()
    body = msgspec.json.encode(extra[route])
    answer = await http.post(f"/v1/{route}", content=body, headers=headers)
    return answer.status_code, answer.text


def _told(text: str) -> bool:
    """Whether an answer holds anything of globex's rows but the ids the probe named."""
    for id in sorted(msgspec.structs.astuple(GLOBEX_ROWS), key=len, reverse=True):
        text = text.replace(id, "<target>")
    return any(secret in text for secret in SECRETS)


def _shape(status: int, text: str, id_map: dict[str, str]) -> tuple[int, Any]:
    """An answer with the probe's own ids replaced by their role, for comparison."""
    error = decode_error(text.encode())
    fields: Any = None
    if error is not None:
        fields = {k: v for k, v in error.__dict__.items() if k != "message"}
        fields = (type(error).__name__, msgspec.json.encode(fields, enc_hook=repr).decode())
        for id, role in sorted(id_map.items(), key=lambda kv: -len(kv[0])):
            fields = (fields[0], fields[1].replace(id, role))
    return status, fields


@pytest.fixture(scope="module")
def tenants(sqlite_service: ServiceProcess, tokens: Tokens) -> dict[str, str]:
    """globex's rows (made unscoped) and the tokens of every probe kind."""

    async def build() -> None:
        async with StoreClient(sqlite_service.url, token=tokens.host) as host:
            await host.create_session("p-globex", created_at=_at(0), labels=GLOBEX)
            await host.create_session("p-acme", created_at=_at(0), labels=ACME)
            await host.start_root_run(_run("p-globex-r", "p-globex").root_start())
            await host.start_root_run(_run("p-acme-r", "p-acme").root_start())
            one = _run("p-globex-1x", labels=GLOBEX)
            await host.start_one_shot_run(one.one_shot_start())
            await host.record_run_suspension(one.suspension(Checkpoint(id="c", data=b"x"),
                                                            at=_at(2)))  # fmt: skip

    asyncio.run(build())
    return {"acme": tokens.acme["host"], "reader": tokens.reader, "worker": tokens.worker}


def _wrong_role(route: str, tokens: Tokens) -> str | None:
    """A token whose role may not call ``route`` (None: every role may)."""
    method = next((m for m in wire.METHODS if m.name == route), None)
    roles = wire.STORE_READERS if method is None else method.roles
    for role, token in (("reader", tokens.reader), ("worker", tokens.worker)):
        if wire.Role(role) not in roles:
            return token
    return None


async def test_every_route_refuses_every_wrong_way_in(
    sqlite_service: ServiceProcess, tokens: Tokens, tenants: dict[str, str]
) -> None:
    image_store = MemoryStore()
    await image_store.create_session("p-image", created_at=_at(0), labels=ACME)
    await image_store.end_session("p-image", ended_at=_at(1))
    image = await read_session_image(image_store, "p-image")

    async def archive(session_id: str) -> bytes:
        store = MemoryStore()
        await store.create_session(session_id, created_at=_at(0), labels=ACME)
        await store.end_session(session_id, ended_at=_at(1))
        return await archive_bytes(store, session_id)

    counts: dict[tuple[str, str], Counter[str]] = {}
    sessions = ["p-globex", "p-acme", *(f"p-never-s{i}" for i in range(len(ROUTES)))]
    runs = ["p-globex-r", "p-globex-1x", "p-acme-r", "p-new-1", "p-new-2", "p-new-3", "p-new-4"]
    runs += [f"p-never-r{i}" for i in range(len(ROUTES))]
    async with (
        StoreClient(sqlite_service.url, token=tokens.host) as host,
        httpx.AsyncClient(base_url=sqlite_service.url, timeout=30) as http,
    ):
        before = await dump_store(host, sessions, runs)
        for i, route in enumerate(ROUTES):
            never = _never(i)
            globex_bodies = _bodies(GLOBEX_ROWS, image, await archive(GLOBEX_ROWS.session))
            never_bodies = _bodies(never, image, await archive(never.session))
            id_map = {**dict.fromkeys(msgspec.structs.astuple(GLOBEX_ROWS), "<target>"),
                      **dict.fromkeys(msgspec.structs.astuple(never), "<target>")}  # fmt: skip
            kinds: dict[str, Callable[[], str | None]] = {
                "no token": lambda: None,
                "unknown token": lambda: "alt_not-a-token",
                "wrong role": lambda r=route: _wrong_role(r, tokens),  # type: ignore[misc]
                "other tenant": lambda: tenants["acme"],
            }
            for kind, token_of in kinds.items():
                token = token_of()
                if kind == "wrong role" and token is None:
                    continue  # every role may call it
                tally = counts.setdefault((route, kind), Counter())
                status, text = await _call(http, route, GLOBEX_ROWS, token, globex_bodies)
                tally["probes"] += 1
                told = _told(text)  # anything of globex's beyond the ids the probe sent
                if kind == "other tenant" and route in LISTINGS:
                    tally["learned"] += told  # a listing narrowed to acme's: allowed, typed
                    continue
                tally["allowed"] += status == 200
                tally["untyped"] += status >= 500 or decode_error(text.encode()) is None
                if kind == "other tenant" and route in CREATES:
                    error = decode_error(text.encode())
                    refused = status == 403 and "not free" in str(error)
                    tally["learned"] += told or not refused
                    continue
                missing = await _call(http, route, never, token, never_bodies)
                tally["learned"] += _shape(status, text, id_map) != _shape(*missing, id_map)
            if route in CREATES or route in LISTINGS:
                continue  # a hostile id is a valid id to create; listings name no id
            tally = counts.setdefault((route, "hostile id"), Counter())
            for id in HOSTILE:
                if id == "" and route == "start_one_shot_run":
                    continue  # no predecessor: an ordinary start, allowed
                if id == "" and route == "search":
                    continue  # no session named: a search of the token's own sessions, allowed
                status, text = await _call(http, route, _hostile(id), tenants["acme"],
                                           _bodies(_hostile(id), image, b""))  # fmt: skip
                tally["probes"] += 1
                tally["allowed"] += status == 200
                tally["untyped"] += status >= 500 or decode_error(text.encode()) is None
            after = await dump_store(host, sessions, runs)
            for kind in KINDS:
                if (route, kind) in counts:
                    counts[route, kind]["changed"] += after != before
            before = after
    _print_table(counts)
    bad = {k: dict(c) for k, c in counts.items() if sum(c.values()) != c["probes"]}
    assert not bad


def _print_table(counts: dict[tuple[str, str], Counter[str]]) -> None:
    """route x probe kind: probes / allowed / learned / changed / untyped (or 5xx)."""
    print(f"\n{'route':<26}" + "".join(f"{k:>16}" for k in KINDS))
    for route in ROUTES:
        cells = []
        for kind in KINDS:
            c = counts.get((route, kind))
            shown = "/".join(str(c[n]) for n in _COLUMNS) if c is not None else "-"
            cells.append(shown)
        print(f"{route:<26}" + "".join(f"{cell:>16}" for cell in cells))
    total = sum((c for c in counts.values()), Counter())
    print(", ".join(f"{n} {total[n]}" for n in _COLUMNS))
