"""A host runtime given to the service: embedded through ``create_app``, loaded by spec, checked.

The embedding case runs the real app on a uvicorn server on loopback in this
process, next to the host's own runtime (the in-process engine runs what both
start), and acts through the inspector's form endpoints with a host token.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from agentledger.errors import RunNotFoundError, ValidationError
from agentledger.runtime import Runtime
from agentledger.service import RuntimeClientHost, RuntimeHost, TokenTable, add_token, create_app
from agentledger.service.host_runtime import build_host_runtime, load_host_runtime
from agentledger.storage import RunStatus
from agentledger.storage.sqlite import SQLiteStore
from tests.conditions import HANG_GUARD
from tests.service.inspector.host_agents import runtime as agents


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@asynccontextmanager
async def _embedded(tmp_path: Path) -> AsyncIterator[tuple[str, str, Runtime]]:
    """The app serving a host's store with the host's runtime: URL, host token, runtime."""
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "host")
    store = await SQLiteStore.open(str(tmp_path / "ledger.db"))
    runtime = agents(store)
    app = create_app(
        store, TokenTable.load(tokens), host_runtime=RuntimeClientHost(runtime, owns_runtime=False)
    )
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="critical")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", token, runtime
    finally:
        server.should_exit = True
        await task
        await runtime.close()
        await store.close()


async def test_an_embedding_host_passes_its_runtime_and_the_inspector_answers_with_it(
    tmp_path: Path,
) -> None:
    """A run the host started and suspended is approved through the inspector; the
    continuation runs in the host's own engine and completes."""
    async with _embedded(tmp_path) as (url, token, runtime):
        await runtime.store.create_session("s1", created_at=_now())
        out = await runtime.agent_client("booker").run("s1", "Book it.", run_id="b1")
        assert out.status is RunStatus.SUSPENDED
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as client:
            answer = await client.post(
                f"{url}/ui/run/answer", data={"id": "b1", "decision": "approve"}
            )
        assert answer.status_code == 303, answer.text
        # the page lands at the end of the continuation's transcript, where the reply comes
        location = answer.headers["location"]
        assert location.startswith("/ui/run/transcript?id="), location
        continuation = location.split("id=", 1)[1].split("&", 1)[0]
        done = await runtime.engine.result(continuation)
        assert done.status is RunStatus.COMPLETED
        assert (await runtime.store.load_run("b1")).successor_run_id == continuation


async def _running(store: SQLiteStore, run_id: str) -> None:
    """Wait for the run's first write (an engine starts the workflow before it)."""
    deadline = asyncio.get_running_loop().time() + HANG_GUARD
    while asyncio.get_running_loop().time() < deadline:
        try:
            await store.load_run(run_id)
            return
        except RunNotFoundError:
            await asyncio.sleep(0.01)
    raise AssertionError(f"{run_id} was never recorded")


async def test_cancel_records_the_intent_and_says_whether_the_engine_knew_the_run(
    tmp_path: Path,
) -> None:
    """A run of this engine is stopped; one started elsewhere keeps only the recorded request."""
    store = await SQLiteStore.open(str(tmp_path / "ledger.db"))
    try:
        await store.create_session("s1", created_at=_now())
        elsewhere = agents(store)
        started = await elsewhere.agent_client("asker").start("s1", "slowly", run_id="nap-a")
        host = RuntimeClientHost(agents(store))
        await _running(store, "nap-a")
        assert await host.cancel("nap-a", "not here") is False
        assert (await store.load_run("nap-a")).cancellation_reason == "not here"
        mine = await host.runtime.agent_client("asker").start("s1", "slowly", run_id="nap-b")
        await _running(store, "nap-b")
        assert await host.cancel("nap-b", "mine") is True
        done = await host.runtime.engine.result(mine.run_id)
        assert done.status is RunStatus.CANCELED
        await host.close()
        await started.cancel("not here")
        assert (await started.wait()).status is RunStatus.CANCELED
        await elsewhere.close()
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("", "package.module:factory"),
        ("tests.service.inspector.host_agents", "package.module:factory"),
        ("no_such_module_here:build", "a module this Python can import"),
        ("tests.service.inspector.host_agents:BOOKING", "a callable named 'BOOKING'"),
    ],
)
def test_a_bad_spec_is_refused_with_the_field_at_fault(spec: str, says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        load_host_runtime(spec)
    assert refused.value.field == "host_runtime"
    assert says in str(refused.value)


async def test_a_factory_may_be_async_and_must_build_a_runtime_host(tmp_path: Path) -> None:
    store = await SQLiteStore.open(str(tmp_path / "ledger.db"))
    try:
        factory = load_host_runtime("tests.service.inspector.host_agents:build")

        async def later(store: Any) -> RuntimeHost:
            return factory(store)  # type: ignore[return-value]

        built = await build_host_runtime(later, store)
        assert isinstance(built, RuntimeClientHost)
        await built.close()
        with pytest.raises(ValidationError) as refused:
            await build_host_runtime(lambda store: object(), store)
        assert "a RuntimeHost" in str(refused.value)
    finally:
        await store.close()


async def test_create_app_takes_a_store_and_tokens_or_a_state_never_both(tmp_path: Path) -> None:
    from agentledger.service.state import ServiceState

    tokens = tmp_path / "tokens.json"
    add_token(tokens, "host")
    table = TokenTable.load(tokens)
    store = await SQLiteStore.open(str(tmp_path / "ledger.db"))
    try:
        state = ServiceState(store, table)
        create_app(state=state)
        with pytest.raises(ValidationError, match="not both"):
            create_app(store, table, state=state)
        with pytest.raises(ValidationError, match="not both"):
            create_app(state=state, host_runtime=RuntimeClientHost(agents(store)))
        with pytest.raises(ValidationError, match="neither"):
            create_app(store)
    finally:
        await store.close()


async def test_a_runtime_off_temporal_has_no_temporal_client(tmp_path: Path) -> None:
    store = await SQLiteStore.open(str(tmp_path / "ledger.db"))
    runtime = agents(store)
    try:
        assert RuntimeClientHost(runtime, owns_runtime=False).temporal_client() is None
    finally:
        await runtime.close()
        await store.close()


def test_a_factory_beside_serve_is_found_and_sys_path_is_left_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    (tmp_path / "beside_serve_host.py").write_text("def build(store):\n    return None\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "beside_serve_host", raising=False)
    before = list(sys.path)
    factory = load_host_runtime("beside_serve_host:build")
    assert factory.__module__ == "beside_serve_host"
    assert sys.path == before
