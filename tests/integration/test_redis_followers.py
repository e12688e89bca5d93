"""The readers of one reply on one replica share one follower of the Redis log
(``producer.replylog.followers``), against a real server: log ``a`` generates, log ``b`` (the
other replica) reads. Fan-out to many readers on one connection, a late joiner and
resumes from any point, a slow reader that holds nobody back, the follower stopped when
its last reader leaves, a lapsed lease ending every reader ``generator_lost``, and the
bounds (``reply_log_busy``). Followers and generations wait on the one pub/sub connection
of their replica (``producer.replylog.notify``), never on a pooled one: many distinct replies
and many generations at once, a lost notification covered by the follower's own poll, the
pub/sub connection killed (the listener subscribes again), a relayed ``Cancel`` heard
through it. Each test has its own key prefix."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from redis.exceptions import MaxConnectionsError

from replywire.producer.replylog.followers import READERS_CLIENT_NAME
from replywire.producer.replylog.interface import (
    Entry,
    LogEnded,
    LogLimits,
    ReaderLimits,
    ReplyKey,
    ReplyLogFailed,
)
from replywire.producer.replylog.notify import NOTIFY_CLIENT_NAME
from replywire.producer.replylog.redis_log import LOOKUP_CONNECTIONS, WRITERS_NAME, RedisReplyLog
from replywire.producer.replylog.redis_reply import RedisReply
from replywire.shared.errors import RequestRefused
from replywire.shared.reasons import Reason
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
    server: RedisServer,
    prefix: str,
    readers: ReaderLimits | None = None,
    lease_s: float = LEASE_S,
) -> tuple[RedisReplyLog, RedisReplyLog]:
    limits = LogLimits(lease_s=lease_s)
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


async def clients(log: RedisReplyLog) -> list[dict[str, Any]]:
    """Every client of the server but the one asking (``CLIENT LIST``)."""
    listed: list[dict[str, Any]] = await log.client.client_list()
    return [c for c in listed if not c.get("cmd", "").startswith("client")]


async def until(predicate: Any, what: str) -> None:
    """Wait (bounded, never a measure) for an async predicate to hold."""
    for _ in range(int(PROMPTLY_S / 0.02)):
        if await predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not within {PROMPTLY_S} s: {what}")


def test_many_distinct_replies_share_one_pubsub_connection_holding_none_while_waiting() -> None:
    """300 distinct live replies read at once on one replica (past the readers' pool of 8):
    every one complete, and no follower holds a connection while it waits: the one
    pub/sub connection carries all 300 subscriptions, nothing is blocked in Redis."""
    count = 300

    async def scenario(server: RedisServer) -> None:
        # 300 generators each refresh a lease: a long one, so that a machine busy enough to
        # starve the loop for a second does not lose one (no lease is under test here).
        a, b = two(server, "f7:", ReaderLimits(connections=8, per_identity=count), lease_s=30.0)
        keys = [ReplyKey("alice", f"s{n}") for n in range(count)]
        replies = [await a.create(key, "b", "lp") for key in keys]
        for reply in replies:
            await write(reply, range(1, 2))
        readers = [asyncio.create_task(read(await found(b, key))) for key in keys]
        await until(lambda: _all_subscribed(b, count), "every follower subscribed")
        listed = await clients(b)
        notify = [c for c in listed if c.get("name") == NOTIFY_CLIENT_NAME]
        assert [int(c["sub"]) for c in notify] == [count]  # b's one (a generates: none)
        assert not [c for c in listed if "b" in c.get("flags", "")]  # nobody blocked
        named = [c.get("name") for c in listed]
        assert named.count(READERS_CLIENT_NAME) <= 8
        assert named.count(WRITERS_NAME) <= 32 * 2
        for reply in replies:
            await write(reply, range(2, 4))
            await reply.end()
        ended = await asyncio.wait_for(asyncio.gather(*readers), PROMPTLY_S)
        assert ended == [(frames(3), None)] * count
        assert (b.followers.active, b.followers.replies) == (0, 0)
        # Every follower gone, every channel left: none kept subscribed.
        await until(lambda: _all_subscribed(b, 0), "every channel left")
        await a.aclose()
        await b.aclose()

    with redis_server() as own:  # its clients are these two logs' alone
        asyncio.run(scenario(own))


async def _all_subscribed(log: RedisReplyLog, count: int) -> bool:
    return log.notifier.channels == count and all(
        int(c["sub"]) == count for c in await clients(log) if c.get("name") == NOTIFY_CLIENT_NAME
    )


def test_many_live_generations_hold_no_writer_connection_and_another_reply_is_written() -> None:
    """150 live generations watching for a relayed ``Cancel`` on one replica, whose writers'
    pool holds 4 connections: none holds one while it waits (the pub/sub connection
    carries their cancels channels), so another caller's reply is written and read."""
    count = 150

    async def scenario(server: RedisServer) -> None:
        limits = LogLimits(lease_s=LEASE_S)
        a = RedisReplyLog(server.url, limits, prefix="f8:",
                          readers=ReaderLimits(writer_connections=4))  # fmt: skip
        b = RedisReplyLog(server.url, limits, prefix="f8:")
        replies = [await a.create(ReplyKey("alice", f"s{n}"), "b", "lp") for n in range(count)]
        for reply in replies:
            reply.watch_cancel(lambda caller, traceparent: None)
        await until(lambda: _all_subscribed(a, count), "every generation subscribed")
        assert not [c for c in await clients(a) if "b" in c.get("flags", "")]
        bob = ReplyKey("bob", "own")
        other = await a.create(bob, "b", "lp")
        reader = asyncio.create_task(read(await found(b, bob)))
        await write(other, range(1, 4))
        await other.end()
        assert await asyncio.wait_for(reader, PROMPTLY_S) == (frames(3), None)
        named = [c.get("name") for c in await clients(a)]
        assert named.count(WRITERS_NAME) <= 4
        assert named.count("replywire-lookups") <= LOOKUP_CONNECTIONS * 2
        for reply in replies:
            await reply.end()
        await until(lambda: _all_subscribed(a, 0), "every cancels channel left")
        await a.aclose()
        await b.aclose()

    with redis_server() as own:
        asyncio.run(scenario(own))


def test_a_lost_notification_is_covered_by_the_followers_own_poll(server: RedisServer) -> None:
    """Entries written with no notification (a raw ``XADD``, as a writer that publishes
    nothing) still reach every reader: the follower looks on its own every quarter lease."""

    async def scenario() -> None:
        a, b = two(server, "f9:")
        key = ReplyKey("alice", "s")
        reply = await a.create(key, "b", "lp")
        readers = [asyncio.create_task(read(await found(b, key))) for _ in range(3)]
        await until(lambda: _all_subscribed(b, 1), "the follower subscribed")
        lease, log_key, _, _ = a.keys(key)
        assert reply._refresher is not None
        reply._refresher.cancel()  # the raw writes below stand for the generator
        await a.client.xadd(log_key, {"d": b"frame-1"}, id="0-1")
        await a.client.xadd(log_key, {"e": ""}, id="0-2")
        await a.client.delete(lease)
        assert (
            await asyncio.wait_for(asyncio.gather(*readers), PROMPTLY_S) == [(frames(1), None)] * 3
        )
        await a.aclose()
        await b.aclose()

    asyncio.run(scenario())


def test_a_killed_pubsub_connection_is_resubscribed_and_readers_complete() -> None:
    async def scenario(server: RedisServer) -> None:
        a, b = two(server, "f10:")
        key = ReplyKey("alice", "s")
        reply = await a.create(key, "b", "lp")
        await write(reply, range(1, 3))
        readers = [asyncio.create_task(read(await found(b, key), n)) for n in range(3)]
        await until(lambda: _all_subscribed(b, 1), "the follower subscribed")
        assert await a.client.client_kill_filter(_type="pubsub") == 1
        await write(reply, range(3, 5))
        # The listener reconnects (bounded backoff) and subscribes again, on one connection.
        await until(lambda: _resubscribed(b), "the listener subscribed again")
        assert b.notifier.outages == 1
        await write(reply, range(5, 7))
        await reply.end()
        ended = await asyncio.wait_for(asyncio.gather(*readers), PROMPTLY_S)
        assert ended == [(frames(6)[n:], None) for n in range(3)]
        await a.aclose()
        await b.aclose()

    with redis_server() as own:
        asyncio.run(scenario(own))


async def _resubscribed(log: RedisReplyLog) -> bool:
    notify = [c for c in await clients(log) if c.get("name") == NOTIFY_CLIENT_NAME]
    return log.notifier.live and [int(c["sub"]) for c in notify] == [1]


def test_a_relayed_cancel_is_heard_through_the_notification_not_the_lease_refresh(
    server: RedisServer,
) -> None:
    """With a 30 s lease (a refresh every 10 s), a ``Cancel`` relayed by the other replica
    still stops the generation within the relay's own wait (1.5 s): the generator took it
    when the cancels channel told it, not at its next refresh."""

    async def scenario() -> None:
        limits = LogLimits(lease_s=30.0)
        a = RedisReplyLog(server.url, limits, prefix="f11:")
        b = RedisReplyLog(server.url, limits, prefix="f11:")
        key = ReplyKey("alice", "s")
        reply = await a.create(key, "b", "lp")
        heard: list[tuple[str, str | None]] = []
        ending: list[asyncio.Task[None]] = []

        def on_cancel(caller: str, traceparent: str | None) -> None:
            heard.append((caller, traceparent))
            ending.append(asyncio.create_task(reply.end(Reason.CONSUMER_CANCELLED.value)))

        reply.watch_cancel(on_cancel)
        await until(lambda: _all_subscribed(a, 1), "the generation subscribed")
        await write(reply, range(1, 2))
        assert await b.request_cancel(key, 1.5) is True
        assert heard == [("alice", None)]
        await asyncio.gather(*ending)
        await a.aclose()
        await b.aclose()

    asyncio.run(scenario())


def test_an_exhausted_pool_fails_reply_log_unavailable_never_max_connections(
    server: RedisServer,
) -> None:
    """Every pool is bounded and blocking: with its one connection taken, a generation's
    write and a follower's read wait (at most the log's timeout), then fail as any Redis
    failure does (``reply_log_unavailable``), never ``MaxConnectionsError``; once the
    connection is back, both go on."""

    async def scenario() -> None:
        limits = LogLimits(lease_s=30.0)  # no refresh wants a connection meanwhile
        one = ReaderLimits(connections=1, writer_connections=1)
        a = RedisReplyLog(server.url, limits, prefix="f12:", readers=one)
        b = RedisReplyLog(server.url, limits, prefix="f12:", readers=one)
        key = ReplyKey("alice", "s")
        reply = await a.create(key, "b", "lp")
        writers, readers = a.client.connection_pool, b.reader_client.connection_pool
        taken = [await writers.get_connection(), await readers.get_connection()]
        with pytest.raises(ReplyLogFailed) as failed:
            await write(reply, range(1, 2))
        assert failed.value.reason is Reason.REPLY_LOG_UNAVAILABLE
        assert not isinstance(failed.value.__cause__, MaxConnectionsError)
        assert await read(await found(b, key)) == ([], Reason.REPLY_LOG_UNAVAILABLE.value)
        await writers.release(taken[0])
        await readers.release(taken[1])
        await write(reply, range(1, 2))
        await reply.end()
        assert await read(await found(b, key)) == (frames(1), None)
        await a.aclose()
        await b.aclose()

    asyncio.run(scenario())


def test_closing_a_log_ends_every_task_it_started_each_time(server: RedisServer) -> None:
    """Two replicas write, follow and close, again and again: each close ends the listener,
    the leaver and the followers, and returns. (A listener read under redis-py's timeout
    once lost its cancellation: a close then waited for good, about one run in a hundred.)"""

    async def scenario() -> None:
        for run in range(120):
            a, b = two(server, f"close-{run}:")
            reply = await a.create(ReplyKey("alice", "s"), "a" * 64, "lp")
            await reply.extend([Entry(1, b"x")])
            await reply.end()
            found = await b.find(ReplyKey("alice", "s"))
            assert found is not None
            assert [entry.data async for entry in found.read(0)] == [b"x"]
            async with asyncio.timeout(10):
                await a.aclose()
                await b.aclose()
            left = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            assert not left, left

    asyncio.run(scenario())
