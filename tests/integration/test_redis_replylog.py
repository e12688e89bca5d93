"""The reply log in Redis Streams against a real server (tests/redis_server.py): two log
instances stand for two replicas; a reader follows the log to its end, a generator that
goes silent ends its readers ``generator_lost`` once its lease lapses, and another replica
may then generate the reply anew. Each test has its own key prefix."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from replywire.producer.replylog.interface import (
    Entry,
    LogEnded,
    LogLimits,
    ReplyBusy,
    ReplyKey,
    ReplyLogFailed,
)
from replywire.producer.replylog.redis_log import RedisReplyLog
from replywire.producer.replylog.redis_reply import RedisReply
from replywire.producer.replylog.scripts import (
    MAX_CANCEL_REQUESTS,
    MAX_RELAYED_TRACEPARENT_CHARS,
    relay_value,
    relayed_cancel,
)
from replywire.shared.reasons import Reason
from tests.redis_server import RedisServer, redis_server

#: Refreshed every third of it: a test that needs the lease held must not lose it to a busy
#: machine (at 0.4 s, a 0.27 s stall of the event loop under a loaded parallel run did).
LEASE_S = 1.2
#: A bounded wait for what must happen once a lease lapses (not for ever).
PROMPTLY_S = 30.0


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def key(stream_id: str, identity: str = "anonymous") -> ReplyKey:
    return ReplyKey(identity, stream_id)


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
    reply = await log.find(key(stream_id))
    assert reply is not None
    return [(entry.sequence, entry.data) async for entry in reply.read(after)]


async def close(*logs: RedisReplyLog) -> None:
    for log in logs:
        await log.aclose()


def test_a_reader_on_another_replica_follows_the_log_until_it_ends(server: RedisServer) -> None:
    async def scenario() -> None:
        a, b = replicas(server, "t1:")
        reply = await a.create(key("s"), "b" * 64, "lp")
        assert not reply.log_now((Entry(1, b"x"),))  # each entry is a command: never at once
        early = asyncio.create_task(read_all(b, "s", 0))
        for sequence in (1, 2, 3):
            await reply.append(Entry(sequence, bytes([sequence]) * 3))
            await asyncio.sleep(0.01)
        await reply.end()
        assert await early == [(1, b"\1" * 3), (2, b"\2" * 3), (3, b"\3" * 3)]
        assert [s for s, _ in await read_all(b, "s", 2)] == [3]
        found = await b.find(key("s"))
        assert found is not None
        assert (found.binding_sha256, found.wire, found.error) == ("b" * 64, "lp", None)
        with pytest.raises(ReplyBusy):  # a complete reply is never generated again
            await b.create(key("s"), "b" * 64, "lp")
        assert await b.find(key("unknown")) is None
        await close(a, b)

    asyncio.run(scenario())


def test_an_error_ending_and_the_bounds(server: RedisServer) -> None:
    async def scenario() -> None:
        a, b = replicas(server, "t2:", max_frames=2, ttl_s=30)
        reply = await a.create(key("s"), "b", "lp")
        for sequence in (1, 2):
            await reply.append(Entry(sequence, b"x"))
        with pytest.raises(ReplyLogFailed) as failed:
            await reply.append(Entry(3, b"x"))
        assert failed.value.reason is Reason.REPLY_LOG_LIMIT
        with pytest.raises(LogEnded) as ended:
            await read_all(b, "s", 0)
        assert ended.value.reason == Reason.REPLY_LOG_LIMIT.value
        big = await a.create(key("t"), "b", "lp")
        with pytest.raises(ReplyLogFailed):
            await big.append(Entry(1, b"x" * ((4 << 20) + 1)))  # over the default byte bound
        found = await b.find(key("t"))
        assert found is not None and found.error == Reason.REPLY_LOG_LIMIT.value
        assert found.frames == 0
        # Ended: its keys expire ttl_s after the end, its lease is gone.
        lease, log_key, meta, _ = a.keys(key("s"))
        for name in (log_key, meta):
            assert 0 < await a.client.pttl(name) <= 30_000
        assert not await a.client.exists(lease)
        await close(a, b)

    asyncio.run(scenario())


def test_a_silent_generator_ends_its_readers_generator_lost_within_its_lease(
    server: RedisServer,
) -> None:
    async def scenario() -> None:
        a, b = replicas(server, "t3:")
        reply = await a.create(key("s"), "b", "lp")
        await reply.append(Entry(1, b"one"))
        await asyncio.sleep(LEASE_S)  # refreshed meanwhile: readers go on waiting
        await reply.append(Entry(2, b"two"))
        reader = asyncio.create_task(read_until_lost(b, "s"))
        await asyncio.sleep(0.05)
        assert reply._refresher is not None
        reply._refresher.cancel()  # as a killed process: no refresh, no end
        # Nothing ends this reply but its lapsed lease: without it the reader would wait for
        # ever. A bounded wait, far longer than the lease, proves it; no time is asserted.
        assert await asyncio.wait_for(reader, PROMPTLY_S) == ([1, 2], Reason.GENERATOR_LOST.value)
        found = await b.find(key("s"))
        assert found is not None and found.error == Reason.GENERATOR_LOST.value
        # The partial content is kept for readers (until it expires).
        assert await read_until_lost(a, "s") == ([1, 2], Reason.GENERATOR_LOST.value)
        # Another replica may generate it anew; the silent one can write no more.
        again = await b.create(key("s"), "b", "lp")
        with pytest.raises(ReplyLogFailed) as lost:
            await reply.append(Entry(3, b"three"))
        assert lost.value.reason is Reason.GENERATOR_LOST
        for sequence in (1, 2, 3):
            await again.append(Entry(sequence, b"%d" % sequence))
        await again.end()
        assert [s for s, _ in await read_all(a, "s", 1)] == [2, 3]
        await close(a, b)

    asyncio.run(scenario())


async def read_until_lost(
    log: RedisReplyLog, stream_id: str, after: int = 0, seen: list[int] | None = None
) -> tuple[list[int], str | None]:
    """Read until the log ends the read; ``seen`` (given) fills as entries come, so a test
    can wait for one before it breaks something."""
    reply = await log.find(key(stream_id))
    assert reply is not None
    seen = [] if seen is None else seen
    try:
        async for entry in reply.read(after):
            seen.append(entry.sequence)
    except LogEnded as ended:
        return seen, ended.reason
    return seen, None


async def until_read(seen: list[int], count: int) -> None:
    while len(seen) < count:
        await asyncio.sleep(0.01)


def test_two_replicas_creating_one_reply_at_once_one_generates(server: RedisServer) -> None:
    async def scenario() -> None:
        a, b = replicas(server, "t4:")
        outcomes = await asyncio.gather(
            a.create(key("s"), "b", "lp"), b.create(key("s"), "b", "lp"), return_exceptions=True
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
    lease_s = 30.0  # a refresh every 10 s: a prompt hear is the cancels channel's

    async def scenario() -> None:
        shared = LogLimits(lease_s=lease_s)
        a = RedisReplyLog(server.url, shared, prefix="t-cancel:")
        b = RedisReplyLog(server.url, shared, prefix="t-cancel:")
        alice, mallory = key("s", "alice"), key("s", "mallory")
        assert await b.request_cancel(alice, 0.1) is False  # nothing generated
        reply = await a.create(alice, "b" * 64, "lp")
        heard: asyncio.Queue[tuple[str, str | None]] = asyncio.Queue()
        reply.watch_cancel(lambda caller, traceparent: heard.put_nowait((caller, traceparent)))
        await reply.append(Entry(1, b"x"))
        # Another identity's Cancel of the same stream id names its own (unused) reply.
        assert await b.request_cancel(mallory, 0.2) is False
        # A relay from a replica that traces carries its Cancel span's context; one past the
        # bound carries none.
        await b.request_cancel(alice, 0, TRACEPARENT)
        assert await asyncio.wait_for(heard.get(), 5) == ("alice", TRACEPARENT)
        await b.request_cancel(alice, 0, "00-" + "a" * MAX_RELAYED_TRACEPARENT_CHARS)
        assert await asyncio.wait_for(heard.get(), 5) == ("alice", None)
        relayed = asyncio.create_task(b.request_cancel(alice, 5))
        assert await asyncio.wait_for(heard.get(), 5) == ("alice", None)
        assert heard.empty()  # mallory's never reached alice's generator
        await reply.end(Reason.CONSUMER_CANCELLED.value)
        assert await relayed is True
        assert await b.request_cancel(alice, 0.1) is False  # ended: no generator
        # Bounded: a flood of relays keeps only the newest requests.
        flooded = await a.create(key("f", "alice"), "b" * 64, "lp")
        for _ in range(MAX_CANCEL_REQUESTS + 5):
            assert await b.request_cancel(key("f", "alice"), 0) is False
        queued = await a.client.llen(a.keys(key("f", "alice"))[3])
        assert queued == MAX_CANCEL_REQUESTS
        await flooded.end()
        # A stale request left by a relay that came just before the reply ended...
        await a.client.rpush(a.keys(alice)[3], "stale")
        again = await a.create(alice, "b" * 64, "lp")  # (after an error: generated again)
        heard_again: asyncio.Queue[str] = asyncio.Queue()
        again.watch_cancel(lambda caller, _: heard_again.put_nowait(caller))
        assert await a.client.llen(a.keys(alice)[3]) == 0
        await again.end()
        assert heard_again.empty()
        await close(a, b)

    asyncio.run(asyncio.wait_for(scenario(), 60))


@pytest.mark.parametrize("past", [0, 1, 2**64 - 1 - 3], ids=["last", "last+1", "2^64-1"])
def test_a_read_from_at_or_past_the_end_of_an_ended_reply_ends_at_once(
    server: RedisServer, past: int
) -> None:
    """As the memory log's: a complete reply read from its end completes, one that ended
    in error raises its ending, with no wait for a lease that is gone."""

    async def scenario() -> tuple[list[int], str | None]:
        a, b = replicas(server, f"t-end-{past}:")
        done = await a.create(key("done"), "b", "lp")
        failed = await a.create(key("failed"), "b", "lp")
        for reply in (done, failed):
            await reply.extend([Entry(1, b"x"), Entry(2, b"y"), Entry(3, b"z")])
        await done.end()
        await failed.end(Reason.REPLY_ABANDONED.value)
        found = await b.find(key("done"))
        assert found is not None and found.frames == 3
        read = await asyncio.wait_for(read_all(b, "done", 3 + past), 5)
        lost = await asyncio.wait_for(read_until_lost(b, "failed", 3 + past), 5)
        await close(a, b)
        return [s for s, _ in read], lost[1]

    started = time.monotonic()
    assert asyncio.run(scenario()) == ([], Reason.REPLY_ABANDONED.value)
    print(f"read from {3 + past}: ended in {time.monotonic() - started:.3f} s (both replies)")


def test_the_same_stream_id_under_two_identities_names_two_unrelated_replies(
    server: RedisServer,
) -> None:
    """bob's create of alice's stream id is not busy and writes other keys; each reads its
    own; a stream id or identity holding the separator or braces stays its own name."""

    async def scenario() -> None:
        a, b = replicas(server, "t-tenancy:")
        alice = await a.create(key("s", "alice"), "a" * 64, "lp")
        assert await b.find(key("s", "bob")) is None
        bob = await b.create(key("s", "bob"), "c" * 64, "ndjson")
        await alice.extend([Entry(1, b"alice")])
        await alice.end()
        await bob.extend([Entry(1, b"bob"), Entry(2, b"bob")])
        await bob.end()
        found = await b.find(key("s", "alice"))
        assert found is not None and (found.binding_sha256, found.frames) == ("a" * 64, 1)
        assert [d async for _, d in _pairs(found)] == [b"alice"]
        assert set(a.keys(key("s", "alice"))).isdisjoint(a.keys(key("s", "bob")))
        # A separator inside an id cannot make two keys collide.
        odd = [key("x/y", "alice"), key("x", "alice/y"), key("{x}:log", "alice")]
        assert len({a.keys(k)[1] for k in odd}) == 3
        assert all(k.count("{") == 1 for k in a.keys(odd[2]))  # one hash tag
        await close(a, b)

    asyncio.run(scenario())


async def _pairs(reply: RedisReply) -> AsyncIterator[tuple[int, bytes]]:
    async for entry in reply.read(0):
        yield entry.sequence, entry.data


def test_a_reader_and_a_writer_that_lose_redis_fail_with_reply_log_unavailable() -> None:
    """Its own server, killed under a reader and a writer: named failures, not exceptions
    of the Redis client."""

    async def scenario(running: RedisServer) -> None:
        limits = LogLimits(lease_s=30.0)
        a = RedisReplyLog(running.url, limits, prefix="t-lost:")
        reply = await a.create(key("s"), "b", "lp")
        await reply.append(Entry(1, b"x"))
        found = await a.find(key("s"))
        assert found is not None
        seen: list[int] = []
        reader = asyncio.create_task(read_until_lost(a, "s", seen=seen))
        # The kill comes once frame 1 was read (a fixed sleep lost that race on a busy run).
        await asyncio.wait_for(until_read(seen, 1), 30)
        running.kill()
        assert await asyncio.wait_for(reader, 30) == ([1], Reason.REPLY_LOG_UNAVAILABLE.value)
        with pytest.raises(ReplyLogFailed) as failed:
            await reply.append(Entry(2, b"y"))
        assert failed.value.reason is Reason.REPLY_LOG_UNAVAILABLE
        with pytest.raises(ReplyLogFailed):
            await a.find(key("s"))
        with pytest.raises(ReplyLogFailed) as unwritten:  # its readers see the lease lapse
            await reply.end(Reason.REPLY_LOG_UNAVAILABLE.value)
        assert unwritten.value.reason is Reason.REPLY_LOG_UNAVAILABLE
        await close(a)

    with redis_server() as running:
        asyncio.run(scenario(running))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (relay_value("alice", None), ("alice", None)),
        (relay_value("alice", TRACEPARENT), ("alice", TRACEPARENT)),
        (relay_value('{"caller":"x"}', TRACEPARENT), ('{"caller":"x"}', TRACEPARENT)),
        ('{"caller": 1}', ('{"caller": 1}', None)),
        ("{not json", ("{not json", None)),
        ('{"caller":"alice","traceparent":7}', ("alice", None)),
        (
            '{"caller":"alice","traceparent":"' + "f" * (MAX_RELAYED_TRACEPARENT_CHARS + 1) + '"}',
            ("alice", None),
        ),
    ],
)
def test_a_relayed_cancel_is_read_back_as_written_and_anything_else_as_a_caller_alone(
    value: str, expected: tuple[str, str | None]
) -> None:
    """A relayed Cancel's entry: what ``relay_value`` writes reads back; an old replica's
    plain name, or anything malformed, is a caller's name alone, with no trace context."""
    assert relayed_cancel(value.encode()) == expected


def test_the_first_deliverys_span_is_kept_with_the_reply_bounded(server: RedisServer) -> None:
    """A reply created by a delivery that traced keeps its span's traceparent: any replica
    finds it (a resume there links to it); none, or one past the bound, keeps nothing."""

    async def scenario() -> None:
        a = RedisReplyLog(server.url, prefix="t-first:")
        b = RedisReplyLog(server.url, prefix="t-first:")
        oversized = "00-" + "a" * MAX_RELAYED_TRACEPARENT_CHARS
        for stream_id, given, kept in [
            ("traced", TRACEPARENT, TRACEPARENT),
            ("untraced", None, None),
            ("oversized", oversized, None),
        ]:
            reply = await a.create(key(stream_id), "b" * 64, "lp", given)
            assert reply.first_span == kept
            found = await b.find(key(stream_id))
            assert found is not None and found.first_span == kept
            assert await b.find(key(stream_id, "mallory")) is None
            await reply.end()
        await close(a, b)

    asyncio.run(asyncio.wait_for(scenario(), 60))
