"""How far can a producer run ahead of a consumer that stops reading?

Measures, in one run and side by side, the bytes a grpc.aio server manages to
write into one server stream whose client never calls read(): with gRPC's
default channel options, and with the consumer's bounded window of N
(``grpc.http2.lookahead_bytes`` = N / 2, ``grpc.http2.bdp_probe`` = 0: a client that
never reads gets no window back, so the server blocks at the announced half; one that
read and stopped gets one update of up to as much more, bench.memory).

    .venv/bin/python -m bench.flow_window [--seconds 2] [--chunk 1024]

Loopback only; the server stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc

from replywire.consumer.channels import channel_options
from replywire.consumer.options import StreamOptions
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.pb import replywire_pb2_grpc as pb_grpc


class Firehose(pb_grpc.ReplyStreamServicer):
    """Writes fixed-size chunks as fast as flow control lets it, counting what was written."""

    def __init__(self, chunk: int) -> None:
        self.chunk = b"x" * chunk
        self.written = 0

    async def Cancel(  # noqa: N802
        self, request: pb.CancelRequest, context: Any
    ) -> pb.CancelReply:
        return pb.CancelReply()

    async def Open(  # noqa: N802
        self, request: pb.OpenRequest, context: Any
    ) -> AsyncIterator[pb.Chunk]:
        while True:
            yield pb.Chunk(data=self.chunk)
            self.written += len(self.chunk)


async def measure(options: list[tuple[str, int | str]], seconds: float, chunk: int) -> int:
    server = grpc.aio.server()
    firehose = Firehose(chunk)
    pb_grpc.add_ReplyStreamServicer_to_server(firehose, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
            call = pb_grpc.ReplyStreamStub(channel).Open(pb.OpenRequest())
            await call.initial_metadata()
            await asyncio.sleep(seconds)  # never read
            call.cancel()
    finally:
        await server.stop(0)
    return firehose.written


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--chunk", type=int, default=1024)
    args = parser.parse_args()
    rows = {}
    rows["grpc defaults"] = await measure([], args.seconds, args.chunk)
    for window in (64 * 1024, 16 * 1024):
        bounded = channel_options(StreamOptions(target="", window_bytes=window))
        rows[f"window {window // 1024} KiB, BDP off"] = await measure(
            bounded, args.seconds, args.chunk
        )
    print(json.dumps({"chunk_bytes": args.chunk, "seconds_unread": args.seconds,
                      "bytes_written_before_blocking": rows}, indent=2))  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
