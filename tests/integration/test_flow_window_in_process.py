"""A paused consumer holds its stream to ``--window-bytes``, counted on the wire.

A counting HTTP/2 proxy (bench/window_proxy.py) sits between a real producer process
and a consumer that takes one chunk and stops (queue 1): it reads the window the
consumer announces, every WINDOW_UPDATE it returns, and the DATA bytes the producer
sends. gRPC returns a paused stream's window once more after the reader's last read
(consumer/channels.py ``announced_window``); the consumer announces half the window, so
the producer gets at most the window past the chunks the consumer has read.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc

from bench import memory
from bench.flow_window import Firehose
from bench.window_proxy import FrameReader, initial_window
from replywire.consumer.channels import channel_options
from replywire.consumer.options import StreamOptions
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc
from tests.gemini_runs import HOLD_S
from tests.http2 import PREFACE, frame

STABLE_S = 0.5


async def _written_after_one_read(lookahead: int) -> tuple[int, int]:
    """A bare grpc.aio pair: the client reads one message and stops; the bytes the
    server wrote once it blocked, and the message's wire size."""
    server = grpc.aio.server()
    firehose = Firehose(1)
    pb_grpc.add_ReplyStreamServicer_to_server(firehose, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    options = [
        (key, lookahead if key == "grpc.http2.lookahead_bytes" else value)
        for key, value in channel_options(StreamOptions(target=""))
    ]
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
            call = pb_grpc.ReplyStreamStub(channel).Open(pb.OpenRequest())
            await call.read()
            last, since = -1, time.monotonic()
            deadline = time.monotonic() + HOLD_S
            while time.monotonic() < deadline and time.monotonic() - since < STABLE_S:
                await asyncio.sleep(0.02)
                if firehose.written != last:
                    last, since = firehose.written, time.monotonic()
            call.cancel()
    finally:
        await server.stop(0)
    return firehose.written, 5 + len(pb.Chunk(data=b"x").SerializeToString())


def test_grpc_returns_a_stopped_readers_window_once_more() -> None:
    """Why the consumer announces half: with a 16 KiB stream window and a reader that read
    one message and stopped, gRPC's transport still returns window once (the bytes that
    arrived after the read look consumed; above 8 KiB the update goes out at once), so
    the server gets past the announced window, and no further than twice it. If a
    grpcio release stops doing this, this test says so (announcing the whole window
    would then be the bound)."""
    lookahead = 16384
    messages, per_message = asyncio.run(_written_after_one_read(lookahead))
    assert lookahead < messages * per_message <= 2 * lookahead


def test_the_proxy_reads_frames_split_anywhere() -> None:
    settings = frame(0x4, 0, 0, bytes.fromhex("000400000200"))  # INITIAL_WINDOW_SIZE 512
    update = frame(0x8, 0, 1, (496).to_bytes(4, "big"))
    data = frame(0x0, 0, 1, b"\x00\x00\x00\x00\x03\x0a\x01x")
    stream = PREFACE + settings + update + data
    reader = FrameReader(len(PREFACE))
    frames: list[Any] = []
    for index in range(len(stream)):  # one byte at a time
        frames.extend(reader.feed(stream[index : index + 1]))
    assert [(f.kind, f.stream_id, len(f.payload)) for f in frames] == [
        (4, 0, 6),
        (8, 1, 4),
        (0, 1, 8),
    ]
    assert initial_window(frames[0]) == 512
    assert initial_window(frames[1]) is None


def test_the_bound_names_its_parts() -> None:
    assert memory.bound(512) == {
        "announced_window_bytes": 512,
        "one_update_at_most_bytes": 512,
        "queue_chunks": 1,
        "reader_and_processor_chunks": 2,
        "chunks": 131,
    }
