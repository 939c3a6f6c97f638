"""InProcessEngine: the engine contract on asyncio tasks (retries, cancellation, children)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentledger.engine import (
    ActivityFailedError,
    ChildFailedError,
    InProcessEngine,
    RetryPolicy,
    WorkflowContext,
    WorkflowStatus,
)
from agentledger.engine.base import WorkflowCanceled
from agentledger.errors import TransientError, ValidationError

FAST = RetryPolicy(initial_interval=0.001, backoff_coefficient=2.0, maximum_interval=0.004)


def test_retry_policy_backs_off_and_retries_only_transient_errors() -> None:
    """Only TransientError is retried, with exponential backoff capped at maximum_interval."""
    policy = RetryPolicy(initial_interval=1.0, backoff_coefficient=2.0, maximum_interval=5.0)
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]
    assert policy.retries(TransientError("x"), 1)
    assert not policy.retries(TransientError("x"), policy.maximum_attempts)
    assert not policy.retries(ValidationError(field="f", expected="e"), 1)
    assert not policy.retries(RuntimeError("bug"), 1)
    with pytest.raises(ValueError, match="maximum_attempts"):
        RetryPolicy(maximum_attempts=0)


def _engine(workflow: Any, **activities: Any) -> InProcessEngine:
    engine = InProcessEngine(FAST)
    engine.bind(workflow, activities)
    return engine


async def test_activities_are_retried_on_transient_errors_then_fail() -> None:
    """Transient errors retry up to maximum_attempts; then ActivityFailedError (retryable)."""
    calls: list[int] = []

    async def flaky(arg: int) -> int:
        calls.append(arg)
        if len(calls) < 3:
            raise TransientError("busy")
        return arg * 2

    async def always(arg: int) -> int:
        calls.append(arg)
        raise TransientError("down")

    async def workflow(ctx: WorkflowContext, arg: int) -> Any:
        first = await ctx.activity("flaky", arg, int)
        try:
            await ctx.activity("always", arg, int)
        except ActivityFailedError as e:
            return first, e.retryable, e.attempts, e.error_type
        raise AssertionError("unreachable")

    engine = _engine(workflow, flaky=flaky, always=always)
    await engine.start("w1", 21)
    assert await engine.result("w1") == (42, True, FAST.maximum_attempts, "TransientError")
    assert len(calls) == 3 + FAST.maximum_attempts


async def test_a_contract_error_is_not_retried() -> None:
    """A ContractError fails the activity on its first attempt."""
    calls: list[int] = []

    async def refuse(arg: int) -> int:
        calls.append(arg)
        raise ValidationError(field="x", expected="y")

    async def workflow(ctx: WorkflowContext, arg: int) -> Any:
        return await ctx.activity("refuse", arg, int)

    engine = _engine(workflow, refuse=refuse)
    await engine.start("w1", 1)
    with pytest.raises(ActivityFailedError) as failed:
        await engine.result("w1")
    assert failed.value.attempts == 1
    assert not failed.value.retryable
    assert isinstance(failed.value.error, ValidationError)
    assert calls == [1]
    info = await engine.describe("w1")
    assert info is not None
    assert info.status is WorkflowStatus.FAILED
    assert info.closed_at is not None


async def test_cancellation_interrupts_only_interruptible_activities() -> None:
    """A store write (non-interruptible) finishes; a tool (interruptible) is stopped and the
    workflow sees WorkflowCanceled, then can still run cleanup activities."""
    started = asyncio.Event()
    finished: list[str] = []

    async def tool(arg: str) -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            finished.append("tool interrupted")
            raise
        return arg

    async def write(arg: str) -> str:
        await asyncio.sleep(0.02)
        finished.append(arg)
        return arg

    async def workflow(ctx: WorkflowContext, arg: str) -> Any:
        try:
            await ctx.activity("tool", arg, str, interruptible=True)
        except WorkflowCanceled:
            assert ctx.cancel_requested()
            await ctx.activity("write", "cleanup", str)
            with pytest.raises(WorkflowCanceled):  # no new interruptible work once canceled
                await ctx.activity("tool", "again", str, interruptible=True)
            return "canceled"
        return "done"

    engine = _engine(workflow, tool=tool, write=write)
    await engine.start("w1", "x")
    await asyncio.wait_for(started.wait(), 60)
    assert await engine.cancel("w1")
    assert await engine.result("w1") == "canceled"
    assert finished == ["tool interrupted", "cleanup"]
    info = await engine.describe("w1")
    assert info is not None
    assert info.cancel_requested
    assert info.status is WorkflowStatus.COMPLETED
    assert not await engine.cancel("unknown")
    assert await engine.describe("unknown") is None


async def test_children_run_and_are_canceled_with_their_parent() -> None:
    """[O2] a child workflow's output returns to the parent; canceling the parent cancels the
    child, which closes on its own before the parent goes on."""
    child_running = asyncio.Event()
    log: list[str] = []

    async def wait(arg: str) -> str:
        child_running.set()
        await asyncio.sleep(60)
        return arg

    async def workflow(ctx: WorkflowContext, arg: str) -> Any:
        if arg.startswith("child"):
            try:
                return await ctx.activity("wait", arg, str, interruptible=True)
            except WorkflowCanceled:
                log.append(f"{ctx.workflow_id} canceled")
                return "child canceled"
        if arg == "boom":
            raise RuntimeError("child exploded")
        if arg == "parent-of-boom":
            try:
                await ctx.child("boom-1", "boom", str)
            except ChildFailedError as e:
                return e.reason
        try:
            return await ctx.child("c1", "child", str)
        except WorkflowCanceled:
            log.append("parent canceled")
            return "parent canceled"

    engine = _engine(workflow, wait=wait)
    await engine.start("p1", "parent")
    await asyncio.wait_for(child_running.wait(), 60)
    await engine.cancel("p1")
    assert await engine.result("p1") == "parent canceled"
    assert log == ["c1 canceled", "parent canceled"]
    assert await engine.result("c1") == "child canceled"
    await engine.start("p2", "parent-of-boom")
    assert await engine.result("p2") == "child exploded"


async def test_start_rules() -> None:
    """[O1] an engine must be bound once; a workflow id is started at most once."""

    async def workflow(ctx: WorkflowContext, arg: int) -> int:
        first, second = ctx.now(), ctx.now()
        assert second >= first
        assert first.microsecond % 1000 == 0
        return arg

    engine = InProcessEngine()
    with pytest.raises(ValidationError):
        await engine.start("w1", 1)
    engine.bind(workflow, {})
    with pytest.raises(ValidationError):
        engine.bind(workflow, {})
    await engine.start("w1", 1)
    with pytest.raises(ValidationError):
        await engine.start("w1", 1)
    assert await engine.result("w1") == 1
    await engine.close()
