"""The in-process reply log: following readers, bounds, TTL, and the detach grace."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from producer.replylog import (
    Entries,
    Entry,
    Generation,
    LogEnded,
    LogLimits,
    MemoryReply,
    MemoryReplyLog,
)
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


@pytest.mark.parametrize(
    ("limits", "kept", "error"),
    [
        (LogLimits(max_frames=3), [1, 2, 3], None),  # at the frame bound
        (LogLimits(max_frames=2), [1, 2], Reason.INTERNAL_ERROR.value),  # past it
        (LogLimits(max_bytes=6), [1, 2, 3], None),  # at the byte bound (3 x 2 bytes)
        (LogLimits(max_bytes=5), [1, 2], Reason.INTERNAL_ERROR.value),  # past it
    ],
)
@pytest.mark.parametrize("made", [tuple, Entries.of], ids=["tuple", "entries-made-in-advance"])
def test_extend_logs_a_known_reply_as_appends_would(
    limits: LogLimits, kept: list[int], error: str | None, made: Callable[..., tuple[Entry, ...]]
) -> None:
    async def scenario() -> None:
        entries = made([Entry(sequence, b"xy") for sequence in (1, 2, 3)])
        one_by_one = await MemoryReplyLog(limits).create("s", "b", "lp")
        for entry in entries:
            if not one_by_one.ended:
                await one_by_one.append(entry)
        now = await MemoryReplyLog(limits).create("s", "b", "lp")
        assert now.log_now(entries)  # nobody reads it yet: logged and ended in one call
        generated = await MemoryReplyLog(limits).create("s", "b", "lp")
        generation = Generation(generated, entries, grace_s=60)
        assert generation.task.done() and not isinstance(generation.task, asyncio.Task)
        at_once = await MemoryReplyLog(limits).create("s", "b", "lp")
        waiting = asyncio.create_task(
            _sequences(at_once)  # a reader already waiting is woken once, with all of them
        )
        await asyncio.sleep(0)
        await at_once.extend(entries)
        if error is None:
            await at_once.end()
        for reply in (one_by_one, at_once, now, generated):
            assert [entry.sequence for entry in reply.entries] == kept
            assert reply.size == 2 * len(kept)
            assert reply.error == error
        assert at_once.ended and now.ended and generated.ended
        assert await waiting == kept == await _sequences(now)
        assert not generation.stop(Reason.CONSUMER_CANCELLED)  # it had ended

    asyncio.run(scenario())


async def _sequences(reply: MemoryReply) -> list[int]:
    seen: list[int] = []
    try:
        async for entry in reply.read(0):
            seen.append(entry.sequence)
    except LogEnded:
        pass
    return seen


def test_extend_refuses_a_gap_in_the_sequences_and_an_ended_reply() -> None:
    async def scenario() -> None:
        reply = await MemoryReplyLog().create("s", "b", "lp")
        with pytest.raises(ValueError, match="sequence 2, expected 1"):
            await reply.extend((Entry(2, b"x"),))
        assert reply.entries == []
        await reply.extend((Entry(1, b"x"),))
        await reply.end()
        with pytest.raises(RuntimeError, match="already ended"):
            await reply.extend((Entry(2, b"x"),))
        with pytest.raises(RuntimeError, match="being logged already"):
            reply.log_now((Entry(2, b"x"),))
        fresh = await MemoryReplyLog().create("t", "b", "lp")
        for gap in ((Entry(2, b"x"),), Entries.of([Entry(1, b"x"), Entry(3, b"x")])):
            with pytest.raises(ValueError, match=r"sequence (2, expected 1|3, expected 2)"):
                fresh.log_now(gap)  # not numbered 1, 2, ...: looked at entry by entry
            assert fresh.entries == [] and not fresh.ended

    asyncio.run(scenario())
