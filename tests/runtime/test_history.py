"""History policies and compaction on the in-process engine [V5]: what each turn sends the
model is cut as the policy says, recorded with the turn, and rebuilt exactly from the log."""

from __future__ import annotations

from typing import Any

import pytest

from agentledger.errors import TransientError
from agentledger.providers.model import ModelRequest, ModelResponse
from agentledger.runtime import (
    Agent,
    Compaction,
    HistoryContext,
    HistoryCut,
    LastTurns,
    ModelPlanner,
    QueueSink,
    Runtime,
    TokenBudget,
    estimate_tokens,
    tool,
)
from agentledger.runtime.history import SUMMARY_HEADER, turn_starts
from agentledger.storage import payloads
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.testing.scripted import ScriptedModel, reply, tool_calls
from agentledger.transcript import Message, TextPart, validate_planner_transcript
from agentledger.transcript.validate import validate_bedrock
from tests.runtime.support import AnyStore, FailsOnce, provider_inputs_match_replay, records


def _runtime(store: Any, model: Any, history: Any, *, summariser: Any = None) -> Runtime:
    runtime = Runtime(store, stream=QueueSink())
    runtime.register_model("m", model)
    if summariser is not None:
        runtime.register_model("summariser", summariser)

    @tool
    async def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    runtime.register_agent(
        Agent("chat", ModelPlanner("m", system="Be brief."), tools=[lookup], history=history)
    )
    return runtime


def _text(message: Message) -> str:
    return "".join(p.text for p in message.parts if isinstance(p, TextPart))


async def _conversation(runtime: Runtime, session: str, turns: int) -> list[str]:
    client = runtime.agent_client("chat")
    previous: str | None = None
    runs = []
    for i in range(turns):
        out = await client.run(session, f"question {i}", after=previous)
        previous = out.run_id
        runs.append(out.run_id)
    return runs


async def test_last_turns_sends_only_the_newest_turns(every_store: Any, every_session: str) -> None:
    model = ScriptedModel([reply(f"answer {i}") for i in range(6)])
    runtime = _runtime(every_store, model, LastTurns(2))
    runs = await _conversation(runtime, every_session, 6)
    for i, request in enumerate(model.requests):
        users = [_text(m) for m in request.messages if m.role == "user"]
        assert users == [f"question {j}" for j in range(max(0, i - 1), i + 1)]
        assert request.messages[0].role == "system"
    await provider_inputs_match_replay(every_store, model, runs)
    full = await build_messages_from_run_log(every_store, runs[-1], full=True)
    assert [_text(m) for m in full if m.role == "user"] == [f"question {j}" for j in range(6)]
    # later turns' replays read from the cut, not the whole conversation
    chain = await every_store.load_transcript_chain(runs[-1], windowed=True)
    assert [s.run_id for s in chain] == [runs[-1], runs[-2]]


async def test_a_cut_never_separates_tool_calls_from_results(
    every_store: Any, every_session: str
) -> None:
    script: list[ModelResponse] = []
    for i in range(4):
        script += [tool_calls((f"c{i}", "lookup", {"key": str(i)})), reply(f"answer {i}")]
    model = ScriptedModel(script)
    runtime = _runtime(every_store, model, LastTurns(1))
    runs = await _conversation(runtime, every_session, 4)
    for request in model.requests:
        sent = [m for m in request.messages if m.role != "system"]
        validate_planner_transcript(sent)
        validate_bedrock(sent, thinking_enabled=False)
        assert turn_starts(sent)[0] == 0
    # the second call of the last turn still sees the whole turn: question, call, result
    last = [m for m in model.requests[-1].messages if m.role != "system"]
    assert [m.role for m in last] == ["user", "assistant", "user"]
    await provider_inputs_match_replay(every_store, model, runs)


async def test_token_budget_keeps_whole_turns_within_budget(
    every_store: Any, every_session: str
) -> None:
    model = ScriptedModel([reply("x" * 400) for _ in range(8)])
    runtime = _runtime(every_store, model, TokenBudget(400))
    runs = await _conversation(runtime, every_session, 8)
    for request in model.requests:
        sent = [m for m in request.messages if m.role != "system"]
        # within budget, or only the newest turn is left
        assert estimate_tokens(request) <= 400 or len(turn_starts(sent)) == 1
    assert len(model.requests[-1].messages) < 2 * 8
    await provider_inputs_match_replay(every_store, model, runs)


async def test_compaction_records_the_summary_with_its_provenance(
    every_store: Any, every_session: str
) -> None:
    model = ScriptedModel([reply("y" * 200) for _ in range(8)])
    summariser = ScriptedModel([reply(f"summary {i}") for i in range(8)])
    policy = Compaction("summariser", threshold_tokens=300, keep_tokens=120, prompt_version="7")
    runtime = _runtime(every_store, model, policy, summariser=summariser)
    runs = await _conversation(runtime, every_session, 8)
    assert summariser.requests, "the threshold was crossed, so a summary was asked for"
    windows = []
    for run_id in runs:
        for record in await records(every_store, run_id):
            if record.type == payloads.TRANSCRIPT_WINDOW:
                windows.append(payloads.TranscriptWindow.decode(record.payload))
    summaries = [w for w in windows if w.summary]
    assert len(summaries) == len(summariser.requests)
    first = summaries[0]
    assert first.prompt_id == "agentledger.compaction"
    assert first.prompt_version == "7"
    assert first.model == "summariser"
    assert first.replaces
    assert first.replaces[0].run_id == runs[0]
    assert first.replaces[0].first == "3"
    # a later summary read the earlier one (it is part of what it summarises)
    if len(summariser.requests) > 1:
        assert "summary 0" in _text(summariser.requests[1].messages[-1])
    last = [m for m in model.requests[-1].messages if m.role != "system"]
    assert _text(last[0]).startswith(SUMMARY_HEADER)
    await provider_inputs_match_replay(every_store, model, runs)
    # the summariser's tokens are recorded too
    usage = [
        r
        for run_id in runs
        for r in await records(every_store, run_id)
        if ":history:" in r.event_key
    ]
    assert len(usage) == len(summariser.requests)


class _FailingSummariser:
    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        raise self.error

    def stream(self, request: ModelRequest) -> Any:
        raise self.error


async def test_a_failed_summary_leaves_the_history_as_it_was(
    every_store: Any, every_session: str
) -> None:
    model = ScriptedModel([reply("z" * 200) for _ in range(5)])
    summariser = _FailingSummariser(ValueError("the summariser is down"))
    policy = Compaction("summariser", threshold_tokens=200)
    runtime = _runtime(every_store, model, policy, summariser=summariser)
    runs = await _conversation(runtime, every_session, 5)
    assert summariser.calls > 0
    last = [m for m in model.requests[-1].messages if m.role != "system"]
    assert len(turn_starts(last)) == 5  # every turn sent
    kinds = [r.type for run_id in runs for r in await records(every_store, run_id)]
    assert payloads.TRANSCRIPT_WINDOW not in kinds
    notes = [
        r.payload
        for run_id in runs
        for r in await records(every_store, run_id)
        if r.type == "planner_note"
    ]
    assert any(b"the summariser is down" in n for n in notes)
    await provider_inputs_match_replay(every_store, model, runs)


async def test_a_transient_summariser_error_retries_the_turn(store: AnyStore, session: str) -> None:
    model = ScriptedModel([reply("z" * 200) for _ in range(3)])
    flaky = _FailingSummariser(TransientError("overloaded"))
    runtime = _runtime(
        store, model, Compaction("summariser", threshold_tokens=150), summariser=flaky
    )
    client = runtime.agent_client("chat")
    first = await client.run(session, "one")
    second = await client.run(session, "two", after=first.run_id)
    out = await client.run(session, "three", after=second.run_id)
    assert flaky.calls > 1  # retried like any transient error, then the run failed
    assert out.status == "failed"
    assert out.failure is not None
    assert out.failure.code == "TransientError"
    kinds = [r.type for r in await records(store, out.run_id)]
    assert payloads.TRANSCRIPT_WINDOW not in kinds
    assert "model_usage" not in kinds


async def test_a_retried_turn_uses_the_summary_already_made(
    every_store: Any, every_session: str
) -> None:
    inner = ScriptedModel([reply("w" * 200) for _ in range(3)])
    model = FailsOnce(inner, fail_at=3)  # the third turn's call, after its summary
    summariser = ScriptedModel([reply("the only summary")])  # a second call would fail
    policy = Compaction("summariser", threshold_tokens=150, keep_tokens=60)
    runtime = _runtime(every_store, model, policy, summariser=summariser)
    runs = await _conversation(runtime, every_session, 3)
    assert len(summariser.requests) == 1
    assert model.calls == 4
    windows = [
        payloads.TranscriptWindow.decode(r.payload)
        for r in await records(every_store, runs[-1])
        if r.type == payloads.TRANSCRIPT_WINDOW
    ]
    assert [w.summary for w in windows] == [SUMMARY_HEADER + "the only summary"]
    await provider_inputs_match_replay(every_store, inner, runs)


class _BadPolicy:
    name = "bad"

    async def cut(self, messages: Any, context: HistoryContext, /) -> HistoryCut | None:
        return HistoryCut(start=len(messages) - 1 if len(messages) > 2 else 0)


async def test_a_policy_that_cuts_inside_a_turn_fails_the_turn(
    store: AnyStore, session: str
) -> None:
    script = [tool_calls(("c1", "lookup", {"key": "k"})), reply("done")]
    model = ScriptedModel(script)
    runtime = _runtime(store, model, _BadPolicy())
    out = await runtime.agent_client("chat").run(session, "question")
    assert out.status == "failed"
    assert out.failure is not None
    assert "no turn begins" in out.failure.message


def test_policies_refuse_bad_settings() -> None:
    from agentledger.errors import ValidationError

    with pytest.raises(ValidationError):
        LastTurns(0)
    with pytest.raises(ValidationError):
        TokenBudget(0)
    with pytest.raises(ValidationError):
        Compaction("s", threshold_tokens=100, keep_tokens=100)
    with pytest.raises(ValidationError):
        Agent("a", ModelPlanner("m"), history="last 5")  # type: ignore[arg-type]


async def test_token_budget_counts_with_the_providers_own_count(
    store: AnyStore, session: str
) -> None:
    """With no counter given, a budget counts with the agent's model client's own token
    count (Anthropic's ``count_tokens``, here its stub on loopback)."""
    from agentledger.providers.anthropic import AnthropicClient
    from agentledger.testing.providers import AnthropicStub
    from agentledger.testing.providers.anthropic import message_reply, text_block

    with AnthropicStub() as stub:
        stub.script(*(message_reply(text_block("y" * 400)) for _ in range(5)))
        async with AnthropicClient(api_key="k", base_url=stub.url, max_retries=0) as client:
            runtime = Runtime(store, stream=QueueSink())
            runtime.register_model("m", client)
            planner = ModelPlanner("m", model="claude-test")
            runtime.register_agent(Agent("chat", planner, history=TokenBudget(300)))
            runs = await _conversation(runtime, session, 5)
        counted = [r for r in stub.requests if r.path.startswith("/v1/messages/count_tokens")]
        sent = [r for r in stub.requests if r.path.split("?")[0] == "/v1/messages"]
    assert counted, "the budget asked the provider to count"
    assert all(r.body["model"] == "claude-test" for r in counted)
    assert len(sent) == 5
    assert len(sent[-1].body["messages"]) < 9  # cut: not every turn was sent
    windows = [r for run_id in runs for r in await records(store, run_id)]
    assert any(r.type == payloads.TRANSCRIPT_WINDOW for r in windows)


async def test_literal_history_is_cut_and_a_closed_run_still_checks(
    store: AnyStore, session: str
) -> None:
    """A run seeded with a message list is cut by its own window (no reference involved);
    the transcript is what the model was sent, the full view everything, and closing the
    run's completion later checks its whole log."""
    from agentledger.runtime import user_message

    model = ScriptedModel([reply("now")])
    runtime = _runtime(store, model, LastTurns(1))
    earlier = [
        user_message("one"),
        Message(role="assistant", parts=(TextPart(text="1"),)),
        user_message("two"),
        Message(role="assistant", parts=(TextPart(text="2"),)),
    ]
    out = await runtime.agent_client("chat").run(session, [*earlier, user_message("three")])
    sent = [m for m in model.requests[0].messages if m.role != "system"]
    assert sent == [user_message("three")]
    assert await runtime.transcript(out.run_id) == [*sent, out.final]
    assert len(await runtime.transcript(out.run_id, full=True)) == 6
    later = Runtime(store, stream=QueueSink())
    done = await later.ensure_run_completion(out.run_id)
    assert not done.repaired


async def test_a_cut_made_during_a_run_reaches_its_next_turn(
    every_store: Any, every_session: str
) -> None:
    """A run whose own tool calls push older turns over the budget: its later planner turns
    cut (recording the window with their plan), and each next turn, which in process reads
    nothing (the cache follows the run's writes), sends exactly what replay gives."""
    key = "k" * 600
    script = [reply(f"answer {i}") for i in range(3)]  # three short turns, then one that grows
    script += [tool_calls((f"c{j}", "lookup", {"key": key})) for j in range(3)]
    script.append(reply("answer 3"))
    model = ScriptedModel(script)
    runtime = _runtime(every_store, model, TokenBudget(700))
    runs = await _conversation(runtime, every_session, 4)
    cuts = [r.event_key for r in await records(every_store, runs[-1])]
    assert [k for k in cuts if k.endswith(":window")] == ["turn:3:window", "turn:4:window"]
    await provider_inputs_match_replay(every_store, model, runs)
