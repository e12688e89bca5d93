"""Many readers of one live reply on one producer through the Redis reply log, across real
processes (the producer, the fake Gemini server, a private valkey/redis server), with
``bench.replylog_readers``: ``alice`` opens that many streams of one stream id at once
(raw gRPC from this process, over a few channels), then ``bob`` one of his own.

* 150 readers (``python -m bench.replylog_readers --readers 150``: the documented
  command) and 1,000: every reader completes with the same bytes, the provider is called
  once for each caller's reply, ``bob`` is served, and the producer's readers hold at
  most one Redis connection per reply read at once (two), its lookups at most their
  pool's. Before the readers shared a follower, 105 readers and more all failed
  (``generator_lost``, ``reply_log_unavailable``), and ``bob`` with them.
* 300 distinct live replies of one caller read at once on one producer (``python -m
  bench.replylog_readers --distinct --readers 300``): every one completes, and the Redis
  connections stay within the pools' sizes plus the one pub/sub connection. Before the
  followers waited on pub/sub, each held a connection of the readers' pool (64): the
  65th distinct reply was refused ``reply_log_busy``.
* 150 live generations whose readers left (in their detach grace) and another caller's
  new reply: it completes, no ``MaxConnectionsError`` in the trace (each generation held a
  connection of the writers' pool, of 100, in ``BLPOP`` before).
* Past ``--reply-log-replies-read-per-identity`` a caller's new reply is refused
  ``RESOURCE_EXHAUSTED`` / ``reply_log_busy`` before its provider is called, while its
  reply already read and another caller's are served.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis

from bench.replylog_readers import (
    CASE,
    CHANNELS,
    READERS_NAME,
    Row,
    deployment,
    main,
    open_connections,
    read_stream,
    run_row,
)
from replywire.producer.replylog.interface import (
    DEFAULT_READER_CONNECTIONS,
    DEFAULT_WRITER_CONNECTIONS,
)
from replywire.producer.replylog.notify import NOTIFY_CLIENT_NAME
from replywire.producer.replylog.redis_log import LOOKUP_CONNECTIONS, LOOKUPS_NAME, WRITERS_NAME
from replywire.runtime.recording_file import load_recording
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire.chunking import ChunkPlan
from tests.processes import wait_for
from tests.producer_records import metrics_port, scrape

pytestmark = pytest.mark.timeout(300)


def check(row: Row, readers: int) -> None:
    assert (row.readers, row.complete, row.identical, row.failed) == (readers, readers, True, {})
    assert (row.other_identity, row.provider_calls) == ("ok", 2)
    # Two replies read at once (alice's and bob's): at most one connection each (a short
    # read at a time), however many readers; the lookups within their own pool.
    assert 1 <= row.open_connections.get(READERS_NAME, 0) <= 2
    assert row.peak_reader_connections <= 2
    assert row.open_connections.get(LOOKUPS_NAME, 0) <= LOOKUP_CONNECTIONS


def test_150_readers_of_one_reply_and_another_callers_reply_all_complete(
    tmp_path: Path,
) -> None:
    out = tmp_path / "rows.json"
    assert main(["--readers", "150", "--json", str(out)]) == 0
    (row,) = [Row(**fields) for fields in json.loads(out.read_text())]
    check(row, 150)


def test_300_distinct_live_replies_on_one_replica_all_complete_within_the_pools(
    tmp_path: Path,
) -> None:
    out = tmp_path / "rows.json"
    assert main(["--distinct", "--readers", "300", "--json", str(out)]) == 0
    (row,) = [Row(**fields) for fields in json.loads(out.read_text())]
    assert row.distinct
    assert (row.readers, row.complete, row.failed, row.other_identity) == (300, 300, {}, "ok")
    assert row.provider_calls == 301
    peaks = row.peak_by_name
    assert peaks.get(NOTIFY_CLIENT_NAME) == 1
    assert peaks.get(READERS_NAME, 0) <= DEFAULT_READER_CONNECTIONS
    assert peaks.get(WRITERS_NAME, 0) <= DEFAULT_WRITER_CONNECTIONS
    assert peaks.get(LOOKUPS_NAME, 0) <= LOOKUP_CONNECTIONS
    # Named or still connecting (a connection is unnamed until its CLIENT SETNAME), all
    # of them the pools' and the one pub/sub connection at most.
    pools = DEFAULT_READER_CONNECTIONS + DEFAULT_WRITER_CONNECTIONS + LOOKUP_CONNECTIONS + 1
    assert row.peak_connections <= pools


def test_150_generations_whose_readers_left_leave_room_for_another_callers_reply(
    tmp_path: Path,
) -> None:
    count = 150
    recording = load_recording()
    plan = ChunkPlan.parse("frame")

    def request(stream_id: str) -> Any:
        return ReplyRequest.for_case(recording, CASE, plan=plan, stream_id=stream_id)

    async def keys(url: str, kind: str) -> int:
        client: Any = aioredis.Redis.from_url(url)
        try:
            return len([k async for k in client.scan_iter(match=f"*:{kind}", count=1000)])
        finally:
            await client.aclose()

    async def scenario(target: str, url: str, tokens: dict[str, str]) -> tuple[int, str]:
        alice = (("authorization", f"Bearer {tokens['alice']}"),)
        channels = [grpc.aio.insecure_channel(target) for _ in range(CHANNELS)]
        try:
            stubs = [pb_grpc.ReplyStreamStub(channel) for channel in channels]
            calls = [
                stubs[i % CHANNELS].Open(request(f"left-{i}").open_request(), metadata=alice)
                for i in range(count)
            ]
            # Every reply claimed (bounded), then how many generations are live (their
            # lease held; most of them waiting for one of the provider's 32 connections).
            for _ in range(3000):
                if await keys(url, "meta") >= count:
                    break
                await asyncio.sleep(0.02)
            live = await keys(url, "lease")
            for call in calls:  # the readers leave; their generations go on (detach grace)
                call.cancel()
            bob = await read_stream(stubs[0], request("own").open_request(), tokens["bob"])
        finally:
            for channel in channels:
                await channel.close(None)
        return live, bob[0]

    with deployment(tmp_path, count, "--log-level", "info") as (running, server, _fake, tokens):
        live, bob = asyncio.run(scenario(running.target, server.url, tokens))
        named = asyncio.run(open_connections(server.url))
        trace = running.trace_path.read_text()
    assert bob == "ok"
    # More generations live at once than the writers' pool has connections: none holds one.
    assert live > DEFAULT_WRITER_CONNECTIONS
    assert "MaxConnectionsError" not in trace
    assert "reply_log_unavailable" not in trace
    assert named.get(WRITERS_NAME, 0) <= DEFAULT_WRITER_CONNECTIONS
    assert named.get(NOTIFY_CLIENT_NAME) == 1


@pytest.mark.slow
def test_1000_readers_of_one_live_reply_on_one_replica_through_redis(tmp_path: Path) -> None:
    check(run_row(1000, tmp_path), 1000)


def test_past_a_callers_share_a_new_reply_is_refused_reply_log_busy_before_its_call(
    tmp_path: Path,
) -> None:
    recording = load_recording()
    plan = ChunkPlan.parse("frame")

    def request(stream_id: str) -> Any:
        return ReplyRequest.for_case(recording, CASE, plan=plan, stream_id=stream_id)

    def readers_gauges(port: int) -> tuple[float, float]:
        got = scrape(port)
        return got[("replywire_reply_log_followers", ())], got[
            ("replywire_reply_log_replies_read", ())
        ]

    async def scenario(target: str, tokens: dict[str, str], port: int) -> list[object]:
        alice = (("authorization", f"Bearer {tokens['alice']}"),)
        async with grpc.aio.insecure_channel(target) as channel:
            stub = pb_grpc.ReplyStreamStub(channel)
            # Alice's first reply is read here once its first chunk came.
            call = stub.Open(request("one").open_request(), metadata=alice)
            chunks = [await call.read()]
            live = await asyncio.to_thread(readers_gauges, port)
            try:
                second = await stub.Open(request("two").open_request(), metadata=alice).read()
                refused = f"read {second!r}"
            except grpc.aio.AioRpcError as error:
                refused = f"{error.code().name} {error.details()}"
            bob = await read_stream(stub, request("own").open_request(), tokens["bob"])
            while isinstance(chunk := await call.read(), pb.Chunk):  # else: the end (EOF)
                chunks.append(chunk)
            return [live, refused, bob[0], (await call.code()).name]

    flags = ("--reply-log-replies-read", "2", "--reply-log-replies-read-per-identity", "1",
             "--log-level", "info", "--metrics-port", "0")  # fmt: skip
    with deployment(tmp_path, 10, *flags) as (running, server, fake, tokens):
        before = len(fake.log())
        port = metrics_port(running)
        answers = asyncio.run(scenario(running.target, tokens, port))
        # While alice's first reply was read: one follower, one reply read (the gauges).
        assert answers == [(1.0, 1.0), "RESOURCE_EXHAUSTED reply_log_busy", "ok", "OK"]
        wait_for(lambda: readers_gauges(port) == (0.0, 0.0))  # once every stream let go
        # Alice's one reply and Bob's: the refused one never reached the provider.
        assert len(fake.log()) - before == 2
        assert asyncio.run(open_connections(server.url)).get(READERS_NAME, 0) <= 2
        refusals = [
            r
            for r in running.trace()
            if r.get("event") == "state_changed" and r.get("reason") == "reply_log_busy"
        ]
        assert [(r.get("stream_id"), r.get("to_state")) for r in refusals] == [("two", "refused")]
