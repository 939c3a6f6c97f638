"""The list of sessions reads each session's usage counters once, its runs only when it has
some, and its first message once: the store calls a page makes, counted."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentledger.runtime import records as rt
from agentledger.storage import RecordBuilder, RunStart, RunStatus
from agentledger.storage.payloads import TRANSCRIPT_APPENDED
from agentledger.storage.sqlite import SQLiteStore
from agentledger.transcript import Message, TextPart, encode_messages
from agentledger.views.sessions import session_glance, session_rows

T0 = datetime(2026, 1, 1, tzinfo=UTC)
N = 6


class Counting:
    """A real store, counting each call made through it by method name."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return method(*args, **kwargs)

        return counted if callable(method) else method


async def _seed(store: SQLiteStore) -> None:
    """N sessions of one run each (one still running), and one session without runs."""
    await store.create_session("empty", created_at=T0)
    for n in range(N):
        at = T0 + timedelta(minutes=n + 1)
        await store.create_session(f"s{n}", created_at=at)
        run = RecordBuilder(RunStart(run_id=f"r{n}", agent_id="a", session_id=f"s{n}",
                                     started_at=at))  # fmt: skip
        await store.start_root_run(run.root_start())
        said = encode_messages([Message(role="user", parts=(TextPart(text=f"hello {n}"),))])
        usage = rt.RecordSpec.usage(1, 0, rt.UsagePayload(model="m", input_tokens=100 + n,
                                                          output_tokens=10))  # fmt: skip
        await store.append_run_records([
            run.record(TRANSCRIPT_APPENDED, said, event_key="input:messages", at=at),
            run.record(usage.type, usage.payload, event_key=usage.event_key, at=at),
        ])  # fmt: skip
        if n:
            await store.record_run_terminal(run.terminal(RunStatus.COMPLETED, at=at))


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = await SQLiteStore.open(str(tmp_path / "s.db"))
    await _seed(opened)
    yield opened
    await opened.close()


async def test_a_page_of_sessions_reads_few_times(store: SQLiteStore) -> None:
    counting = Counting(store)
    sessions = (await counting.list_sessions()).sessions
    assert len(sessions) == N + 1
    # As the list read before: the runs of every session, then its first message.
    counting.calls.clear()
    for s in sessions:
        await session_glance(counting, s, await counting.list_runs_by_session(s.id))  # type: ignore[arg-type]
    before = dict(counting.calls)
    assert before == {"list_runs_by_session": N + 1, "list_run_records": N}
    # Now: the counters of each, the runs of those with runs, the first message once.
    firsts: dict[str, str] = {}
    counting.calls.clear()
    rows = await session_rows(counting, sessions, firsts)  # type: ignore[arg-type]
    assert dict(counting.calls) == {
        "load_session_usage": N + 1,
        "list_runs_by_session": N,
        "list_run_records": N,
    }
    counting.calls.clear()
    again = await session_rows(counting, sessions, firsts)  # type: ignore[arg-type]
    assert dict(counting.calls) == {"load_session_usage": N + 1, "list_runs_by_session": N}
    assert again == rows
    by_id = {row.session.id: row for row in rows}
    assert by_id["empty"].usage.runs == 0
    assert by_id["empty"].glance.first == ""
    for n in range(N):
        row = by_id[f"s{n}"]
        assert row.glance.first == f"hello {n}"
        assert (row.usage.runs, row.usage.records) == (1, 4 if n else 3)
        assert (row.usage.input_tokens, row.usage.output_tokens) == (100 + n, 10)
        assert row.usage.bytes > 0
        assert row.running is (n == 0)
