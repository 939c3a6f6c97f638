"""The demo's console: assistant text printed as the model streams it (model_delta)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from agentledger.demo import ConsoleSink
from agentledger.runtime import events
from agentledger.testing.providers import AnthropicStub
from agentledger.testing.providers import anthropic as anthropic_wire
from agentledger.transcript import Message, TextPart

ROOT = Path(__file__).resolve().parents[1]
AT = datetime(2026, 1, 1, tzinfo=UTC)
BASE: dict[str, Any] = {
    "run_id": "r1",
    "agent_id": "concierge",
    "session_id": "s1",
    "turn_id": "t1",
    "timestamp": AT,
}


def _delta(seq: int, text: str, index: int = 0) -> events.ModelDelta:
    return events.ModelDelta(
        **BASE, key=f"r1/turn:1:delta:a:{seq}", turn=1, attempt="a", seq=seq, kind="text",
        index=index, text=text,
    )  # fmt: skip


async def test_the_console_prints_tokens_as_they_arrive() -> None:
    """Each text delta is on screen when it arrives; the recorded message only ends the line."""
    out = io.StringIO()
    sink = ConsoleSink(Console(file=out, width=200, color_system=None))
    await sink.send(events.RunStarted(**BASE, key="r1/run_started"))
    await sink.send(_delta(0, "Let me "))
    assert out.getvalue() == "concierge: Let me "
    await sink.send(_delta(1, "check."))
    assert out.getvalue() == "concierge: Let me check."
    await sink.send(_delta(2, "Done", index=2))
    message = Message(
        role="assistant", parts=(TextPart(text="Let me check."), TextPart(text="Done"))
    )
    await sink.send(events.MessagesAppended(**BASE, key="r1/turn:1:m", messages=(message,)))
    assert out.getvalue() == "concierge: Let me check. Done\n"
    later = Message(role="assistant", parts=(TextPart(text="Not streamed."),))
    await sink.send(events.MessagesAppended(**BASE, key="r1/turn:2:m", messages=(later,)))
    assert out.getvalue().endswith("Done\nconcierge: Not streamed.\n")


def test_the_demo_streams_a_real_provider(tmp_path: Path) -> None:
    """With a provider configured (Anthropic's SDK, pointed at its loopback stub), the
    demo asks for streamed answers and prints them."""
    with AnthropicStub() as stub:
        stub.script(
            anthropic_wire.message_reply(anthropic_wire.text_block("Sunny in both cities.")),
            anthropic_wire.message_reply(anthropic_wire.text_block("Built in 1889.")),
            anthropic_wire.message_reply(anthropic_wire.text_block("Which evening?")),
            anthropic_wire.message_reply(
                anthropic_wire.tool_use_block(
                    "f1", "search_flights", {"origin": "Paris", "destination": "Tokyo"}
                )
            ),
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTLEDGER_", "AWS_"))}
        env.update(ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=stub.url)
        env.pop("OPENAI_API_KEY", None)
        done = subprocess.run(
            [sys.executable, "-m", "agentledger", "--db", str(tmp_path / "d.db"), "demo"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=120,
            check=False,
        )
        requests = list(stub.requests)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Using AnthropicClient" in done.stdout
    assert len(requests) == 4
    assert all(r.body.get("stream") for r in requests)
    for text in ("Sunny in both cities.", "Built in 1889.", "Which evening?"):
        assert done.stdout.count(f"concierge: {text}") == 1
