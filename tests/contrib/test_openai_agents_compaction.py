"""MemorySession under the SDK's compaction: the two hooks its own stores implement.

The OpenAI Agents SDK's ``OpenAIResponsesCompactionSession`` asks its store for
``_get_compaction_snapshot`` (automatic compaction of the latest model
exchange) and ``_atomic_replace_items`` (a manual compaction of the whole
history). Both hooks are private in the SDK, so what they must do is pinned
here as the SDK's tests pin its ``SQLiteSession``: on every product-memory
backend, with a scripted model and a stand-in for ``responses.compact`` (no network).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

import pytest
from agents import Agent, Runner, SQLiteSession, set_tracing_disabled
from agents.extensions.memory import EncryptedSession
from agents.memory import OpenAIResponsesCompactionSession
from agents.testing import ScriptedModel
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from agentledger.contrib.openai_agents import COMPACTION, MemorySession
from agentledger.memory import FrameworkItem

KEY = "k" * 44


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    """The SDK exports traces to OpenAI unless told not to: never leave loopback."""
    set_tracing_disabled(True)


def answer(words: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg_{words.replace(' ', '_')}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=words, annotations=[])],
    )


def user(words: str) -> dict[str, Any]:
    return {"role": "user", "content": words}


SUMMARY = {"type": "compaction", "id": "cmp_1", "encrypted_content": "summary-of-earlier-turns"}


class _Compact:
    """``client.responses.compact``: records each request, answers one compaction item."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def compact(self, **kwargs: Any) -> Any:
        self.requests.append(kwargs)
        return type("Compacted", (), {"output": [dict(SUMMARY)], "usage": None})()


class StubClient:
    """The part of ``AsyncOpenAI`` the compaction session uses."""

    def __init__(self) -> None:
        self.responses = _Compact()


def compacting(store: Any, **kwargs: Any) -> tuple[OpenAIResponsesCompactionSession, StubClient]:
    client = StubClient()
    session = OpenAIResponsesCompactionSession(
        store.session_id,
        store,
        client=client,  # type: ignore[arg-type]
        should_trigger_compaction=lambda context: len(context["compaction_candidate_items"]) >= 2,
        **kwargs,
    )
    return session, client


async def three_turns(session: Any) -> None:
    agent = Agent(name="a", model=ScriptedModel([[answer(f"answer {i}")] for i in range(3)]))
    for i in range(3):
        await Runner.run(agent, f"question {i}", session=session)


# ------------------------------------------------------------------ the hooks themselves


async def test_snapshot_is_the_latest_items_and_says_whether_they_are_all(memory: Any) -> None:
    store = MemorySession(f"s-{uuid.uuid4().hex[:8]}", memory)
    items = [user(f"m{i}") for i in range(5)]
    await store.add_items(items)
    part = await store._get_compaction_snapshot(3)
    assert part is not None
    assert (part.items, part.complete) == (items[2:], False)
    whole = await store._get_compaction_snapshot(5)
    assert whole is not None
    assert (whole.items, whole.complete) == (items, True)


async def test_replace_suffix_replaces_in_one_go_and_keeps_the_originals(memory: Any) -> None:
    store = MemorySession(f"s-{uuid.uuid4().hex[:8]}", memory)
    items = [user(f"m{i}") for i in range(5)]
    await store.add_items(items)
    snapshot = await store._get_compaction_snapshot(3)
    assert snapshot is not None
    assert await snapshot.replace_suffix(1, [SUMMARY]) is True
    assert await store.get_items() == [*items[:3], SUMMARY]
    [record] = await store.compactions()
    assert record == {"replaced": items[3:], "output": [SUMMARY], "whole": False}
    assert await snapshot.replace_suffix(5 - 2, []) is False  # nothing to replace


async def test_replace_suffix_changes_nothing_after_another_write(memory: Any) -> None:
    store = MemorySession(f"s-{uuid.uuid4().hex[:8]}", memory)
    items = [user(f"m{i}") for i in range(4)]
    await store.add_items(items)
    snapshot = await store._get_compaction_snapshot(4)
    assert snapshot is not None
    other = MemorySession(store.session_id, memory)
    await other.add_items([user("late")])
    assert await snapshot.replace_suffix(0, [SUMMARY]) is False
    assert await store.get_items() == [*items, user("late")]
    popped = await store._get_compaction_snapshot(4)
    assert popped is not None
    await other.pop_item()
    await other.pop_item()
    assert await popped.replace_suffix(0, [SUMMARY]) is False
    assert await store.get_items() == items[:3]
    assert await store.compactions() == []


async def test_atomic_replace_items_replaces_the_whole_history(memory: Any) -> None:
    store = MemorySession(f"s-{uuid.uuid4().hex[:8]}", memory)
    items = [user(f"m{i}") for i in range(3)]
    await store.add_items(items)
    assert await store._atomic_replace_items([SUMMARY, user("again")]) is True
    assert await store.get_items() == [SUMMARY, user("again")]
    assert await store.compactions() == [
        {"replaced": items, "output": [SUMMARY, user("again")], "whole": True}
    ]
    await store.clear_session()
    assert await store.get_items() == []
    assert await store.compactions() == []


async def test_a_subclass_that_transforms_items_gets_no_hooks(memory: Any) -> None:
    class Upper(MemorySession):
        async def add_items(self, items: list[Any]) -> None:
            await super().add_items([{**i, "content": i["content"].upper()} for i in items])

    store = Upper("sub", memory)
    await store.add_items([user("x")])
    assert await store._get_compaction_snapshot(2) is None
    assert await store._atomic_replace_items([SUMMARY]) is False
    assert await store.get_items() == [user("X")]


# ------------------------------------------------------------------ under the SDK's sessions


async def test_automatic_compaction_runs_as_on_the_sdks_sqlite_session(
    memory: Any, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ours, our_client = compacting(MemorySession("auto", memory))
    theirs, their_client = compacting(SQLiteSession("auto", str(tmp_path / "sdk.db")))
    with caplog.at_level(logging.WARNING, logger="openai-agents.openai.compaction"):
        await three_turns(ours)
        await three_turns(theirs)
    assert not [r for r in caplog.records if "Skipped" in r.getMessage()]
    assert our_client.responses.requests == their_client.responses.requests
    assert len(our_client.responses.requests) >= 1
    assert await ours.get_items() == await theirs.get_items()
    assert SUMMARY in await ours.get_items()
    records = await ours.underlying_session.compactions()  # type: ignore[attr-defined]
    assert len(records) == len(our_client.responses.requests)
    assert all(r["output"] == [SUMMARY] and not r["whole"] for r in records)


async def test_max_rollback_items_as_on_the_sdks_sqlite_session(memory: Any, tmp_path: Any) -> None:
    """Automatic compaction ignores the budget; a manual one over budget changes nothing."""
    ours, _ = compacting(MemorySession("budget", memory), max_rollback_items=2)
    theirs, _ = compacting(SQLiteSession("budget", str(tmp_path / "sdk.db")), max_rollback_items=2)
    await three_turns(ours)
    await three_turns(theirs)
    assert await ours.get_items() == await theirs.get_items()
    await ours.add_items([user("more"), user("and more")])
    before = await ours.get_items()
    with pytest.raises(ValueError, match="max_rollback_items"):
        await ours.run_compaction({"force": True, "compaction_mode": "input"})
    assert await ours.get_items() == before


async def test_manual_compaction_is_one_replacement_not_clear_then_add(memory: Any) -> None:
    store = MemorySession("manual", memory)
    session, client = compacting(store)
    await three_turns(session)
    before = await store.get_items()
    await session.run_compaction({"force": True, "compaction_mode": "input"})
    assert client.responses.requests[-1]["input"]
    assert await store.get_items() == [SUMMARY]
    last = (await store.compactions())[-1]
    assert last == {"replaced": before, "output": [SUMMARY], "whole": True}


async def test_encrypted_session_keeps_items_it_cannot_decrypt(memory: Any) -> None:
    """An item sealed under another key stays; compaction replaces only what follows it."""
    store = MemorySession("sealed", memory)
    foreign = EncryptedSession("sealed", store, encryption_key="f" * 44)
    await foreign.add_items([user("sealed elsewhere")])
    [sealed] = await store.get_items()
    inner, client = compacting(store)
    session = EncryptedSession("sealed", inner, encryption_key=KEY)  # type: ignore[arg-type]
    await three_turns(session)
    assert client.responses.requests
    raw = await store.get_items()
    assert raw[0] == sealed
    readable = await session.get_items()
    assert SUMMARY in readable
    assert user("sealed elsewhere") not in readable
    events = (await memory.load_run(store.agent_id, store.compacted_run_id)).events
    assert any(isinstance(e, FrameworkItem) and e.framework == COMPACTION for e in events)


async def test_manual_compaction_under_encryption_keeps_what_it_replaced(memory: Any) -> None:
    """A manual compaction replaces the whole history, as on the SDK's stores; here the
    items it replaced, a foreign sealed one included, stay readable to the product."""
    store = MemorySession("sealed-manual", memory)
    await EncryptedSession("sealed-manual", store, encryption_key="f" * 44).add_items(
        [user("sealed elsewhere")]
    )
    [sealed] = await store.get_items()
    inner, _ = compacting(store)
    session = EncryptedSession("sealed-manual", inner, encryption_key=KEY)  # type: ignore[arg-type]
    await three_turns(session)
    before = await store.get_items()
    await session.run_compaction({"force": True, "compaction_mode": "input"})  # type: ignore[attr-defined]
    assert await session.get_items() == [SUMMARY]
    [stored] = await store.get_items()
    assert stored != SUMMARY  # sealed under the session's key
    last = (await store.compactions())[-1]
    assert last["whole"]
    assert last["replaced"] == before
    assert sealed in last["replaced"]


async def _with_an_expired_item(store: Any) -> tuple[Any, StubClient, dict[str, Any]]:
    """An encrypted compacting session on ``store`` whose oldest item expired long ago."""
    inner, client = compacting(store)
    session = EncryptedSession(store.session_id, inner, encryption_key=KEY)  # type: ignore[arg-type]
    old = int(time.time()) - 100_000  # sealed at a fixed time in the past: no waiting
    token = session.cipher.encrypt_at_time(json.dumps(user("long ago")).encode(), old)
    expired = {"__enc__": 1, "v": 1, "kid": "hkdf-v1", "payload": token.decode()}
    await store.add_items([expired])
    return session, client, expired


async def test_compaction_deletes_expired_items_as_the_sdks_sqlite_session_does(
    memory: Any, tmp_path: Any
) -> None:
    ours = MemorySession("expiring", memory)
    theirs = SQLiteSession("expiring", str(tmp_path / "sdk.db"))
    for store in (ours, theirs):
        session, client, expired = await _with_an_expired_item(store)
        await three_turns(session)
        assert client.responses.requests
        assert expired not in await store.get_items()
        assert SUMMARY in await session.get_items()
    assert len(await ours.get_items()) == len(await theirs.get_items())


async def test_prune_prefix_deletes_the_oldest_items_it_holds_true_for(memory: Any) -> None:
    """In the replacement's transaction, up to the first item it does not hold for; they are
    not kept."""
    store = MemorySession(f"s-{uuid.uuid4().hex[:8]}", memory)
    old, keep = user("old"), user("keep")
    await store.add_items([old, old, keep, old, user("a"), user("b")])
    snapshot = await store._get_compaction_snapshot(2, prune_prefix=lambda item: item == old)
    assert snapshot is not None
    assert await snapshot.replace_suffix(0, [SUMMARY]) is True
    assert await store.get_items() == [keep, old, SUMMARY]
    [record] = await store.compactions()
    assert record == {
        "replaced": [user("a"), user("b")],
        "output": [SUMMARY],
        "whole": False,
        "expired": 2,
    }
    again = await store._get_compaction_snapshot(1, prune_prefix=lambda item: item == old)
    assert again is not None
    assert await again.replace_suffix(0, [user("c")]) is True  # `keep` comes first: none go
    assert await store.get_items() == [keep, old, user("c")]
