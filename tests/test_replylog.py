"""The in-process reply log: following readers, bounds, TTL, and the detach grace."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from producer.replylog import Entry, Generation, LogEnded, LogLimits, MemoryReplyLog
from shared.errors import Reason, RequestRefused


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def read_all(log: MemoryReplyLog, stream_id: str, after: int) -> list[int]:
    reply = await log.find(stream_id)
    assert reply is not None
    return [entry.sequence async for entry in reply.read(after)]


def test_a_reader_follows_the_log_from_a_sequence_until_it_ends() -> None:
    async def scenario() -> tuple[list[int], list[int]]:
        log = MemoryReplyLog()
        reply = await log.create("s", "b" * 64, "lp")
        early = asyncio.create_task(read_all(log, "s", 0))
        for sequence in (1, 2, 3):
            await reply.append(Entry(sequence, b"x"))
            await asyncio.sleep(0)
        await reply.end()
        return await early, await read_all(log, "s", 2)

    assert asyncio.run(scenario()) == ([1, 2, 3], [3])


def test_over_a_bound_the_reply_ends_internal_error() -> None:
    async def scenario() -> None:
        log = MemoryReplyLog(LogLimits(max_frames=2))
        reply = await log.create("s", "b", "lp")
        for sequence in (1, 2, 3):
            await reply.append(Entry(sequence, b"x"))
        with pytest.raises(LogEnded) as ended:
            await read_all(log, "s", 0)
        assert ended.value.reason == Reason.INTERNAL_ERROR.value
        bytes_log = MemoryReplyLog(LogLimits(max_bytes=3))
        big = await bytes_log.create("t", "b", "lp")
        await big.append(Entry(1, b"xxxx"))
        assert big.error == Reason.INTERNAL_ERROR.value and big.entries == []

    asyncio.run(scenario())


def test_ended_replies_expire_and_make_room() -> None:
    async def scenario() -> None:
        clock = Clock()
        log = MemoryReplyLog(LogLimits(max_replies=1, ttl_s=10), clock=clock)
        first = await log.create("a", "b", "lp")
        with pytest.raises(RequestRefused) as refused:
            await log.create("b", "b", "lp")  # the one kept is still being generated
        assert refused.value.reason is Reason.STREAM_LIMIT
        await first.end()
        await log.create("b", "b", "lp")  # the ended one makes room
        assert await log.find("a") is None
        second = await log.find("b")
        assert second is not None
        await second.end()
        clock.now = 10.0
        assert await log.find("b") is None and len(log) == 0

    asyncio.run(scenario())


def test_generation_goes_on_for_the_grace_then_ends_reply_abandoned() -> None:
    async def scenario() -> tuple[list[int], str | None, bool]:
        closed = asyncio.Event()
        gate = asyncio.Event()

        async def frames() -> AsyncIterator[Entry]:
            yield Entry(1, b"x")
            await gate.wait()  # a model that is still thinking
            yield Entry(2, b"y")

        async def on_abandoned() -> None:
            closed.set()

        log = MemoryReplyLog()
        reply = await log.create("s", "b", "lp")
        generation = Generation(reply, frames(), grace_s=0.05, on_abandoned=on_abandoned)
        assert generation.attach() == 1
        generation.detach()  # the consumer is gone; a resume within the grace attaches
        assert generation.attach() == 2
        generation.detach()
        await asyncio.wait_for(closed.wait(), 5)
        sequences = [entry.sequence for entry in reply.entries]
        return sequences, reply.error, generation.task.cancelled()

    assert asyncio.run(scenario()) == ([1], Reason.REPLY_ABANDONED.value, True)


@pytest.mark.parametrize("reason", [Reason.CONSUMER_CANCELLED, Reason.PRODUCER_SHUTDOWN])
def test_a_stopped_generation_ends_the_log_with_the_reason_it_was_stopped_for(
    reason: Reason,
) -> None:
    async def scenario() -> tuple[bool, str | None, bool, bool]:
        gate = asyncio.Event()

        async def frames() -> AsyncIterator[Entry]:
            yield Entry(1, b"x")
            await gate.wait()
            yield Entry(2, b"y")

        log = MemoryReplyLog()
        reply = await log.create("s", "b", "lp")
        generation = Generation(reply, frames(), grace_s=60)
        generation.attach()
        await asyncio.sleep(0)
        stopped = generation.stop(reason)
        again = generation.stop(Reason.REPLY_ABANDONED)  # the first reason stays
        await asyncio.gather(generation.task, return_exceptions=True)
        late = generation.stop(reason)  # ended: nothing to stop
        return stopped, reply.error, again, late

    assert asyncio.run(scenario()) == (True, reason.value, True, False)
