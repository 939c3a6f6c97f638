"""[S4] A scoped token learns nothing about rows outside its scope, by any route.

Every id a call names is scope-checked, not only the caller's own labels or
session: the run a start would create, the parent it links, the suspended run
it continues, the session an import would create. A named row outside the
scope (or purged) gets exactly the answer a missing one gets; an id to create
that is held outside the scope gets one answer, the same for a live, ended or
purged row, naming nothing of it. Nothing is written either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from agentledger.errors import AccessDeniedError, AgentledgerError
from agentledger.service import StoreClient
from agentledger.storage import Checkpoint, RecordBuilder, RunStart, RunStatus, payloads
from agentledger.storage.archive import archive_bytes
from agentledger.storage.conformance import dump_store
from agentledger.storage.memory import MemoryStore
from agentledger.storage.session_image import read_session_image
from tests.service.process import ServiceProcess, Tokens

T0 = datetime(2026, 10, 1, tzinfo=UTC)
GLOBEX = {"tenant": "globex", "customer": "Bob Smith"}
ACME = {"tenant": "acme"}
SESSIONS = ("t-globex", "t-globex-ended", "t-globex-purged", "t-acme", "t-acme-ended")
RUNS = ("t-globex-r", "t-globex-susp", "t-globex-1x", "t-globex-1x-susp", "t-globex-purged-r",
        "t-acme-r")  # fmt: skip


def _at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def _run(run_id: str, session_id: str = "", **kw: Any) -> RecordBuilder:
    return RecordBuilder(RunStart(run_id=run_id, agent_id="a", session_id=session_id,
                                  started_at=_at(1), **kw))  # fmt: skip


async def _build(host: StoreClient) -> None:
    """globex: an active, an ended and a purged session, running and suspended runs."""
    tenants = {"t-globex": GLOBEX, "t-globex-ended": GLOBEX, "t-globex-purged": GLOBEX,
               "t-acme": ACME, "t-acme-ended": ACME}  # fmt: skip
    for sid, labels in tenants.items():
        await host.create_session(sid, created_at=_at(0), labels=labels)
    await host.start_root_run(_run("t-globex-r", "t-globex").root_start())
    susp = _run("t-globex-susp", "t-globex")
    await host.start_root_run(susp.root_start())
    await host.record_run_suspension(susp.suspension(Checkpoint(id="c", data=b"x"), at=_at(2)))
    await host.start_one_shot_run(_run("t-globex-1x", labels=GLOBEX).one_shot_start())
    one = _run("t-globex-1x-susp", labels=GLOBEX)
    await host.start_one_shot_run(one.one_shot_start())
    await host.record_run_suspension(one.suspension(Checkpoint(id="c", data=b"x"), at=_at(2)))
    purged = _run("t-globex-purged-r", "t-globex-purged")
    await host.start_root_run(purged.root_start())
    await host.record_run_terminal(purged.terminal(RunStatus.COMPLETED, at=_at(2)))
    await host.start_root_run(_run("t-acme-r", "t-acme").root_start())
    for sid in ("t-globex-ended", "t-globex-purged", "t-acme-ended"):
        await host.end_session(sid, ended_at=_at(3))
    await host.purge_session("t-globex-purged")


@pytest.fixture(scope="module")
def world(sqlite_service: ServiceProcess, tokens: Tokens) -> None:
    async def build() -> None:
        async with StoreClient(sqlite_service.url, token=tokens.host) as host:
            await _build(host)

    asyncio.run(build())


@pytest.fixture
async def acme(
    world: None, sqlite_service: ServiceProcess, tokens: Tokens
) -> AsyncIterator[StoreClient]:
    async with StoreClient(sqlite_service.url, token=tokens.acme["host"]) as client:
        yield client


async def _answer(call: Awaitable[Any]) -> tuple[str, dict[str, Any]]:
    """The typed refusal of a call (its class and fields); the call must be refused."""
    try:
        await call
    except AgentledgerError as e:
        return type(e).__name__, {k: v for k, v in e.__dict__.items() if k != "message"}
    raise AssertionError("the call was allowed")


async def _same_as_missing(
    call: Callable[[str], Awaitable[Any]], elsewhere: str, missing: str
) -> None:
    """``call`` naming a row outside the scope is answered as naming a missing one."""
    kind, fields = await _answer(call(elsewhere))
    missing_kind, missing_fields = await _answer(call(missing))
    swapped = msgspec.json.decode(msgspec.json.encode(missing_fields).replace(
        missing.encode(), elsewhere.encode()))  # fmt: skip
    assert (kind, msgspec.json.decode(msgspec.json.encode(fields))) == (missing_kind, swapped)
    assert kind.endswith("NotFoundError"), (kind, fields)


def _continuation(run_id: str, predecessor: str, session_id: str = "", **kw: Any) -> Any:
    run = _run(run_id, session_id, predecessor_run_id=predecessor, **kw)
    return run.root_start() if session_id else run.one_shot_start()


def _next_turn(run_id: str, source: str, session_id: str) -> Any:
    """A root start whose history is ``source``'s transcript, by reference."""
    run = _run(run_id, session_id)
    reference = payloads.TranscriptReference(kind="fork", run_id=source, through="1")
    record = run.record(payloads.TRANSCRIPT_REFERENCED, reference.encode(),
                        event_key="transcript:referenced", at=_at(5))  # fmt: skip
    return msgspec.structs.replace(run.root_start(), records=(record,))


async def test_named_rows_outside_the_scope_are_answered_as_missing_ones(
    acme: StoreClient, sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """Loads, pages, writes, links and continuations of globex's rows: 404 as for nothing."""
    probes: list[tuple[Callable[[str], Awaitable[Any]], str]] = [
        (acme.load_session, "t-globex"),
        (acme.load_session, "t-globex-purged"),
        (acme.load_session_status, "t-globex"),
        (acme.list_runs_by_session, "t-globex"),
        (acme.list_session_run_records, "t-globex"),
        (lambda s: acme.end_session(s, ended_at=_at(9)), "t-globex"),
        (acme.purge_session, "t-globex-ended"),
        (acme.purge_session, "t-globex-purged"),  # its tombstone's receipt
        (acme.export_archive, "t-globex-ended"),
        (acme.load_run, "t-globex-r"),
        (acme.load_run, "t-globex-1x"),
        (acme.load_run, "t-globex-purged-r"),  # the purged session's id
        (acme.list_run_records, "t-globex-r"),
        (acme.load_run_suspension, "t-globex-susp"),
        (lambda r: acme.load_tool_result(r, "k"), "t-globex-r"),
        (lambda r: acme.save_tool_result(r, "k", b"x"), "t-globex-r"),
        (lambda r: anext(acme.follow_run_records(r)), "t-globex-r"),
        (lambda s: anext(acme.follow_session_run_records(s)), "t-globex"),
        # a child linked onto another tenant's parent
        (lambda p: acme.start_child_run(_run("t-new-child", "t-acme", parent_run_id=p)
         .child_start(parent_agent_id="a", tool_name="t", tool_call_id="c")), "t-globex-r"),
        (lambda p: acme.start_one_shot_child_run(_run("t-new-1x-child", parent_run_id=p,
         labels=ACME).one_shot_child_start(parent_agent_id="a", tool_name="t",
                                           tool_call_id="c")), "t-globex-1x"),
        # a continuation of another tenant's suspended run
        (lambda p: acme.start_root_run(_continuation("t-new-cont", p, "t-acme")), "t-globex-susp"),
        (lambda p: acme.start_one_shot_run(_continuation("t-new-1x-cont", p, labels=ACME)),
         "t-globex-1x-susp"),
        # a next turn whose history references another tenant's run
        (lambda p: acme.start_root_run(_next_turn("t-new-turn", p, "t-acme")), "t-globex-r"),
    ]  # fmt: skip
    async with StoreClient(sqlite_service.url, token=tokens.host) as host:
        before = await dump_store(host, SESSIONS, RUNS)
        for i, (call, elsewhere) in enumerate(probes):
            try:
                await _same_as_missing(call, elsewhere, f"t-never-{i}")
            except AssertionError as e:
                raise AssertionError(f"probe {i} ({elsewhere}): {e}") from None
        assert await dump_store(host, SESSIONS, RUNS) == before


async def test_a_malformed_write_is_refused_alike_whatever_its_ids_name(
    acme: StoreClient,
) -> None:
    """The store's checks of the call as given come first: no oracle in their order."""
    for run_id in ("t-globex-r", "t-never"):
        run = _run(run_id, "t-globex")
        bad = run.record("run_started", b"{}", event_key="x", at=_at(5))  # a lifecycle type
        kind, fields = await _answer(acme.append_run_record(bad))
        assert (kind, fields["field"]) == ("ValidationError", "record.type")


async def _taken(call: Awaitable[Any]) -> str:
    """A create refused for its id: 403, saying nothing of the row that holds it."""
    with pytest.raises(AccessDeniedError) as info:
        await call
    error = info.value
    assert error.status == 403
    assert "not free for this token" in error.reason
    for secret in ("globex", "Bob Smith", "ended", "purged", "t-globex-r", "labels"):
        assert secret not in error.reason.replace(error.reason.split("'")[1], ""), error
    return error.reason.replace(error.reason.split("'")[1], "<id>")


async def test_ids_held_outside_the_scope_cannot_be_created_and_say_nothing(
    acme: StoreClient, sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """Sessions and runs: live, ended and purged alike get one answer, and nothing changes."""
    image = MemoryStore()
    await image.create_session("t-globex", created_at=_at(0), labels=ACME)
    await image.end_session("t-globex", ended_at=_at(1))
    archive = await archive_bytes(image, "t-globex")
    session_image = await read_session_image(image, "t-globex")
    async with StoreClient(sqlite_service.url, token=tokens.host) as host:
        before = await dump_store(host, SESSIONS, RUNS)
        answers = {
            await _taken(acme.create_session("t-globex", created_at=_at(5), labels=ACME)),
            await _taken(acme.create_session("t-globex-ended", created_at=_at(5), labels=ACME)),
            await _taken(acme.create_session("t-globex-purged", created_at=_at(5), labels=ACME)),
            await _taken(acme.start_one_shot_run(_run("t-globex-1x", labels=ACME)
                                                 .one_shot_start())),
            await _taken(acme.start_root_run(_run("t-globex-r", "t-acme").root_start())),
            await _taken(acme.start_root_run(_run("t-globex-purged-r", "t-acme").root_start())),
            await _taken(acme.start_child_run(_run("t-globex-susp", "t-acme",
                parent_run_id="t-acme-r").child_start(parent_agent_id="a", tool_name="t",
                                                      tool_call_id="c"))),
            await _taken(acme.import_session(session_image)),
            await _taken(acme.import_archive(archive)),
        }  # fmt: skip
        assert len(answers) == 2, answers  # "session id <id>" and "run id <id>"
        assert await dump_store(host, SESSIONS, RUNS) == before
