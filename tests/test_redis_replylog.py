"""The reply log in Redis Streams against a real server (tests/redis_server.py): two log
instances stand for two replicas; a reader follows the log to its end, a generator that
goes silent ends its readers ``generator_lost`` within its lease, and another replica
may then generate the reply anew. Each test has its own key prefix."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from producer.redis_replylog import MAX_CANCEL_REQUESTS, RedisReply, RedisReplyLog
from producer.replylog import Entry, LogEnded, LogLimits, ReplyBusy
from shared.errors import Reason
from tests.redis_server import RedisServer, redis_server

LEASE_S = 0.4


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with redis_server() as running:
        yield running


def replicas(
    server: RedisServer, prefix: str, **limits: float
) -> tuple[RedisReplyLog, RedisReplyLog]:
    shared = LogLimits(lease_s=LEASE_S, **limits)  # type: ignore[arg-type]
    return (
        RedisReplyLog(server.url, shared, prefix=prefix),
        RedisReplyLog(server.url, shared, prefix=prefix),
    )


async def read_all(log: RedisReplyLog, stream_id: str, after: int) -> list[tuple[int, bytes]]:
    reply = await log.find(stream_id)
    assert reply is not None
    return [(entry.sequence, entry.data) async for entry in reply.read(after)]


async def close(*logs: RedisReplyLog) -> None:
    for log in logs:
        await log.aclose()


def test_a_reader_on_another_replica_follows_the_log_until_it_ends(server: RedisServer) -> None:
    async def scenario() -> None:
        a, b = replicas(server, "t1:")
        reply = await a.create("s", "b" * 64, "lp")
        assert not reply.log_now((Entry(1, b"x"),))  # each entry is a command: never at once
        early = asyncio.create_task(read_all(b, "s", 0))
        for sequence in (1, 2, 3):
            await reply.append(Entry(sequence, bytes([sequence]) * 3))
            await asyncio.sleep(0.01)
        await reply.end()
        assert await early == [(1, b"\1" * 3), (2, b"\2" * 3), (3, b"\3" * 3)]
        assert [s for s, _ in await read_all(b, "s", 2)] == [3]
        found = await b.find("s")
        assert found is not None
        assert (found.binding_sha256, found.wire, found.error) == ("b" * 64, "lp", None)
        with pytest.raises(ReplyBusy):  # a complete reply is never generated again
            await b.create("s", "b" * 64, "lp")
        assert await b.find("unknown") is None
        await close(a, b)

    asyncio.run(scenario())


def test_an_error_ending_and_the_bounds(server: RedisServer) -> None:
    async def scenario() -> None:
        a, b = replicas(server, "t2:", max_frames=2, ttl_s=30)
        reply = await a.create("s", "b", "lp")
        for sequence in (1, 2, 3):
            await reply.append(Entry(sequence, b"x"))
        with pytest.raises(LogEnded) as ended:
            await read_all(b, "s", 0)
        assert ended.value.reason == Reason.INTERNAL_ERROR.value
        big = await a.create("t", "b", "lp")
        await big.append(Entry(1, b"x" * ((4 << 20) + 1)))  # over the default byte bound
        found = await b.find("t")
        assert found is not None and found.error == Reason.INTERNAL_ERROR.value
        # Ended: its keys expire ttl_s after the end, its lease is gone.
        lease, log_key, meta, _ = a.keys("s")
        for key in (log_key, meta):
            assert 0 < await a.client.pttl(key) <= 30_000
        assert not await a.client.exists(lease)
        await close(a, b)

    asyncio.run(scenario())


def test_a_silent_generator_ends_its_readers_generator_lost_within_its_lease(
    server: RedisServer,
) -> None:
    async def scenario() -> None:
        a, b = replicas(server, "t3:")
        reply = await a.create("s", "b", "lp")
        await reply.append(Entry(1, b"one"))
        await asyncio.sleep(LEASE_S)  # refreshed meanwhile: readers go on waiting
        await reply.append(Entry(2, b"two"))
        reader = asyncio.create_task(read_until_lost(b, "s"))
        await asyncio.sleep(0.05)
        silenced = time.monotonic()
        assert reply._refresher is not None
        reply._refresher.cancel()  # as a killed process: no refresh, no end
        assert await reader == ([1, 2], Reason.GENERATOR_LOST.value)
        assert time.monotonic() - silenced <= LEASE_S * 1.25 + 0.2
        found = await b.find("s")
        assert found is not None and found.error == Reason.GENERATOR_LOST.value
        # The partial content is kept for readers (until it expires).
        assert await read_until_lost(a, "s") == ([1, 2], Reason.GENERATOR_LOST.value)
        # Another replica may generate it anew; the silent one can write no more.
        again = await b.create("s", "b", "lp")
        with pytest.raises(RuntimeError):
            await reply.append(Entry(3, b"three"))
        for sequence in (1, 2, 3):
            await again.append(Entry(sequence, b"%d" % sequence))
        await again.end()
        assert [s for s, _ in await read_all(a, "s", 1)] == [2, 3]
        await close(a, b)

    asyncio.run(scenario())


async def read_until_lost(log: RedisReplyLog, stream_id: str) -> tuple[list[int], str | None]:
    reply = await log.find(stream_id)
    assert reply is not None
    seen: list[int] = []
    try:
        async for entry in reply.read(0):
            seen.append(entry.sequence)
    except LogEnded as ended:
        return seen, ended.reason
    return seen, None


def test_two_replicas_creating_one_reply_at_once_one_generates(server: RedisServer) -> None:
    async def scenario() -> None:
        a, b = replicas(server, "t4:")
        outcomes = await asyncio.gather(
            a.create("s", "b", "lp"), b.create("s", "b", "lp"), return_exceptions=True
        )
        assert sorted(type(o).__name__ for o in outcomes) == ["RedisReply", "ReplyBusy"]
        for outcome in outcomes:
            if isinstance(outcome, RedisReply):
                await outcome.end()
        await close(a, b)

    asyncio.run(scenario())


def test_a_cancel_relayed_by_another_replica_reaches_the_generator_at_once(
    server: RedisServer,
) -> None:
    """b relays two callers' Cancel while a generates: a's watcher hears each at once (long
    before a lease refresh would), in order; b is answered ``True`` once the reply ended
    ``consumer_cancelled``, ``False`` when it did not end in time, or when nothing is
    generated. A new generation of the stream id does not inherit a stale request."""
    lease_s = 30.0  # the watcher waits up to 10 s between refreshes: a prompt hear is BLPOP's

    async def scenario() -> None:
        shared = LogLimits(lease_s=lease_s)
        a = RedisReplyLog(server.url, shared, prefix="t-cancel:")
        b = RedisReplyLog(server.url, shared, prefix="t-cancel:")
        assert await b.request_cancel("s", "alice", 0.1) is False  # nothing generated
        reply = await a.create("s", "b" * 64, "lp")
        heard: asyncio.Queue[str] = asyncio.Queue()
        reply.watch_cancel(heard.put_nowait)
        await reply.append(Entry(1, b"x"))
        assert await b.request_cancel("s", "mallory", 0.2) is False  # not stopped in time
        assert await asyncio.wait_for(heard.get(), 5) == "mallory"
        relayed = asyncio.create_task(b.request_cancel("s", "alice", 5))
        assert await asyncio.wait_for(heard.get(), 5) == "alice"
        await reply.end(Reason.CONSUMER_CANCELLED.value)
        assert await relayed is True
        assert await b.request_cancel("s", "alice", 0.1) is False  # ended: no generator
        # Bounded: a flood of relays keeps only the newest requests.
        flooded = await a.create("f", "b" * 64, "lp")
        for index in range(MAX_CANCEL_REQUESTS + 5):
            assert await b.request_cancel("f", f"c{index}", 0) is False
        queued = await a.client.lrange(a.keys("f")[3], 0, -1)
        assert [q.decode() for q in queued] == [f"c{i}" for i in range(5, MAX_CANCEL_REQUESTS + 5)]
        await flooded.end()
        # A stale request left by a relay that came just before the reply ended...
        await a.client.rpush(a.keys("s")[3], "stale")
        again = await a.create("s", "b" * 64, "lp")  # (after an error: generated again)
        heard_again: asyncio.Queue[str] = asyncio.Queue()
        again.watch_cancel(heard_again.put_nowait)
        assert await a.client.llen(a.keys("s")[3]) == 0
        await again.end()
        assert heard_again.empty()
        await close(a, b)

    asyncio.run(asyncio.wait_for(scenario(), 60))
