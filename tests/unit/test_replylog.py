"""The in-process reply log: following readers, bounds, TTL, keys by identity."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import pytest

from replywire.producer.generation import Generation
from replywire.producer.replylog.interface import (
    Entries,
    Entry,
    LogEnded,
    LogLimits,
    ReplyKey,
    ReplyLogFailed,
)
from replywire.producer.replylog.memory import MemoryReply, MemoryReplyLog
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason


def key(stream_id: str, identity: str = "anonymous") -> ReplyKey:
    return ReplyKey(identity, stream_id)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def read_all(log: MemoryReplyLog, stream_id: str, after: int) -> list[int]:
    reply = await log.find(key(stream_id))
    if reply is None:
        return []
    return [entry.sequence async for entry in reply.read(after)]


def test_a_reader_follows_the_log_from_a_sequence_until_it_ends() -> None:
    async def scenario() -> tuple[list[int], list[int]]:
        log = MemoryReplyLog()
        reply = await log.create(key("s"), "b" * 64, "lp")
        early = asyncio.create_task(read_all(log, "s", 0))
        for sequence in (1, 2, 3):
            await reply.append(Entry(sequence, b"x"))
            await asyncio.sleep(0)
        await reply.end()
        return await early, await read_all(log, "s", 2)

    assert asyncio.run(scenario()) == ([1, 2, 3], [3])


def test_over_a_bound_the_reply_ends_reply_log_limit_and_the_write_fails() -> None:
    async def scenario() -> None:
        log = MemoryReplyLog(LogLimits(max_frames=2))
        reply = await log.create(key("s"), "b", "lp")
        for sequence in (1, 2):
            await reply.append(Entry(sequence, b"x"))
        with pytest.raises(ReplyLogFailed) as failed:
            await reply.append(Entry(3, b"x"))
        assert failed.value.reason is Reason.REPLY_LOG_LIMIT
        with pytest.raises(LogEnded) as ended:
            await read_all(log, "s", 0)
        assert ended.value.reason == Reason.REPLY_LOG_LIMIT.value
        bytes_log = MemoryReplyLog(LogLimits(max_bytes=3))
        big = await bytes_log.create(key("t"), "b", "lp")
        with pytest.raises(ReplyLogFailed):
            await big.append(Entry(1, b"xxxx"))
        assert big.error == Reason.REPLY_LOG_LIMIT.value and big.entries == []

    asyncio.run(scenario())


def test_a_read_from_at_or_past_the_end_of_an_ended_reply_ends_at_once() -> None:
    async def scenario() -> None:
        log = MemoryReplyLog()
        reply = await log.create(key("s"), "b", "lp")
        await reply.extend([Entry(1, b"x"), Entry(2, b"y")])
        await reply.end()
        for after in (2, 3, 2**64 - 1):
            assert await asyncio.wait_for(read_all(log, "s", after), 5) == []
        failed = await log.create(key("f"), "b", "lp")
        await failed.append(Entry(1, b"x"))
        await failed.end(Reason.GENERATOR_LOST.value)
        for after in (1, 2, 2**64 - 1):
            with pytest.raises(LogEnded, match="generator_lost"):
                await asyncio.wait_for(read_all(log, "f", after), 5)

    asyncio.run(scenario())


def test_the_same_stream_id_under_two_identities_is_two_replies() -> None:
    async def scenario() -> None:
        log = MemoryReplyLog()
        alice = await log.create(key("s", "alice"), "b" * 64, "lp")
        assert await log.find(key("s", "bob")) is None
        bob = await log.create(key("s", "bob"), "c" * 64, "ndjson")  # not busy: another reply
        await alice.extend([Entry(1, b"a")])
        await alice.end()
        await bob.extend([Entry(1, b"b"), Entry(2, b"b")])
        await bob.end()
        assert await read_all(log, "s", 0) == []  # anonymous: a third, unused name
        found_alice, found_bob = await log.find(key("s", "alice")), await log.find(key("s", "bob"))
        assert found_alice is alice and found_bob is bob
        assert (alice.frames, bob.frames) == (1, 2)
        assert [e.data async for e in bob.read(0)] == [b"b", b"b"]

    asyncio.run(scenario())


def test_ended_replies_expire_and_make_room() -> None:
    async def scenario() -> None:
        clock = Clock()
        log = MemoryReplyLog(LogLimits(max_replies=1, ttl_s=10), clock=clock)
        first = await log.create(key("a"), "b", "lp")
        with pytest.raises(RequestRefused) as refused:
            await log.create(key("b"), "b", "lp")  # the one kept is still being generated
        assert refused.value.reason is Reason.STREAM_LIMIT
        await first.end()
        await log.create(key("b"), "b", "lp")  # the ended one makes room
        assert await log.find(key("a")) is None
        second = await log.find(key("b"))
        assert second is not None
        await second.end()
        clock.now = 10.0
        assert await log.find(key("b")) is None and len(log) == 0

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("limits", "kept", "error"),
    [
        (LogLimits(max_frames=3), [1, 2, 3], None),  # at the frame bound
        (LogLimits(max_frames=2), [1, 2], Reason.REPLY_LOG_LIMIT.value),  # past it
        (LogLimits(max_bytes=6), [1, 2, 3], None),  # at the byte bound (3 x 2 bytes)
        (LogLimits(max_bytes=5), [1, 2], Reason.REPLY_LOG_LIMIT.value),  # past it
    ],
)
@pytest.mark.parametrize("made", [tuple, Entries.of], ids=["tuple", "entries-made-in-advance"])
def test_extend_logs_a_known_reply_as_appends_would(
    limits: LogLimits, kept: list[int], error: str | None, made: Callable[..., tuple[Entry, ...]]
) -> None:
    async def scenario() -> None:
        entries = made([Entry(sequence, b"xy") for sequence in (1, 2, 3)])
        one_by_one = await MemoryReplyLog(limits).create(key("s"), "b", "lp")
        for entry in entries:
            if not one_by_one.ended:
                with contextlib.suppress(ReplyLogFailed):  # over a bound: ended so
                    await one_by_one.append(entry)
        now = await MemoryReplyLog(limits).create(key("s"), "b", "lp")
        assert now.log_now(entries)  # nobody reads it yet: logged and ended in one call
        generated = await MemoryReplyLog(limits).create(key("s"), "b", "lp")
        generation = Generation(generated, entries, grace_s=60)
        assert generation.task.done() and not isinstance(generation.task, asyncio.Task)
        at_once = await MemoryReplyLog(limits).create(key("s"), "b", "lp")
        waiting = asyncio.create_task(
            _sequences(at_once)  # a reader already waiting is woken once, with all of them
        )
        await asyncio.sleep(0)
        try:
            await at_once.extend(entries)
        except ReplyLogFailed as failed:
            assert failed.reason.value == error
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
        reply = await MemoryReplyLog().create(key("s"), "b", "lp")
        with pytest.raises(ValueError, match="sequence 2, expected 1"):
            await reply.extend((Entry(2, b"x"),))
        assert reply.entries == []
        await reply.extend((Entry(1, b"x"),))
        await reply.end()
        with pytest.raises(RuntimeError, match="already ended"):
            await reply.extend((Entry(2, b"x"),))
        with pytest.raises(RuntimeError, match="being logged already"):
            reply.log_now((Entry(2, b"x"),))
        fresh = await MemoryReplyLog().create(key("t"), "b", "lp")
        for gap in ((Entry(2, b"x"),), Entries.of([Entry(1, b"x"), Entry(3, b"x")])):
            with pytest.raises(ValueError, match=r"sequence (2, expected 1|3, expected 2)"):
                fresh.log_now(gap)  # not numbered 1, 2, ...: looked at entry by entry
            assert fresh.entries == [] and not fresh.ended

    asyncio.run(scenario())
