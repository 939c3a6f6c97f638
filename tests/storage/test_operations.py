"""The operations table is the one place a store operation is declared: every protocol
method has one entry, every store derives its methods from it, the wire is built from it,
and a request it refuses is refused as the store refuses it, before any backend reads it."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime
from typing import Any

import pytest

from agentledger.errors import ValidationError
from agentledger.observability.store import TracedStore
from agentledger.service import wire
from agentledger.service.client import StoreClient
from agentledger.storage import (
    MemoryStore,
    Record,
    RunMeta,
    SessionAdmin,
    Store,
    operations,
    requests,
)
from agentledger.storage import memory as memory_backend
from agentledger.storage.operations import OPERATIONS, AdminOperations, StoreOperations
from agentledger.storage.postgres import store as postgres_backend
from agentledger.storage.postgres.store import PostgresStore
from agentledger.storage.sqlite import store as sqlite_backend
from agentledger.storage.sqlite.store import SQLiteStore

NAMES = [op.name for op in OPERATIONS]


def _protocol_methods(protocol: type) -> list[str]:
    return [
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and inspect.isfunction(value)
    ]


def test_every_protocol_method_has_exactly_one_entry() -> None:
    declared = _protocol_methods(Store) + _protocol_methods(SessionAdmin)
    assert sorted(NAMES) == sorted(declared)
    assert len(set(NAMES)) == len(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_written_once_method_has_the_protocol_signature(name: str) -> None:
    protocol = Store if hasattr(Store, name) else SessionAdmin
    expected = inspect.signature(getattr(protocol, name))
    derived = inspect.signature(getattr(AdminOperations, name))
    assert list(derived.parameters.values()) == list(expected.parameters.values())


@pytest.mark.parametrize(
    "cls", [MemoryStore, SQLiteStore, PostgresStore, StoreClient, TracedStore], ids=repr
)
def test_no_store_writes_an_operation_of_its_own(cls: type) -> None:
    assert issubclass(cls, StoreOperations)
    for klass in cls.__mro__:
        if klass in (StoreOperations, AdminOperations):
            continue
        own = set(NAMES) & set(vars(klass))
        assert not own, f"{klass.__name__} writes {sorted(own)} itself"


@pytest.mark.parametrize("backend", [memory_backend, sqlite_backend, postgres_backend])
def test_each_backend_reads_exactly_what_no_state_reader_answers(backend: Any) -> None:
    needs_query = {op for op in OPERATIONS if op.plan is None and op.read is None}
    assert set(backend._READS) == needs_query


def test_the_wire_is_the_table() -> None:
    archives = {"export_archive", "import_archive"}
    assert [m.name for m in wire.METHODS if m.name not in archives] == NAMES
    for op in OPERATIONS:
        method = wire.STORE_METHODS[op]
        assert (method.name, method.request, method.writes) == (op.name, op.request, op.writes)


def _record(**changes: Any) -> Record:
    fields: dict[str, Any] = {
        "run_id": "r1",
        "session_id": "s1",
        "agent_id": "a",
        "event_key": "k1",
        "turn_id": "t1",
        "type": "note",
        "payload": b"{}",
        "timestamp": datetime(2026, 1, 1, tzinfo=UTC),
    }
    return Record(**{**fields, **changes})


@pytest.mark.parametrize(
    ("op", "request_"),
    [
        (operations.APPEND_RUN_RECORD, _record(run_id="")),
        (operations.APPEND_RUN_RECORD, _record(event_key="")),
        (operations.APPEND_RUN_RECORDS, requests.RecordBatch(records=[])),
        (
            operations.SAVE_TOOL_RESULT,
            requests.ToolResultSave(run_id="r", call_key="", data=b"x"),
        ),
        (operations.LOAD_RUN, requests.RunRef(run_id="")),
        (operations.CREATE_SESSION, requests.SessionCreate(session_id="")),
    ],
)
async def test_a_refused_request_is_refused_before_any_read_as_the_store_refuses_it(
    op: operations.Operation[Any, Any], request_: Any
) -> None:
    store = MemoryStore()
    with pytest.raises(ValidationError) as checked:
        op.check(request_, store.limits)
    with pytest.raises(ValidationError) as performed:
        await store.perform(op, request_)
    assert type(checked.value) is type(performed.value)
    assert vars(checked.value) == vars(performed.value)
    assert not (await store.list_sessions()).sessions


async def test_a_request_the_decision_accepts_passes_the_check_unread() -> None:
    operations.APPEND_RUN_RECORD.check(_record(), MemoryStore().limits)  # no state needed


class _HandWritten:
    """A store written by hand (no table): the service and the traced store still call it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    async def load_run(self, *args: Any, **kwargs: Any) -> RunMeta:
        self.calls.append(("load_run", args, kwargs))
        raise LookupError

    async def list_sessions(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("list_sessions", args, kwargs))

    async def save_tool_result(self, *args: Any, **kwargs: Any) -> bytes:
        self.calls.append(("save_tool_result", args, kwargs))
        return b"x"


async def test_an_operation_calls_a_hand_written_store_by_its_public_method() -> None:
    store = _HandWritten()
    with pytest.raises(LookupError):
        await operations.LOAD_RUN.invoke(store, requests.RunRef(run_id="r"))
    await operations.LIST_SESSIONS.invoke(store, requests.SessionsQuery(cursor="c"))
    save = requests.ToolResultSave(run_id="r", call_key="k", data=b"x")
    assert await operations.SAVE_TOOL_RESULT.invoke(store, save) == b"x"
    assert store.calls == [
        ("load_run", ("r",), {}),
        ("list_sessions", (), {"statuses": [], "labels": None, "cursor": "c", "limit": 100}),
        ("save_tool_result", ("r", "k", b"x"), {}),
    ]
