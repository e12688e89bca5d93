"""``consumer.client.ReplyClient``: one channel per target and channel options, shared by
the streams it runs, across real processes. The connections are counted by a proxy in
front of the producer (tests/reset_proxy.py); the window stays per stream; a broken
connection is retired and the stream resumes on a new one."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from replywire.consumer.client import ReplyClient, stream_reply
from replywire.consumer.options import StreamOptions
from replywire.consumer.reader import IdleWatch
from replywire.shared.faults import Fault, FaultKind
from replywire.shared.recording import Recording
from replywire.shared.requests import ReplyRequest
from replywire.shared.wire.chunking import ChunkPlan
from tests.processes import Producer, producer
from tests.reset_proxy import ResetProxy

pytestmark = pytest.mark.timeout(120)
CASE = "utf8-write"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Producer]:
    with producer(tmp_path_factory.mktemp("client")) as p:
        yield p


def request(recording: Recording, stream_id: str, chunks: str = "frame") -> ReplyRequest:
    return ReplyRequest(
        case_id=CASE,
        binding=recording.case(CASE).binding,
        plan=ChunkPlan.parse(chunks),
        stream_id=stream_id,
    )


def test_the_streams_of_one_client_share_one_connection(
    served: Producer, recording: Recording
) -> None:
    async def five(target: str) -> tuple[list[str], int]:
        async with ReplyClient(StreamOptions(target=target)) as client:
            results = [await client.stream(request(recording, f"shared-{i}")) for i in range(5)]
            return [r.status.value for r in results], client.channels

    with ResetProxy(served.port, None) as proxy:
        statuses, channels = asyncio.run(five(proxy.target))
        assert (statuses, channels) == (["complete"] * 5, 1)
        assert proxy.connections == 1

    async def one_shot(target: str) -> list[str]:
        options = StreamOptions(target=target)
        return [
            (await stream_reply(request(recording, f"own-{i}"), options)).status.value
            for i in range(3)
        ]

    with ResetProxy(served.port, None) as proxy:
        assert asyncio.run(one_shot(proxy.target)) == ["complete"] * 3
        assert proxy.connections == 3  # stream_reply: a channel of its own per call


def test_other_channel_options_get_a_channel_of_their_own(
    served: Producer, recording: Recording
) -> None:
    async def scenario() -> tuple[list[str], int]:
        options = StreamOptions(target=served.target)
        async with ReplyClient(options) as client:
            first = await client.stream(request(recording, "opts-1"))
            # Per-stream options that are not the channel's share it.
            quick = dataclasses.replace(options, idle_timeout_s=30.0, queue_size=2)
            second = await client.stream(request(recording, "opts-2"), quick)
            assert client.channels == 1
            small = dataclasses.replace(options, window_bytes=2048)
            third = await client.stream(request(recording, "opts-3"), small)
            return [r.status.value for r in (first, second, third)], client.channels

    assert asyncio.run(scenario()) == (["complete"] * 3, 2)


def test_a_paused_stream_holds_only_its_own_window_on_a_shared_connection(
    served: Producer, recording: Recording
) -> None:
    """One stream paused (a slow processor, a 1 KiB window smaller than its 2.3 KB reply)
    and another on the same connection: the other completes while the first is held."""

    async def scenario(target: str) -> tuple[Any, Any, bool, int]:
        options = StreamOptions(target=target, window_bytes=1024)
        slow = dataclasses.replace(options, queue_size=1, process_delay_s=0.1)
        async with ReplyClient(options) as client:
            held = asyncio.create_task(client.stream(request(recording, "held", chunks="64"), slow))
            await asyncio.sleep(0.2)  # the held stream is under way (its reads pause)
            free = await client.stream(request(recording, "free", chunks="64"))
            still_held = not held.done()
            return await held, free, still_held, client.channels

    with ResetProxy(served.port, None) as proxy:
        held, free, still_held, channels = asyncio.run(scenario(proxy.target))
        assert proxy.connections == channels == 1
    assert (held.status.value, free.status.value) == ("complete", "complete")
    assert still_held
    assert held.flow is not None and held.flow.reads_paused > 0
    assert free.flow is not None and free.flow.reads_paused == 0


def test_a_broken_connection_is_retired_the_stream_resumes_and_the_next_reuses_the_new_one(
    served: Producer, recording: Recording
) -> None:
    async def one(target: str) -> None:
        async with ReplyClient(StreamOptions(target=target)) as client:
            await client.stream(request(recording, "measure"))

    with ResetProxy(served.port, None) as proxy:
        asyncio.run(one(proxy.target))
        one_stream = proxy.first_bytes  # the connection's preface and one stream

    async def scenario(proxy: ResetProxy) -> tuple[Any, Any, int, int]:
        options = StreamOptions(target=proxy.target, resume_attempts=3, resume_backoff_s=0.01)
        async with ReplyClient(options) as client:
            cut = await client.stream(request(recording, "cut-1"))
            # The broken connection, the resume's (and any reconnect the retired channel
            # made before it was closed: round_robin reconnects at once).
            connections = proxy.connections
            after = await client.stream(request(recording, "cut-2"))
            return cut, after, proxy.connections - connections, client.channels

    with ResetProxy(served.port, one_stream * 3 // 4) as proxy:
        cut, after, new_connections, channels = asyncio.run(scenario(proxy))
        assert proxy.reset_done
    assert (cut.status.value, after.status.value) == ("complete", "complete")
    assert (cut.stats.reconnects, after.stats.reconnects) == (1, 0)
    assert new_connections == 0  # the next stream reused the resume's channel
    assert channels == 1  # the retired channel was closed by its last stream


def test_a_client_closes_its_channels(tmp_path: Path, recording: Recording) -> None:
    async def scenario(target: str) -> tuple[int, int]:
        client = ReplyClient(StreamOptions(target=target))
        await client.stream(request(recording, "close-1"))
        before = client.channels
        await client.close()
        return before, client.channels

    with producer(tmp_path) as p:
        assert asyncio.run(scenario(p.target)) == (1, 0)


def test_the_idle_timeout_runs_only_while_a_read_waits(
    served: Producer, recording: Recording
) -> None:
    """``IdleWatch``: a reader that is not reading (paused on a full queue) is not idle,
    however long; once it reads, the chunks come and the reading task was never cancelled."""

    async def paused_then_read(target: str) -> tuple[int, int]:
        async with ReplyClient(StreamOptions(target=target)) as client:
            kept = await client.checkout(client.options)
            call = kept.stub.Open(request(recording, "idle-paused").open_request())
            watch = IdleWatch(call, 0.2)
            await asyncio.sleep(0.6)  # three timeouts without a read
            chunks = 0
            while await watch.read() is not grpc.aio.EOF:  # type: ignore[attr-defined]
                chunks += 1
            watch.close()
            await client.checkin(kept)
            task = asyncio.current_task()
            assert task is not None
            return chunks, task.cancelling()

    assert asyncio.run(paused_then_read(served.target)) == (15, 0)


def test_the_idle_timeout_ends_a_read_that_waits_too_long_and_only_that(
    tmp_path: Path, recording: Recording
) -> None:
    """A read that waits past the timeout raises ``TimeoutError`` (the task is not left
    cancelled); a cancel from elsewhere stays a cancel."""

    async def stalled(target: str) -> tuple[str, int, str]:
        stall = Fault(kind=FaultKind.STALL, target_frame=2, stall_ms=3000)
        message = dataclasses.replace(request(recording, "idle-stall"), fault=stall)
        async with ReplyClient(StreamOptions(target=target)) as client:
            kept = await client.checkout(client.options)
            watch = IdleWatch(kept.stub.Open(message.open_request()), 0.3)
            try:
                while True:
                    await watch.read()
            except TimeoutError:
                ended = "timeout"
            watch.close()
            task = asyncio.current_task()
            assert task is not None
            again = dataclasses.replace(message, stream_id="idle-cancelled")
            reading = asyncio.Event()
            reader = asyncio.create_task(read_until_cancelled(kept, again, reading))
            # Once a chunk came (a cancel while gRPC still sends the request can be lost).
            await asyncio.wait_for(reading.wait(), 30)
            reader.cancel()
            outcome = await asyncio.gather(reader, return_exceptions=True)
            await client.checkin(kept)
            return ended, task.cancelling(), type(outcome[0]).__name__

    async def read_until_cancelled(
        kept: Any, message: ReplyRequest, reading: asyncio.Event
    ) -> None:
        watch = IdleWatch(kept.stub.Open(message.open_request()), 5.0)
        try:
            while True:
                await watch.read()
                reading.set()
        finally:
            watch.close()

    with producer(tmp_path, "--allow-faults") as faulty:
        assert asyncio.run(stalled(faulty.target)) == ("timeout", 0, "CancelledError")
