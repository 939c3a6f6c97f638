"""How a client groups the calls made at the same moment, with a send function standing
in for the service (the service itself answers groups in test_batch.py)."""

from __future__ import annotations

import asyncio

import pytest

from agentledger.service.call_batches import MAX_GROUP, MAX_GROUP_BYTES, CallBatches, Member


class Service:
    """Answers each member with (200, its body, True); records the groups it was sent."""

    def __init__(self, *, fail: bool = False) -> None:
        self.groups: list[list[str]] = []
        self.fail = fail
        self.release = asyncio.Event()
        self.release.set()

    async def send(self, group: list[Member]) -> None:
        self.groups.append([m.item.name for m in group])
        await self.release.wait()
        if self.fail:
            raise RuntimeError("the send broke")
        for member in group:
            if not member.answer.done():
                member.answer.set_result((200, member.item.body, True))


async def _turns(count: int) -> None:
    """Let the event loop go round ``count`` times."""
    for _ in range(count):
        await asyncio.sleep(0)


async def test_calls_made_at_once_go_together_and_a_lone_call_goes_alone() -> None:
    service = Service()
    batches = CallBatches(service.send)
    answers = await asyncio.gather(*(batches.call(f"c{i}", b"%d" % i) for i in range(5)))
    assert service.groups == [["c0", "c1", "c2", "c3", "c4"]]
    assert answers == [(200, b"%d" % i, True) for i in range(5)]
    assert await batches.call("lone", b"x") is None  # sent alone by the caller
    assert len(service.groups) == 1


async def test_a_call_made_while_a_group_is_out_starts_the_next_group_at_once() -> None:
    service = Service()
    service.release.clear()
    batches = CallBatches(service.send)
    first = asyncio.gather(batches.call("a", b"1"), batches.call("b", b"2"))
    await _turns(5)  # the first group is out, not answered yet
    assert service.groups == [["a", "b"]]
    second = asyncio.gather(batches.call("c", b"3"), batches.call("d", b"4"))
    await _turns(5)
    assert service.groups == [["a", "b"], ["c", "d"]]  # the second did not wait
    service.release.set()
    assert [a[1] for a in await first + await second] == [b"1", b"2", b"3", b"4"]


async def test_a_caller_cancelled_before_its_group_leaves_is_left_out() -> None:
    service = Service()
    batches = CallBatches(service.send)
    calls = [asyncio.create_task(batches.call(f"c{i}", b"x")) for i in range(3)]
    await asyncio.sleep(0)  # each has joined; the first waits its loop turn
    calls[1].cancel()
    done = await asyncio.gather(*calls, return_exceptions=True)
    assert service.groups == [["c0", "c2"]]
    assert isinstance(done[1], asyncio.CancelledError)


async def test_the_group_leaves_when_the_caller_that_started_it_is_cancelled() -> None:
    service = Service()
    batches = CallBatches(service.send)
    calls = [asyncio.create_task(batches.call(f"c{i}", b"x")) for i in range(3)]
    await asyncio.sleep(0)
    calls[0].cancel()  # in its loop turn
    done = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(done[0], asyncio.CancelledError)
    assert service.groups == [["c1", "c2"]]
    assert done[1:] == [(200, b"x", True)] * 2


async def test_the_one_left_after_a_cancellation_goes_alone() -> None:
    service = Service()
    batches = CallBatches(service.send)
    calls = [asyncio.create_task(batches.call(f"c{i}", b"x")) for i in range(2)]
    await asyncio.sleep(0)
    calls[0].cancel()
    done = await asyncio.gather(*calls, return_exceptions=True)
    assert done[1] is None
    assert service.groups == []


async def test_groups_stop_at_the_service_limit_and_at_their_byte_cap() -> None:
    service = Service()
    batches = CallBatches(service.send)
    await asyncio.gather(*(batches.call("c", b"x") for _ in range(MAX_GROUP + 3)))
    assert [len(g) for g in service.groups] == [MAX_GROUP, 3]
    service.groups.clear()
    half = b"x" * (MAX_GROUP_BYTES // 2)
    await asyncio.gather(*(batches.call("big", half) for _ in range(3)))
    assert [len(g) for g in service.groups] == [2]  # the third went alone
    assert await batches.call("huge", b"x" * (MAX_GROUP_BYTES + 1)) is None


async def test_a_send_that_breaks_sends_each_member_alone() -> None:
    """Nothing waits forever: a member the send left unsettled is told to go alone."""
    service = Service(fail=True)
    batches = CallBatches(service.send)
    assert await asyncio.gather(*(batches.call("c", b"x") for _ in range(3))) == [None] * 3


@pytest.mark.parametrize("members", [2, 16])
async def test_every_member_hears_the_answer_to_its_own_call(members: int) -> None:
    service = Service()
    batches = CallBatches(service.send)
    bodies = [b"call %d" % i for i in range(members)]
    answers = await asyncio.gather(*(batches.call("c", body) for body in bodies))
    assert [a[1] for a in answers if a is not None] == bodies
