"""Apps for worker processes started by the tests (``agentledger worker --app ...``).

Their planners are deterministic functions of the transcript (no scripted
model whose position a crashed process would lose), and their tools leave
marker files in ``$AGENTLEDGER_TEST_MARKERS`` so a test can see, from
another process, that a tool started and how often it ran.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

from agentledger.runtime import (
    Agent,
    AwaitConfirmation,
    PlanInput,
    PlanResult,
    PlanResumeInput,
    Runtime,
    ToolCall,
    ToolContext,
    tool,
)
from agentledger.transcript import TextPart

MARKERS_ENV = "AGENTLEDGER_TEST_MARKERS"
SLOW_SECONDS_ENV = "AGENTLEDGER_TEST_SLOW_SECONDS"
PAUSE_KEY_ENV = "AGENTLEDGER_TEST_PAUSE_KEY"
"""The event key of the record after whose write ``pausing:setup`` workers freeze."""


def mark(name: str) -> None:
    folder = os.environ.get(MARKERS_ENV)
    if folder:
        Path(folder, f"{name}.{uuid.uuid4().hex[:8]}").touch()


@tool
async def slow_step(label: str, ctx: ToolContext) -> str:
    """Take a while (``$AGENTLEDGER_TEST_SLOW_SECONDS``), leaving a marker when it starts."""
    mark(f"started-{ctx.run_id}")
    mark(f"worker-{os.getpid()}")
    await asyncio.sleep(float(os.environ.get(SLOW_SECONDS_ENV, "0")))
    mark(f"finished-{ctx.run_id}")
    return f"{label} done"


class TwoStepPlanner:
    """Calls ``slow_step`` once with the user's text, then answers with its result.

    Each call leaves a ``planned-<run>-<turn>`` marker: how often the "model" was asked.
    """

    async def plan_start(self, input: PlanInput) -> PlanResult:
        mark(f"planned-{input.run.run_id}-{input.run.turn}")
        messages = await input.prepare_messages()
        text = "".join(p.text for p in messages[-1].parts if isinstance(p, TextPart))
        return PlanResult.call(ToolCall(id="step-1", name="slow_step", input={"label": text}))

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        mark(f"planned-{input.run.run_id}-{input.run.turn}")
        return PlanResult.answer(f"finished: {input.tool_results[0].content}")


class AskingPlanner:
    """Asks the user to confirm a ``slow_step`` call (the run suspends), then answers.

    Leaves the same ``planned-<run>-<turn>`` markers as :class:`TwoStepPlanner`.
    """

    async def plan_start(self, input: PlanInput) -> PlanResult:
        mark(f"planned-{input.run.run_id}-{input.run.turn}")
        call = ToolCall(id="step-1", name="slow_step", input={"label": "asked"})
        return PlanResult(await_=AwaitConfirmation(calls=(call,), prompt="Go ahead?"))

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        mark(f"planned-{input.run.run_id}-{input.run.turn}")
        return PlanResult.answer(f"finished: {input.tool_results[0].content}")


@tool
async def quick_step(label: str, ctx: ToolContext) -> str:
    """Answer at once, leaving a ``ran-<run>-<call>`` marker each time it runs."""
    mark(f"ran-{ctx.run_id}-{ctx.tool_call_id}")
    return f"{label} done"


class PairPlanner:
    """Calls ``quick_step`` twice in parallel (calls ``a`` and ``b``), then answers with both.

    Leaves the same ``planned-<run>-<turn>`` markers as :class:`TwoStepPlanner`.
    """

    async def plan_start(self, input: PlanInput) -> PlanResult:
        mark(f"planned-{input.run.run_id}-{input.run.turn}")
        return PlanResult(
            tool_calls=tuple(
                ToolCall(id=call, name="quick_step", input={"label": call}) for call in ("a", "b")
            )
        )

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        mark(f"planned-{input.run.run_id}-{input.run.turn}")
        return PlanResult.answer(" + ".join(str(r.content) for r in input.tool_results))


def setup(runtime: Runtime) -> None:
    """Three agents: ``stepper`` calls the slow tool, ``asker`` asks first, ``pair`` calls
    the quick tool twice in parallel."""
    runtime.register_agent(Agent("stepper", TwoStepPlanner(), tools=[slow_step]))
    runtime.register_agent(Agent("asker", AskingPlanner(), tools=[slow_step]))
    runtime.register_agent(Agent("pair", PairPlanner(), tools=[quick_step]))


def markers(folder: Path, prefix: str) -> list[Path]:
    """The marker files whose name starts with ``prefix``."""
    return sorted(p for p in folder.iterdir() if p.name.startswith(prefix + "."))


def buggy_setup(runtime: Runtime) -> None:
    """:func:`setup` on a worker whose run loop has a bug: it raises where it would run the
    tools a planner turn asked for (a bad deploy; the next deploy is ``setup`` again)."""
    from agentledger.runtime import workflow as run_loop

    async def broken(self: object, *args: object, **kwargs: object) -> object:
        raise KeyError("a bug in this deploy")

    run_loop._Loop._execute = broken  # type: ignore[method-assign, assignment]
    setup(runtime)


def first_task_buggy_setup(runtime: Runtime) -> None:
    """:func:`setup` on a worker whose run loop has a bug right after the run starts: it
    raises before the first planner turn, in the run's first workflow task (where the
    start ran as a local activity)."""
    from agentledger.runtime import workflow as run_loop

    async def broken(self: object, *args: object, **kwargs: object) -> object:
        raise KeyError("a bug right after the start")

    run_loop._Loop._plan_loop = broken  # type: ignore[method-assign, assignment]
    setup(runtime)


def later_task_buggy_setup(runtime: Runtime) -> None:
    """:func:`setup` on a worker whose run loop has a bug right after a store write in a
    later workflow task: it raises once the run's ending is written (a local activity)."""
    from agentledger.runtime import workflow as run_loop

    complete = run_loop._Loop._complete

    async def broken(self: Any, *args: Any, **kwargs: Any) -> str:
        await complete(self, *args, **kwargs)
        raise KeyError("a bug after a write")

    run_loop._Loop._complete = broken  # type: ignore[method-assign]
    setup(runtime)
