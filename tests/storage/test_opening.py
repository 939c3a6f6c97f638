"""Every store is opened the same way: ``await Backend.open(location, *, encryption=None,
max_payload_bytes=..., max_checkpoint_bytes=..., <its own options>)``, a keyword-only
constructor that only assembles an opened store, the same ``limits`` and ``encryption``
attributes, and the same ``close()`` and ``async with``."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agentledger.errors import StoreClosedError, ValidationError
from agentledger.service import StoreClient
from agentledger.storage import MemoryStore
from agentledger.storage.conformance import World
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.validation import (
    DEFAULT_MAX_CHECKPOINT_BYTES,
    DEFAULT_MAX_PAYLOAD_BYTES,
    SizeLimits,
)

KW = inspect.Parameter.KEYWORD_ONLY
SHARED = {
    "encryption": None,
    "max_payload_bytes": DEFAULT_MAX_PAYLOAD_BYTES,
    "max_checkpoint_bytes": DEFAULT_MAX_CHECKPOINT_BYTES,
}
"""The options every backend's ``open`` takes first, with their defaults."""
LOCATED = {SQLiteStore: "path", PostgresStore: "dsn", StoreClient: "url"}


def _params(function: Callable[..., Any]) -> list[inspect.Parameter]:
    return list(inspect.signature(function).parameters.values())


@pytest.mark.parametrize("backend", [SQLiteStore, PostgresStore, StoreClient])
def test_open_takes_the_location_then_only_keywords(backend: type) -> None:
    assert inspect.iscoroutinefunction(backend.open)
    location, *options = _params(backend.open)
    assert location.name == LOCATED[backend]
    assert location.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert location.default is inspect.Parameter.empty
    assert [p.kind for p in options] == [KW] * len(options)
    assert inspect.signature(backend.open).return_annotation == backend.__name__


@pytest.mark.parametrize("backend", [SQLiteStore, PostgresStore])
def test_the_shared_options_come_first_with_the_same_defaults(backend: type) -> None:
    options = _params(backend.open)[1:]
    assert {p.name: p.default for p in options[: len(SHARED)]} == SHARED
    assert {p.name: p.annotation for p in options[: len(SHARED)]} == {
        "encryption": "Encryption | None",
        "max_payload_bytes": "int",
        "max_checkpoint_bytes": "int",
    }


def test_memory_opens_with_the_caps_alone() -> None:
    """No location and nothing at rest to seal: the caps, as the other backends take them."""
    assert inspect.iscoroutinefunction(MemoryStore.open)
    params = _params(MemoryStore.open)
    assert [p.kind for p in params] == [KW, KW]
    assert {p.name: p.default for p in params} == {
        k: v for k, v in SHARED.items() if k != "encryption"
    }
    assert {p.name: p.default for p in _params(MemoryStore)} == {p.name: p.default for p in params}


@pytest.mark.parametrize("backend", [SQLiteStore, PostgresStore])
def test_the_constructor_is_keyword_only_and_only_assembles(backend: type) -> None:
    named = [p for p in _params(backend) if p.kind is not inspect.Parameter.VAR_POSITIONAL]
    assert [p.kind for p in named] == [KW] * len(named)
    assert {"encryption", "limits"} <= {p.name for p in named}
    assert "open" in (backend.__init__.__doc__ or "")


async def test_the_old_positional_postgres_constructor_warns_and_still_works(
    postgres_dsn: str,
) -> None:
    async with await PostgresStore.open(postgres_dsn) as opened:
        with pytest.warns(DeprecationWarning, match="by keyword"):
            legacy = PostgresStore(opened._pool, None)
        assert (legacy.encryption, legacy.limits) == (None, opened.limits)
        sid = await World(legacy).session("s")
        assert (await opened.load_session(sid)).id == sid
    with pytest.raises(ValidationError) as caught:
        PostgresStore()
    assert caught.value.field == "pool"


async def _sqlite(tmp_path: Path, **caps: int) -> SQLiteStore:
    return await SQLiteStore.open(tmp_path / "ledger.db", **caps)


async def _postgres(dsn: str, **caps: int) -> PostgresStore:
    return await PostgresStore.open(dsn, **caps)


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres"])
async def test_every_store_opens_closes_and_enters_alike(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    caps = {"max_payload_bytes": 1000, "max_checkpoint_bytes": 2000}
    openers: dict[str, Callable[[], Awaitable[Any]]] = {
        "memory": lambda: MemoryStore.open(**caps),
        "sqlite": lambda: _sqlite(tmp_path, **caps),
        "postgres": lambda: _postgres(request.getfixturevalue("postgres_dsn"), **caps),
    }
    store = await openers[backend]()
    assert store.limits == SizeLimits(**caps)
    assert store.encryption is None
    async with store as entered:
        assert entered is store
        with pytest.raises(ValidationError):  # open: a bad id is refused, not closed
            await store.load_session("")
    with pytest.raises(StoreClosedError):
        await store.load_session("s")
    await store.close()  # again: a no-op


async def test_the_client_opens_like_a_store() -> None:
    limits = SizeLimits(max_payload_bytes=10, max_checkpoint_bytes=20)
    async with await StoreClient.open("http://127.0.0.1:9", token="t", limits=limits) as client:
        assert (client.url, client.limits) == ("http://127.0.0.1:9", limits)
    with pytest.raises(StoreClosedError):
        await client.load_session("s")
    for url in ("127.0.0.1:8470", "ftp://host", 8470):
        with pytest.raises(ValidationError) as caught:
            await StoreClient.open(url)  # type: ignore[arg-type]
        assert caught.value.field == "url"
