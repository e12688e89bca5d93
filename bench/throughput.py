"""What does replywire cost over a bare grpcio stream of the same chunks?

One run, side by side, on loopback: for each chunking, N streams of the same
case through (a) a bare grpc.aio server stream of the pre-cut chunks read by a
bare client, and (b) the replywire producer and consumer (request checks,
binding, framing, the reader/queue edge, the sans-IO core, reply validation).
Reports streams per second and the ratio; the absolute numbers depend on the
machine, the ratio is the figure to compare.

    .venv/bin/python -m bench.throughput [--streams 200] [--case utf8-write]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import structlog

from consumer.client import StreamOptions, channel_options, stream_reply
from producer.server import ServerSettings, start_server
from runtime.recording_file import load_recording
from shared.faults import transmit
from shared.pb import replywire_pb2 as pb
from shared.pb import replywire_pb2_grpc as pb_grpc
from shared.recording import Recording
from shared.requests import ReplyRequest
from shared.wire import WireFormat
from shared.wire.chunking import ChunkPlan


class Bare(pb_grpc.ReplyStreamServicer):
    def __init__(self, chunks: tuple[bytes, ...]) -> None:
        self.chunks = chunks

    async def Cancel(  # noqa: N802
        self, request: pb.CancelRequest, context: Any
    ) -> pb.CancelReply:
        return pb.CancelReply()

    async def Open(  # noqa: N802
        self, request: pb.OpenRequest, context: Any
    ) -> AsyncIterator[pb.Chunk]:
        for data in self.chunks:
            yield pb.Chunk(data=data)


async def bare(chunks: tuple[bytes, ...], streams: int) -> float:
    server = grpc.aio.server()
    pb_grpc.add_ReplyStreamServicer_to_server(Bare(chunks), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    options = channel_options(StreamOptions(target=""))
    started = time.perf_counter()
    for _ in range(streams):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
            received = 0
            async for chunk in pb_grpc.ReplyStreamStub(channel).Open(pb.OpenRequest()):
                received += len(chunk.data)
    elapsed = time.perf_counter() - started
    await server.stop(0)
    return streams / elapsed


async def replywire(recording: Recording, case_id: str, plan: ChunkPlan, streams: int) -> float:
    server, port, _ = await start_server(
        recording, ServerSettings(host="127.0.0.1", port=0, allow_faults=False)
    )
    case = recording.case(case_id)
    log = structlog.get_logger()
    started = time.perf_counter()
    for index in range(streams):
        request = ReplyRequest(
            case_id=case_id,
            binding=case.binding,
            wire=WireFormat.LENGTH_PREFIXED,
            plan=plan,
            stream_id=f"bench-{index}",
        )
        options = StreamOptions(target=f"127.0.0.1:{port}")
        result = await stream_reply(request, options, logger=log)
        assert result.status.value == "complete", result.reason
    elapsed = time.perf_counter() - started
    await server.stop(0)
    return streams / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--case", default="utf8-write")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    recording = load_recording()
    rows = []
    for chunking in ("frame", "64", "1,2,7,3,11"):
        plan = ChunkPlan.parse(chunking)
        chunks = transmit(
            recording.case(args.case), wire=WireFormat.LENGTH_PREFIXED, plan=plan
        ).chunks
        bare_rate = await bare(chunks, args.streams)
        ours = await replywire(recording, args.case, plan, args.streams)
        rows.append(
            {
                "chunks": chunking,
                "chunks_per_stream": len(chunks),
                "bare_grpc_streams_per_s": round(bare_rate, 1),
                "replywire_streams_per_s": round(ours, 1),
                "replywire_over_bare": round(ours / bare_rate, 3),
            }
        )
    print(json.dumps({"case": args.case, "streams": args.streams, "runs": rows}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
