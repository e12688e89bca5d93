"""The readers of one reply on one replica share one follower of the Redis log
(``producer.redis_followers``), against a real server: log ``a`` generates, log ``b`` (the
other replica) reads. Fan-out to many readers on one connection, a late joiner and
resumes from any point, a slow reader that holds nobody back, the follower stopped when
its last reader leaves, a lapsed lease ending every reader ``generator_lost``, and the
bounds (``reply_log_busy``). Each test has its own key prefix."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from producer.redis_followers import READERS_CLIENT_NAME
from producer.redis_replylog import RedisReply, RedisReplyLog
from producer.replylog import Entry, LogEnded, LogLimits, ReaderLimits, ReplyKey
from shared.errors import Reason, RequestRefused
from tests.redis_server import RedisServer, redis_server

#: As tests/integration/test_redis_replylog.py: long enough for a busy machine.
LEASE_S = 1.2
#: A bounded wait for what must happen (never a measure).
PROMPTLY_S = 30.0
READERS = 50


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with redis_server() as running:
        yield running


def two(
    server: RedisServer, prefix: str, readers: ReaderLimits | None = None
) -> tuple[RedisReplyLog, RedisReplyLog]:
    limits = LogLimits(lease_s=LEASE_S)
    return (
        RedisReplyLog(server.url, limits, prefix=prefix),
        RedisReplyLog(server.url, limits, prefix=prefix, readers=readers),
    )


async def found(log: RedisReplyLog, key: ReplyKey) -> RedisReply:
    reply = await log.find(key)
    assert reply is not None
    return reply


async def read(reply: RedisReply, after: int = 0) -> tuple[list[tuple[int, bytes]], str | None]:
    seen: list[tuple[int, bytes]] = []
    try:
        async for entry in reply.read(after):
            seen.append((entry.sequence, entry.data))
    except LogEnded as ended:
        return seen, ended.reason.value
    return seen, None


async def reader_connections(log: RedisReplyLog) -> int:
    """Connections named as the readers' pool's, of every client of the server."""
    clients: list[dict[str, Any]] = await log.client.client_list()
    return sum(1 for c in clients if c.get("name") == READERS_CLIENT_NAME)


def frames(n: int) -> list[tuple[int, bytes]]:
    return [(s, b"frame-%d" % s) for s in range(1, n + 1)]


async def write(reply: RedisReply, sequences: range) -> None:
    for sequence in sequences:
        await reply.append(Entry(sequence, b"frame-%d" % sequence))


def test_many_readers_of_one_reply_share_one_follower_and_one_connection() -> None:
    async def scenario(server: RedisServer) -> None:
        a, b = two(server, "f1:")
        key = ReplyKey("alice", "s")
        reply = await a.create(key, "b", "lp")
        await write(reply, range(1, 3))
        readers = [asyncio.create_task(read(await found(b, key))) for _ in range(READERS)]
        await asyncio.sleep(0.1)
        assert (b.followers.active, b.followers.replies) == (1, 1)
        await write(reply, range(3, 6))
        await reply.end()
        ended = await asyncio.wait_for(asyncio.gather(*readers), PROMPTLY_S)
        assert ended == [(frames(5), None)] * READERS
        # One follower read for all fifty, on one connection of the readers' pool (a has
        # no reader: none of its own).
        assert await reader_connections(b) == 1
        assert (b.followers.active, b.followers.replies) == (0, 0)
        await a.aclose()
        await b.aclose()

    with redis_server() as own:  # its clients are these two logs' alone
        asyncio.run(scenario(own))


def test_a_late_joiner_and_resumes_from_any_point_get_exactly_what_follows(
    server: RedisServer,
) -> None:
    async def scenario() -> None:
        a, b = two(server, "f2:")
        key = ReplyKey("alice", "s")
        reply = await a.create(key, "b", "lp")
        first = asyncio.create_task(read(await found(b, key), 0))
        await write(reply, range(1, 5))
        await asyncio.sleep(0.1)
        # Joining once four frames were read: from the start, from the middle, past them.
        late = [asyncio.create_task(read(await found(b, key), after)) for after in (0, 2, 4, 6)]
        await write(reply, range(5, 8))
        await reply.end()
        assert await asyncio.wait_for(first, PROMPTLY_S) == (frames(7), None)
        results = await asyncio.wait_for(asyncio.gather(*late), PROMPTLY_S)
        assert results == [(frames(7), None), (frames(7)[2:], None), (frames(7)[4:], None),
                           (frames(7)[6:], None)]  # fmt: skip
        # Past the end of the ended reply: nothing, at once, as the memory log's read.
        assert await read(await found(b, key), 9) == ([], None)
        await a.aclose()
        await b.aclose()

    asyncio.run(scenario())


def test_a_slow_reader_holds_nobody_back_and_gets_every_frame(server: RedisServer) -> None:
    async def scenario() -> None:
        a, b = two(server, "f3:")
        key = ReplyKey("alice", "s")
        reply = await a.create(key, "b", "lp")
        slow = (await found(b, key)).read(0)
        fast = [asyncio.create_task(read(await found(b, key))) for _ in range(3)]
        await write(reply, range(1, 2))
        assert (await anext(slow)).sequence == 1  # then it reads nothing for a while
        await write(reply, range(2, 11))
        await reply.end()
        assert await asyncio.wait_for(asyncio.gather(*fast), PROMPTLY_S) == [(frames(10), None)] * 3
        rest = [(entry.sequence, entry.data) async for entry in slow]
        assert rest == frames(10)[1:]
        await a.aclose()
        await b.aclose()

    asyncio.run(scenario())


def test_the_follower_stops_when_its_last_reader_leaves(server: RedisServer) -> None:
    async def scenario() -> None:
        a, b = two(server, "f4:")
        key = ReplyKey("alice", "s")
        reply = await a.create(key, "b", "lp")
        await write(reply, range(1, 3))
        readers = [asyncio.create_task(read(await found(b, key))) for _ in range(5)]
        await asyncio.sleep(0.1)
        assert (b.followers.active, b.followers.replies) == (1, 1)
        for task in readers[:4]:
            task.cancel()
        await asyncio.sleep(0.05)
        assert (b.followers.active, b.followers.replies) == (1, 1)  # one reader is left
        readers[4].cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        for _ in range(100):  # the follower's task ends once its blocked read is cancelled
            if not b.followers.active:
                break
            await asyncio.sleep(0.01)
        assert (b.followers.active, b.followers.replies) == (0, 0)
        # A new reader starts a new follower and reads the whole reply.
        late = asyncio.create_task(read(await found(b, key)))
        await write(reply, range(3, 4))
        await reply.end()
        assert await asyncio.wait_for(late, PROMPTLY_S) == (frames(3), None)
        await a.aclose()
        await b.aclose()

    asyncio.run(scenario())


def test_a_lapsed_lease_ends_every_reader_generator_lost(server: RedisServer) -> None:
    async def scenario() -> None:
        a, b = two(server, "f5:")
        key = ReplyKey("alice", "s")
        reply = await a.create(key, "b", "lp")
        await write(reply, range(1, 3))
        readers = [asyncio.create_task(read(await found(b, key), n % 3)) for n in range(10)]
        await asyncio.sleep(0.1)
        assert reply._refresher is not None
        reply._refresher.cancel()  # as a killed process: no refresh, no end
        ended = await asyncio.wait_for(asyncio.gather(*readers), PROMPTLY_S)
        lost = Reason.GENERATOR_LOST.value
        assert ended == [(frames(2)[n % 3 :], lost) for n in range(10)]
        # A reader that comes afterwards hears the same, from a follower of its own.
        assert await read(await found(b, key)) == (frames(2), lost)
        await a.aclose()
        await b.aclose()

    asyncio.run(scenario())


def test_past_the_bounds_a_new_reply_is_refused_reply_log_busy_and_readers_of_one_never(
    server: RedisServer,
) -> None:
    async def scenario() -> None:
        a, b = two(server, "f6:", ReaderLimits(replies=2, per_identity=1))
        alice, alice2 = ReplyKey("alice", "s"), ReplyKey("alice", "t")
        bob, carol = ReplyKey("bob", "s"), ReplyKey("carol", "s")
        held = [b.hold_reader(alice) for _ in range(3)]  # one reply: read once
        with pytest.raises(RequestRefused) as refused:
            b.hold_reader(alice2)  # alice's one reply is her share
        assert refused.value.reason is Reason.REPLY_LOG_BUSY
        held.append(b.hold_reader(bob))
        with pytest.raises(RequestRefused) as full:
            b.hold_reader(carol)  # two replies: every connection
        assert full.value.reason is Reason.REPLY_LOG_BUSY
        assert b.followers.replies == 2
        # A read itself is admitted the same way: refused before anything is read.
        reply = await a.create(carol, "b", "lp")
        await write(reply, range(1, 2))
        await reply.end()
        assert await read(await found(b, carol)) == ([], Reason.REPLY_LOG_BUSY.value)
        for release in held:
            release()
            release()  # idempotent
        assert b.followers.replies == 0
        assert await read(await found(b, carol)) == (frames(1), None)
        await a.aclose()
        await b.aclose()

    asyncio.run(scenario())
